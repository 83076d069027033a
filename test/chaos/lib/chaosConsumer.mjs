/**
 * The payments consumer under chaos, shared by the consumer child process
 * (consumerChild.mjs) and the in-process "virtual processes" of the memory broker.
 *
 * The handler is the payments scenario: insert a payment row through `ctx.tx`, charge
 * the fake payment provider with `ctx.idempotencyKey('charge')`, record the charge ID on
 * the row. Faults planted around it:
 *
 * - lost acks: a share of acks after the commit never reach the broker;
 * - handler stalls longer than the broker lease;
 * - crash points, armed by the runner: `before-commit` freezes the handler after the
 *   insert and the charge, inside the open transaction; `after-commit` freezes the ack
 *   of a message whose transaction just committed. The runner then SIGKILLs the
 *   process (or kills the virtual process);
 * - optionally a deliberate defect (`plan.defect`), to prove the check can fail.
 */
import { Consumer } from '@oncely/core';
import { seededRandom } from '@oncely/memory';
import { withSettlements } from '@oncely/testkit';
import { paymentStatements } from './chaosStore.mjs';
import { interceptDeliveries, messageIdOf } from './deliveryFaults.mjs';

/** The handler run of each consumer process that stalls past the lease whatever the dice say. */
const FORCED_STALL_RUN = 20;

/** Event names counted and reported to the runner. */
export const COUNTED_EVENTS = /** @type {const} */ ([
  'received',
  'processed',
  'duplicate',
  'failed',
  'retried',
  'deadLettered',
  'ackFailed',
  'leaseLost',
  'storeUnavailable',
  'storeRecovered',
  'released',
]);

/**
 * @typedef {object} ConsumerPlan What the runner hands one consumer (JSON-safe).
 * @property {string} label for logs, e.g. `slot-1/gen-2`
 * @property {{ name: string, concurrency: number, maxAttempts: number, backoff: { initialMs: number, maxMs: number },
 *   handlerTimeoutMs: number, leaseRenewal: boolean, outageHoldMs: number, stopTimeoutMs: number,
 *   idStrategy?: import('@oncely/core').IdStrategy }} consumer
 * @property {string} paymentsTable qualified, already quoted
 * @property {import('./chaosStore.mjs').StoreKind} [store] which store (and SQL dialect): postgres by default
 * @property {string} providerUrl base URL of the fake payment provider
 * @property {{ seed: number, ackLoss: number, stallRate: number, stallMs: number, failFirstRate?: number }} faults
 * @property {string | undefined} defect
 */

/**
 * @typedef {{ type: 'events', counts: Record<string, number> }
 *   | { type: 'crash-point', point: 'before-commit' | 'after-commit', messageId: string }
 *   | { type: 'ack-dropped', messageId: string }} ConsumerReport
 */

/**
 * Builds and starts the consumer.
 *
 * @param {object} input
 * @param {ConsumerPlan} input.plan
 * @param {import('@oncely/core').IdempotencyStore} input.store
 * @param {import('@oncely/core').AdapterModule} input.adapterModule
 * @param {import('@oncely/core').BrokerConfig} input.brokerConfig
 * @param {(report: ConsumerReport) => void} input.report
 * @param {() => Promise<never>} input.freeze what a crash point waits on (forever, or until the virtual process is killed)
 * @param {import('@oncely/core').Logger} input.logger
 * @param {(adapter: import('@oncely/core').BrokerAdapter) => import('@oncely/core').BrokerAdapter} [input.wrapAdapter]
 *   innermost wrapper (the virtual process's kill switch)
 */
export async function startChaosConsumer(input) {
  const { plan, store, adapterModule, brokerConfig, report, freeze, logger } = input;
  const random = seededRandom(plan.faults.seed);
  let handlerRuns = 0;
  /** @type {'before-commit' | 'after-commit' | undefined} */
  let armed;
  /**
   * Ends the current crash point's freeze: the runner disarms when it gave up waiting for
   * the crash point (a loaded machine), and its disarm may come just after the point was
   * reached. Without it that process stayed frozen for good, holding its message, and no
   * kill came for it.
   * @type {(() => void) | undefined}
   */
  let thaw;
  const crashPoint = () =>
    Promise.race([
      freeze(),
      new Promise((resolve) => {
        thaw = () => resolve(undefined);
      }),
    ]);
  /** IDs whose transaction just committed (set by 'processed', read by the ack that follows). */
  const justProcessed = new Set();

  // ---- counts, sent in batches (at most one message per tick) ----
  /** @type {Record<string, number>} */
  let pending = {};
  let flushQueued = false;
  const count = (/** @type {string} */ name) => {
    pending[name] = (pending[name] ?? 0) + 1;
    if (!flushQueued) {
      flushQueued = true;
      setImmediate(flush);
    }
  };
  function flush() {
    flushQueued = false;
    const counts = pending;
    pending = {};
    if (Object.keys(counts).length > 0) report({ type: 'events', counts });
  }

  // ---- the defect (if any) ----
  if (plan.defect === 'marker-separate-commit') {
    // The marker commits in its own transaction before the work: a crash in between
    // leaves a marker with no payment, and the redelivery skips it as a duplicate.
    const claim = store.claim.bind(store);
    store.claim = (_tx, consumer, ids) => store.transaction((own) => claim(own, consumer, ids));
  }

  const adapterOptions = {
    consumerName: plan.consumer.name,
    log: logger,
    maxAttempts: plan.consumer.maxAttempts,
    handlerTimeoutMs: plan.consumer.handlerTimeoutMs,
    outageHoldMs: plan.consumer.outageHoldMs,
  };
  let adapter = adapterModule.createAdapter(brokerConfig, adapterOptions);
  if (input.wrapAdapter) adapter = input.wrapAdapter(adapter);
  const idStrategy = plan.consumer.idStrategy ?? adapter.defaultIdStrategy;
  if (plan.defect === 'ack-before-commit') {
    // Acks on receipt, before anything commits: a crash before the commit loses the message.
    adapter = interceptDeliveries(adapter, async (delivery, dispatch) => {
      await delivery.ack();
      const settled = async () => {};
      return dispatch(
        withSettlements(delivery, {
          ack: settled,
          retryLater: settled,
          deadLetter: settled,
          release: settled,
        }),
      );
    });
  }
  adapter = interceptDeliveries(adapter, (delivery, dispatch) => {
    const messageId = messageIdOf(idStrategy, delivery);
    return dispatch(
      withSettlements(delivery, {
        ack: async () => {
          const committed = messageId !== undefined && justProcessed.delete(messageId);
          if (committed && armed === 'after-commit') {
            armed = undefined;
            report({ type: 'crash-point', point: 'after-commit', messageId });
            await crashPoint();
          }
          if (messageId !== undefined && random() < plan.faults.ackLoss) {
            // The core believes the ack went out; the broker never hears of it.
            count('ackDropped');
            report({ type: 'ack-dropped', messageId });
            return;
          }
          await delivery.ack();
        },
      }),
    );
  });

  const table = plan.paymentsTable;
  const statements = paymentStatements(plan.store ?? 'postgres', table);
  const consumer = new Consumer(
    {
      name: plan.consumer.name,
      broker: brokerConfig,
      store,
      concurrency: plan.consumer.concurrency,
      maxAttempts: plan.consumer.maxAttempts,
      idStrategy,
      backoff: plan.consumer.backoff,
      handlerTimeoutMs: plan.consumer.handlerTimeoutMs,
      leaseRenewal: plan.consumer.leaseRenewal,
      outageHoldMs: plan.consumer.outageHoldMs,
      stopTimeoutMs: plan.consumer.stopTimeoutMs,
      logger,
      handler: async (message, ctx) => {
        const order = /** @type {{ orderId?: unknown, amountCents?: unknown }} */ (message.body);
        if (typeof order?.orderId !== 'string' || typeof order.amountCents !== 'number') {
          throw new Error(`message ${message.id} is not an order`);
        }
        // A planned failure of a first attempt: the message takes a delayed retry.
        if (ctx.attempt === 1 && random() < (plan.faults.failFirstRate ?? 0)) {
          count('plannedFailures');
          throw new Error(`planned failure of ${message.id}`);
        }
        const paymentId = await statements.insert(ctx.tx, [order.orderId, order.amountCents, plan.label]);
        // At a rate of 0.3 % a small run may draw no stall at all; the 20th run of every
        // consumer process stalls regardless, so the fault the test asserts always fires.
        if (++handlerRuns === FORCED_STALL_RUN || random() < plan.faults.stallRate) {
          count('stalls');
          await sleep(plan.faults.stallMs, ctx.signal);
        }
        const charge = await chargeProvider(
          plan.providerUrl,
          {
            orderId: order.orderId,
            amountCents: order.amountCents,
            idempotencyKey: plan.defect === 'no-idempotency-key' ? undefined : ctx.idempotencyKey('charge'),
          },
          ctx.signal,
        );
        await ctx.tx.query(statements.setCharge, [charge.id, paymentId]);
        if (armed === 'before-commit') {
          // Inserted and charged, not committed: the process dies here.
          armed = undefined;
          report({ type: 'crash-point', point: 'before-commit', messageId: message.id });
          await crashPoint();
        }
      },
    },
    adapter,
  );
  for (const name of COUNTED_EVENTS) consumer.on(name, () => count(name));
  consumer.on('processed', (event) => {
    if (event.messageId !== undefined) justProcessed.add(event.messageId);
  });
  await consumer.start();
  return {
    consumer,
    /** @param {'before-commit' | 'after-commit'} point */
    arm(point) {
      armed = point;
    },
    disarm() {
      armed = undefined;
      thaw?.();
      thaw = undefined;
    },
    async stop() {
      await consumer.stop();
      flush();
    },
    flush,
  };
}

/**
 * POSTs a charge to the fake provider (lib/ledgerProvider.mjs), with the
 * `Idempotency-Key` header when a key is given.
 *
 * @param {string} baseUrl
 * @param {{ orderId: string, amountCents: number, idempotencyKey: string | undefined }} request
 * @param {AbortSignal} signal
 * @returns {Promise<{ id: string }>}
 */
async function chargeProvider(baseUrl, request, signal) {
  /** @type {Record<string, string>} */
  const headers = { 'content-type': 'application/json' };
  if (request.idempotencyKey !== undefined) headers['idempotency-key'] = request.idempotencyKey;
  const response = await fetch(`${baseUrl}/v1/charges`, {
    method: 'POST',
    headers,
    body: JSON.stringify({ orderId: request.orderId, amountCents: request.amountCents }),
    signal,
  });
  const answer = /** @type {{ id: string, error?: string }} */ (await response.json());
  if (!response.ok) throw new Error(`provider refused the charge (${response.status}): ${answer.error}`);
  return answer;
}

/** @param {number} ms @param {AbortSignal} signal */
function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const timer = setTimeout(resolve, ms);
    signal.addEventListener(
      'abort',
      () => {
        clearTimeout(timer);
        reject(signal.reason);
      },
      { once: true },
    );
  });
}
