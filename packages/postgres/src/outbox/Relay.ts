import { EventEmitter } from 'node:events';
import type {
  BackoffConfig,
  Logger,
  OutboxMessage,
  OutboxProducer,
  OutboxSendResult,
  SqlClient,
} from '@oncely/core';
import { ConfigError, GaugeReadLog, retryDelayMs, stderrLogger } from '@oncely/core';
import type { PostgresStore } from '../PostgresStore.js';
import type { OutboxQueries } from './outboxQueries.js';
import { type OutboxStats, readOutboxStats } from './PostgresOutbox.js';
import { relayBackoff } from './relayBackoff.js';
import { withinSendTimeout } from './sendTimeout.js';

/** The channel the outbox trigger notifies (payload: the schema name). */
export const OUTBOX_CHANNEL = 'oncely_outbox';

/**
 * Options of {@link createRelay}.
 *
 * @example
 * ```ts
 * createRelay({ store, producers: { receipts: sqsProducer, '*': rabbitProducer }, batchSize: 200 });
 * ```
 */
export interface RelayOptions {
  store: PostgresStore;
  /**
   * Who sends each row: one producer for every destination, or a map from destination to
   * producer with `'*'` as the fallback. A row whose destination has no producer fails
   * (and is retried, then dead-lettered) like a failed send.
   */
  producers: OutboxProducer | Readonly<Record<string, OutboxProducer>>;
  /** Rows claimed per round. @default 100 */
  batchSize?: number;
  /** How often to look for rows when no notification arrives. @default 1000 */
  pollIntervalMs?: number;
  /** Wake on `LISTEN oncely_outbox` notifications (a connection of its own on `pg`). @default true */
  listen?: boolean;
  /** Failed sends of one row before it is dead-lettered (status `failed`, with its reason). @default 10 */
  maxAttempts?: number;
  /**
   * Delay before a failed row is sent again, checked as a consumer's `backoff` (`ConfigError`
   * otherwise). @default { initialMs: 1000, maxMs: 60000 }
   */
  backoff?: Partial<BackoffConfig>;
  /**
   * How long one producer's `send()` may take before its messages of the round count as a
   * failed (retried) send. A send that never settles, such as a broker that holds the
   * connection and never confirms, would otherwise hold the round, its claim and its
   * transaction for ever, with every other destination's rows and `stop()` behind it. A
   * send that answers after this is not undone: its messages go out again with the same
   * IDs (at least once, as after a crash). Keep it above the producer's own retries.
   * @default 120000
   */
  sendTimeoutMs?: number;
  /** Names the relay in metrics. @default 'relay' */
  name?: string;
  /** @default core's stderr logger */
  logger?: Logger;
}

/**
 * What a round of the relay did.
 *
 * @example
 * ```ts
 * const { sent, failed } = await relay.runOnce();
 * ```
 */
export interface RelayRound {
  /** Rows claimed (sent, failed, or held back behind an earlier row of their key). */
  claimed: number;
  sent: number;
  failed: number;
  deadLettered: number;
}

/**
 * Payload of the relay's `sent`, `failed` and `deadLettered` events (one per row).
 *
 * @example
 * ```ts
 * relay.on('deadLettered', (event: RelayEvent) => log.error('outbox row dead-lettered', event));
 * ```
 */
export interface RelayEvent {
  relay: string;
  id: string;
  destination: string;
  key?: string;
  /** The send attempt this was (1 = first). */
  attempt: number;
  error?: unknown;
}

interface ClaimedRow {
  position: string;
  id: string;
  destination: string;
  key: string | null;
  body: Uint8Array;
  attributes: Record<string, string> | string;
  attempts: number;
}

interface Outcome {
  row: ClaimedRow;
  result: OutboxSendResult;
}

/** Counter and gauge of @opentelemetry/api, structurally, so the package does not need it. */
interface RelayInstruments {
  counter: { add(value: number, attributes?: Record<string, string>): void };
}

/** An @opentelemetry/api batch observable callback, structurally. */
type RelayGaugeCallback = (result: {
  observe(observable: object, value: number, attributes?: Record<string, string>): void;
}) => Promise<void>;

/** The part of an @opentelemetry/api Meter the relay uses, structurally. */
interface RelayMeter {
  createCounter(name: string, options?: { description?: string }): RelayInstruments['counter'];
  createObservableGauge(name: string, options?: { description?: string; unit?: string }): object;
  addBatchObservableCallback(callback: RelayGaugeCallback, observables: object[]): void;
  removeBatchObservableCallback(callback: RelayGaugeCallback, observables: object[]): void;
}

/** The gauges' batch callback and what it observes, kept to add it at start and remove it at stop. */
interface RelayGauges {
  meter: RelayMeter;
  callback: RelayGaugeCallback;
  observables: object[];
  /** On the meter now. */
  registered: boolean;
}

/**
 * How long the gauges' stats query may run (a server-side statement timeout): a locked or
 * slow table must not hold up the metric collection of the whole process.
 */
const GAUGE_QUERY_TIMEOUT_MS = 5_000;
/**
 * How long a collection waits for the gauges' stats, pooled connection and transaction
 * included; the statement timeout cuts the query itself off first on a real server.
 */
const GAUGE_QUERY_WAIT_MS = GAUGE_QUERY_TIMEOUT_MS + 1_000;

const SETTLE_START_MS = 10;

/**
 * The outbox relay: sends committed outbox rows through the producers, at least once,
 * each with its stable ID, and marks a row sent only after the broker confirmed it.
 *
 * - Reads only rows whose writing transaction is below the snapshot's xmin, in
 *   `(xid, position)` order: a row that commits late is never skipped.
 * - Several relays may run: rows are locked `FOR UPDATE SKIP LOCKED` for the round (the
 *   claim, the sends and the marks are one transaction). The claim takes a key's rows
 *   only when the key's head is due and no other relay holds the key (a transaction
 *   advisory lock per key), so per-key order holds, no row is sent by two relays at
 *   once, and a key waiting out a backoff takes no room in a round. A relay that dies mid-round leaves its rows pending: they are
 *   sent again, with the same IDs.
 * - Messages of one key are sent one at a time (in waves, many keys per wave); a failure
 *   stops that key for the round and retries it after a backoff; after `maxAttempts`
 *   failures (or one permanent one) the row is dead-lettered and the key moves on.
 * - Wakes on `LISTEN/NOTIFY` (PGlite too, in-process), polls as the fallback.
 *
 * Events: `sent`, `failed`, `deadLettered` ({@link RelayEvent}), `error` (a round that
 * failed, for instance the database is down; the relay keeps trying). OpenTelemetry:
 * the counter `oncely.outbox.messages{event}` and the gauges `oncely.outbox.lag` (ms),
 * `oncely.outbox.pending` and `oncely.outbox.failed` (rows), when `@opentelemetry/api` is
 * installed (one bounded stats query per collection; a failed one observes nothing). The
 * gauges' callback is on the meter only while the relay runs: `stop()` removes it.
 *
 * @example
 * ```ts
 * const relay = createRelay({ store, producers: { 'payments-made': createSqsProducer({ client }) } });
 * await relay.start();
 * // ...
 * await relay.stop();
 * ```
 */
export class Relay extends EventEmitter {
  readonly name: string;
  private readonly store: PostgresStore;
  private readonly queries: OutboxQueries;
  private readonly producerFor: (destination: string) => OutboxProducer | undefined;
  private readonly batchSize: number;
  private readonly pollIntervalMs: number;
  private readonly useListen: boolean;
  private readonly maxAttempts: number;
  private readonly backoff: BackoffConfig;
  private readonly sendTimeoutMs: number;
  private readonly log: Logger;
  private running: Promise<void> | undefined;
  /** The start() in progress: a second start() is refused, a stop() waits for it. */
  private starting: Promise<void> | undefined;
  private stopping = false;
  private woken = false;
  private wake: (() => void) | undefined;
  private unlisten: (() => Promise<void>) | undefined;
  private listening = false;
  private instruments: RelayInstruments | undefined;
  /**
   * The gauges' callback: on the meter only while the loop runs, so a stopped relay is not
   * kept alive by the meter, and a restart adds it once.
   */
  private gauges: RelayGauges | undefined;
  /** The gauges' stats query while it runs (settled either way). */
  private gaugeQuery: Promise<void> | undefined;
  /** Logs the gauges' stats query starting to fail, and answering again. */
  private readonly gaugeFailures: GaugeReadLog;

  constructor(options: RelayOptions) {
    super();
    if (typeof options !== 'object' || options === null)
      throw new ConfigError('relay', 'options are required');
    const { store, producers } = options;
    if (!store || typeof (store as { transaction?: unknown }).transaction !== 'function' || !store.outbox) {
      throw new ConfigError('store', 'must be a PostgresStore');
    }
    this.store = store;
    this.queries = store.outbox.queries;
    this.producerFor = producerLookup(producers);
    this.batchSize = positiveInteger('batchSize', options.batchSize ?? 100);
    this.pollIntervalMs = positiveInteger('pollIntervalMs', options.pollIntervalMs ?? 1000);
    this.maxAttempts = positiveInteger('maxAttempts', options.maxAttempts ?? 10);
    this.useListen = options.listen ?? true;
    this.backoff = relayBackoff(options.backoff);
    this.sendTimeoutMs = positiveInteger('sendTimeoutMs', options.sendTimeoutMs ?? 120_000);
    this.name = options.name ?? 'relay';
    this.log = options.logger ?? stderrLogger;
    this.gaugeFailures = new GaugeReadLog(
      this.log,
      {
        failing: 'outbox relay gauges: the stats query failed; the gauges observe nothing until it answers',
        recovered: 'outbox relay gauges: the stats query answers again',
      },
      { relay: this.name },
    );
    // Unhandled 'error' events would crash the process; the relay reports and carries on.
    this.on('error', () => {});
  }

  /**
   * Starts the loop: a round at once, then one on each notification or poll interval.
   * A second `start()` while started (or starting) rejects with a `ConfigError`; after
   * `stop()` the relay can be started again.
   *
   * @example
   * ```ts
   * await relay.start();
   * ```
   */
  start(): Promise<void> {
    // Checked and set with no await in between: two concurrent calls cannot both pass.
    if (this.store.closed)
      return Promise.reject(new ConfigError('store', 'is closed; the relay cannot start'));
    if (this.running || this.starting) return Promise.reject(new ConfigError('relay', 'is already started'));
    this.stopping = false;
    const starting = this.begin().finally(() => {
      if (this.starting === starting) this.starting = undefined;
    });
    this.starting = starting;
    return starting;
  }

  /**
   * Stops: a `start()` in progress is waited for, the round in progress finishes (its
   * sends are marked), then the loop ends and the notification connection is released
   * (its UNLISTEN bounded by the store's `queryTimeoutMs`, like every statement: a silent
   * database cannot hold stop()). Producers stay open (they are yours).
   *
   * @example
   * ```ts
   * await relay.stop();
   * await producer.close();
   * ```
   */
  async stop(): Promise<void> {
    this.stopping = true;
    // A stop() during start(): let start() finish (it then starts no loop), so its LISTEN
    // connection is known here and released below, not leaked.
    await this.starting?.catch(() => {});
    this.unregisterGauges();
    this.wake?.();
    await this.running;
    this.running = undefined;
    const unlisten = this.unlisten;
    this.unlisten = undefined;
    this.listening = false;
    await unlisten?.().catch(() => {});
  }

  private async begin(): Promise<void> {
    await this.initMetrics();
    if (!this.stopping) await this.subscribe();
    // stop() was called meanwhile: it is waiting for this start and releases the LISTEN.
    if (this.stopping) return;
    this.running = this.loop();
    this.registerGauges();
  }

  /**
   * One round: claims up to `batchSize` rows, sends them, marks the outcome, commits.
   * What `start()` runs in a loop; useful in tests and in hand-driven setups (a cron).
   *
   * @example
   * ```ts
   * while ((await relay.runOnce()).claimed > 0);
   * ```
   */
  async runOnce(): Promise<RelayRound> {
    const outcomes: Outcome[] = [];
    const round = await this.store.transaction(async (tx) => {
      const { rows } = await tx.query<ClaimedRow>(this.queries.claim, [this.batchSize]);
      if (rows.length === 0) return { claimed: 0, sent: 0, failed: 0, deadLettered: 0 };
      const sendable = await this.keyHeads(tx, rows);
      outcomes.push(...(await this.sendInWaves(sendable)));
      return this.mark(tx, rows.length, outcomes);
    });
    // Only after the commit: a rolled-back round sent nothing the database remembers.
    for (const { row, result } of outcomes) {
      const event: RelayEvent = {
        relay: this.name,
        id: row.id,
        destination: row.destination,
        ...(row.key !== null ? { key: row.key } : {}),
        attempt: Number(row.attempts) + 1,
        ...(result.ok ? {} : { error: result.error }),
      };
      const name = result.ok ? 'sent' : this.isDead(row, result) ? 'deadLettered' : 'failed';
      this.instruments?.counter.add(1, { relay: this.name, event: name, destination: row.destination });
      this.emit(name, event);
    }
    return round;
  }

  /**
   * The oldest pending row's age in ms (database clock), or null when nothing is pending.
   *
   * @example
   * ```ts
   * console.log('relay lag', await relay.lag());
   * ```
   */
  async lag(): Promise<number | null> {
    return (await this.store.outbox.stats()).lagMs;
  }

  private async loop(): Promise<void> {
    let settleMs = SETTLE_START_MS;
    let errorMs = SETTLE_START_MS;
    while (!this.stopping) {
      if (this.store.closed) return this.endOnStoreClosed();
      if (this.useListen && !this.listening) await this.subscribe();
      this.woken = false;
      let waitMs = this.pollIntervalMs;
      try {
        const round = await this.runOnce();
        errorMs = SETTLE_START_MS;
        if (round.claimed >= this.batchSize && round.sent + round.failed + round.deadLettered > 0) continue;
        if (round.claimed > 0) settleMs = SETTLE_START_MS;
        const state = await this.pendingState();
        if (state.unsettled) {
          // Rows exist whose writers (or older transactions) are still open: look again
          // soon, backing off while a long transaction holds the snapshot's xmin back.
          waitMs = settleMs;
          settleMs = Math.min(settleMs * 2, this.pollIntervalMs);
        } else {
          settleMs = SETTLE_START_MS;
        }
        if (state.nextDueMs !== null) waitMs = Math.min(waitMs, Math.max(state.nextDueMs, 1));
      } catch (error) {
        // The pool ended under the round (its rows stay pending): not a failure to retry.
        if (this.store.closed) continue;
        this.log.warn('outbox relay round failed; retrying', { relay: this.name, error });
        this.emit('error', error);
        waitMs = errorMs;
        errorMs = Math.min(errorMs * 2, this.pollIntervalMs);
      }
      await this.sleep(waitMs);
    }
  }

  /**
   * store.close() while the relay ran: every round would fail on the closed pool for
   * ever, so the loop ends and says so once. A later stop() returns at once.
   */
  private async endOnStoreClosed(): Promise<void> {
    const error = new ConfigError(
      'store',
      'was closed while the relay was running; the relay stopped (unsent rows stay pending). Call relay.stop() before store.close()',
    );
    this.unregisterGauges();
    this.log.error(`outbox relay stopped: the store ${error.problem}`, { relay: this.name });
    this.emit('error', error);
    const unlisten = this.unlisten;
    this.unlisten = undefined;
    this.listening = false;
    await unlisten?.().catch(() => {});
  }

  /**
   * Keeps, per key, the claimed rows that continue the key's head in the key's order
   * (commit order), and returns them in that order. The claim already took only keys this
   * relay holds and whose head is due; this only trims where its LIMIT cut a key's rows.
   */
  private async keyHeads(tx: SqlClient, rows: ClaimedRow[]): Promise<ClaimedRow[]> {
    const keyed = new Map<string, Map<string, ClaimedRow>>();
    for (const row of rows) {
      if (row.key === null) continue;
      const byPosition = keyed.get(row.key) ?? new Map<string, ClaimedRow>();
      byPosition.set(String(row.position), row);
      keyed.set(row.key, byPosition);
    }
    if (keyed.size === 0) return rows;
    const { rows: heads } = await tx.query<{ key: string; position: string }>(this.queries.keyHeads, [
      [...keyed.keys()],
      this.batchSize,
    ]);
    const kept: ClaimedRow[] = rows.filter((row) => row.key === null);
    const cut = new Set<string>();
    for (const head of heads) {
      if (cut.has(head.key)) continue;
      const row = keyed.get(head.key)?.get(String(head.position));
      if (row) kept.push(row);
      else cut.add(head.key);
    }
    return kept;
  }

  /**
   * Sends in waves: wave n holds the n-th row of every key (and, in the first, every row
   * without a key), so a key never has two messages unconfirmed at once, and a key whose
   * row failed sends nothing more this round.
   */
  private async sendInWaves(rows: ClaimedRow[]): Promise<Outcome[]> {
    const perKey = new Map<string, ClaimedRow[]>();
    const waves: ClaimedRow[][] = [[]];
    for (const row of rows) {
      if (row.key === null) {
        waves[0]!.push(row);
        continue;
      }
      const list = perKey.get(row.key) ?? [];
      list.push(row);
      perKey.set(row.key, list);
    }
    const stopped = new Set<string>();
    const outcomes: Outcome[] = [];
    for (let wave = 0; ; wave++) {
      const batch = [...(waves[wave] ?? [])];
      for (const [key, list] of perKey) if (!stopped.has(key) && list[wave]) batch.push(list[wave]!);
      if (batch.length === 0) return outcomes;
      for (const outcome of await this.send(batch)) {
        outcomes.push(outcome);
        if (!outcome.result.ok && outcome.row.key !== null) stopped.add(outcome.row.key);
      }
    }
  }

  /** Sends one wave, grouped by producer, the groups in parallel. */
  private async send(rows: ClaimedRow[]): Promise<Outcome[]> {
    const groups = new Map<OutboxProducer | undefined, ClaimedRow[]>();
    for (const row of rows) {
      const producer = this.producerFor(row.destination);
      const list = groups.get(producer) ?? [];
      list.push(row);
      groups.set(producer, list);
    }
    const results = await Promise.all(
      [...groups].map(async ([producer, group]): Promise<Outcome[]> => {
        if (!producer) {
          const error = new ConfigError(
            'producers',
            `has no producer for destination '${group[0]!.destination}'`,
          );
          return group.map((row) => ({ row, result: { ok: false, error } }));
        }
        let results: unknown;
        try {
          results = await withinSendTimeout(
            Promise.resolve(producer.send(group.map(toMessage))),
            group[0]!.destination,
            this.sendTimeoutMs,
          );
        } catch (error) {
          return group.map((row) => ({ row, result: { ok: false, error } }));
        }
        // A producer's bug must fail its own rows with a reason, not throw here: that rolled
        // the whole round back, so every other producer's rows, already sent, were sent
        // again each round, and these rows never counted an attempt.
        if (!Array.isArray(results)) {
          const error = new Error(
            `the producer's send() must resolve to an array of results (one per message); got ${describeValue(results)}`,
          );
          return group.map((row) => ({ row, result: { ok: false, error } }));
        }
        return group.map((row, i) => ({ row, result: checkedResult(results[i]) }));
      }),
    );
    return results.flat();
  }

  private async mark(tx: SqlClient, claimed: number, outcomes: Outcome[]): Promise<RelayRound> {
    const sent = outcomes.filter((o) => o.result.ok).map((o) => o.row.position);
    const failures = outcomes.filter((o) => !o.result.ok);
    if (sent.length > 0) await tx.query(this.queries.markSent, [sent]);
    let deadLettered = 0;
    if (failures.length > 0) {
      const dead = failures.map((o) => this.isDead(o.row, o.result));
      deadLettered = dead.filter(Boolean).length;
      await tx.query(this.queries.markFailed, [
        failures.map((o) => o.row.position),
        failures.map((o) => describe(o.result.ok ? undefined : o.result.error)),
        failures.map((o) => retryDelayMs(Number(o.row.attempts) + 1, this.backoff)),
        dead,
      ]);
    }
    return { claimed, sent: sent.length, failed: failures.length - deadLettered, deadLettered };
  }

  private isDead(row: ClaimedRow, result: OutboxSendResult): boolean {
    return !result.ok && (result.permanent === true || Number(row.attempts) + 1 >= this.maxAttempts);
  }

  private async pendingState(): Promise<{ unsettled: boolean; nextDueMs: number | null }> {
    return this.store.transaction(async (tx) => {
      const { rows } = await tx.query<{ unsettled: boolean; next_due_ms: number | null }>(
        this.queries.pendingState,
      );
      const row = rows[0];
      return {
        unsettled: row?.unsettled === true,
        nextDueMs: row?.next_due_ms == null ? null : Number(row.next_due_ms),
      };
    });
  }

  private async subscribe(): Promise<void> {
    if (!this.useListen || this.listening) return;
    try {
      const unlisten = await this.store.listen(
        OUTBOX_CHANNEL,
        (payload) => {
          if (payload === '' || payload === this.store.schema) this.wakeUp();
        },
        (error) => {
          this.listening = false;
          this.unlisten = undefined;
          // Ended by store.close(): wake the loop, which stops (no reconnect to warn of).
          if (this.store.closed) return this.wakeUp();
          this.log.warn('outbox relay lost its LISTEN connection; polling until it is back', {
            relay: this.name,
            error,
          });
        },
      );
      if (unlisten) {
        this.unlisten = unlisten;
        this.listening = true;
      }
    } catch (error) {
      // Polling still works; the next loop turn tries again.
      this.log.warn('outbox relay could not LISTEN; polling', { relay: this.name, error });
    }
  }

  private wakeUp(): void {
    this.woken = true;
    this.wake?.();
  }

  private sleep(ms: number): Promise<void> {
    if (this.woken || this.stopping) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(done, ms);
      function done() {
        clearTimeout(timer);
        resolve();
      }
      this.wake = () => {
        this.wake = undefined;
        done();
      };
    });
  }

  private async initMetrics(): Promise<void> {
    if (this.instruments) return;
    const moduleName = '@opentelemetry/api';
    try {
      const api = (await import(moduleName)) as { metrics: { getMeter(name: string): RelayMeter } };
      const meter = api.metrics.getMeter('@oncely/postgres');
      const counter = meter.createCounter('oncely.outbox.messages', {
        description: 'Outbox rows by outcome',
      });
      const lag = meter.createObservableGauge('oncely.outbox.lag', {
        description: 'Age of the oldest unsent outbox row (0 when none is pending)',
        unit: 'ms',
      });
      const pending = meter.createObservableGauge('oncely.outbox.pending', {
        description: 'Outbox rows waiting to be sent, rows waiting out a retry backoff included',
        unit: '{row}',
      });
      const failed = meter.createObservableGauge('oncely.outbox.failed', {
        description: 'Dead-lettered outbox rows (status failed): retry or discard them',
        unit: '{row}',
      });
      // One stats query per collection feeds the three gauges. Added by start(), removed
      // by stop() (registerGauges).
      const callback: RelayGaugeCallback = async (result) => {
        const stats = await this.backlogStats();
        if (!stats || !this.running || this.stopping) return;
        const attributes = { relay: this.name };
        result.observe(lag, stats.lagMs ?? 0, attributes);
        result.observe(pending, stats.pending, attributes);
        result.observe(failed, stats.failed, attributes);
      };
      this.gauges = { meter, callback, observables: [lag, pending, failed], registered: false };
      this.instruments = { counter };
    } catch {
      // Not installed: metrics stay off; events still fire.
    }
  }

  /** Puts the gauges' callback on the meter, once (the loop has just started). */
  private registerGauges(): void {
    const gauges = this.gauges;
    if (!gauges || gauges.registered) return;
    gauges.meter.addBatchObservableCallback(gauges.callback, gauges.observables);
    gauges.registered = true;
  }

  /**
   * Takes the gauges' callback off the meter (stop(), or the store closed under the loop):
   * the meter would otherwise keep the stopped relay, and its store, alive. A collection
   * running now finishes on its own (backlogStats sees the relay stopping).
   */
  private unregisterGauges(): void {
    const gauges = this.gauges;
    if (!gauges?.registered) return;
    gauges.registered = false;
    gauges.meter.removeBatchObservableCallback(gauges.callback, gauges.observables);
  }

  /**
   * The backlog for the gauges, or undefined when the relay is not running or the query
   * failed, or did not answer within {@link GAUGE_QUERY_WAIT_MS} (a wait for a pooled
   * connection, or a server that does not enforce the statement timeout: PGlite). Never
   * rejects: a gauge callback that throws would fail the whole collection, and a made-up 0
   * would hide a backlog. A query still running from an earlier collection is not doubled.
   * Failures are logged as a warning when they start (rate-limited), and the recovery at
   * info ({@link GaugeReadLog}).
   */
  private async backlogStats(): Promise<OutboxStats | undefined> {
    if (!this.running || this.stopping || this.gaugeQuery) return undefined;
    const query = this.store.transaction((tx) => readOutboxStats(tx, this.queries, GAUGE_QUERY_TIMEOUT_MS));
    const settled = query.then(
      () => {},
      () => {},
    );
    this.gaugeQuery = settled;
    void settled.finally(() => {
      if (this.gaugeQuery === settled) this.gaugeQuery = undefined;
    });
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new Error(`the stats query did not answer within ${GAUGE_QUERY_WAIT_MS} ms`)),
        GAUGE_QUERY_WAIT_MS,
      );
      timer.unref();
    });
    try {
      const stats = await Promise.race([query, timeout]);
      this.gaugeFailures.succeeded();
      return stats;
    } catch (error) {
      if (!this.stopping) this.gaugeFailures.failed(error);
      return undefined;
    } finally {
      clearTimeout(timer);
    }
  }
}

/**
 * Creates an outbox relay (not started). See {@link Relay}.
 *
 * @example
 * ```ts
 * import { createRelay } from '@oncely/postgres';
 * import { createRabbitMqProducer } from '@oncely/rabbitmq';
 *
 * const relay = createRelay({ store, producers: createRabbitMqProducer({ url: process.env.RABBITMQ_URL }) });
 * relay.on('deadLettered', (event) => console.error('outbox row dead-lettered', event));
 * await relay.start();
 * ```
 */
export function createRelay(options: RelayOptions): Relay {
  return new Relay(options);
}

function producerLookup(
  producers: RelayOptions['producers'],
): (destination: string) => OutboxProducer | undefined {
  if (!producers || typeof producers !== 'object') {
    throw new ConfigError('producers', 'must be an OutboxProducer or a map of destination to OutboxProducer');
  }
  if (typeof (producers as OutboxProducer).send === 'function') {
    const single = producers as OutboxProducer;
    return () => single;
  }
  const map = producers as Readonly<Record<string, OutboxProducer>>;
  for (const [destination, producer] of Object.entries(map)) {
    if (typeof producer?.send !== 'function') {
      throw new ConfigError(`producers.${destination}`, 'must be an OutboxProducer (an object with send())');
    }
  }
  return (destination) => (Object.hasOwn(map, destination) ? map[destination] : map['*']);
}

function toMessage(row: ClaimedRow): OutboxMessage {
  const attributes = typeof row.attributes === 'string' ? JSON.parse(row.attributes) : (row.attributes ?? {});
  return {
    id: row.id,
    destination: row.destination,
    body: row.body instanceof Uint8Array ? row.body : Buffer.from(row.body as unknown as string),
    ...(row.key !== null ? { key: row.key } : {}),
    attributes,
    attempt: Number(row.attempts) + 1,
  };
}

/** A producer's result as the relay can mark it: `{ ok: true }`, or a failure with a reason. */
function checkedResult(result: unknown): OutboxSendResult {
  if (result === undefined || result === null)
    return { ok: false, error: new Error('the producer returned no result for this message') };
  if (typeof result !== 'object' || typeof (result as { ok?: unknown }).ok !== 'boolean') {
    return {
      ok: false,
      error: new Error(
        `the producer returned not a result ({ ok: boolean }) for this message: ${describeValue(result)}`,
      ),
    };
  }
  return result as OutboxSendResult;
}

function describeValue(value: unknown): string {
  try {
    return typeof value === 'object' && value !== null ? JSON.stringify(value).slice(0, 200) : String(value);
  } catch {
    return Object.prototype.toString.call(value);
  }
}

function positiveInteger(field: string, value: number): number {
  if (!Number.isInteger(value) || value < 1)
    throw new ConfigError(field, `must be a positive integer; got ${value}`);
  return value;
}

function describe(error: unknown): string {
  if (error instanceof Error) {
    const code = (error as { code?: unknown }).code;
    return (typeof code === 'string' ? `${error.name} (${code}): ` : `${error.name}: `) + error.message;
  }
  return String(error);
}
