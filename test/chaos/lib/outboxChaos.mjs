/**
 * The outbox chaos run: a chain of two services across two brokers.
 *
 *   orders ──RabbitMQ──▶ payments (consumer A: payment row + ctx.publish "payment made")
 *          ──outbox rows──▶ relay ──SQS (fauxqs)──▶ receipts (consumer B: receipt row)
 *
 * Every process (A, relay, B; two of each) is a child process; the runner SIGKILLs them at
 * random while the orders flow and starts a new one of the same role 300 ms later. At the
 * end, counted from rows: every order has exactly one payment and exactly one receipt
 * (lost 0, doubled 0). With `defect: 'direct-publish'` consumer A sends the event to SQS
 * from the handler instead of through the outbox, and the same check must fail.
 *
 * With `failingDestination`, consumer A also publishes an audit event for every
 * `every`-th order (keyed, a few keys) to an audit exchange on RabbitMQ (the relay sends
 * those with the RabbitMQ producer, the rest to SQS), and keys the "payment made" events
 * by customer; consumer C (one process, never killed) applies the audits from a queue
 * bound to that exchange. At a quarter of the way the runner deletes the exchange for
 * `outageMs` (its queue and the messages in it stay) and SIGKILLs `relayKills` relays
 * during that stretch, then declares and binds it again. Measured: the healthy keys'
 * receipts kept coming during the outage, the audit rows waited (pending, retried), and in
 * the end every audit was applied once as well.
 */
import { fork } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, openSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CreateQueueCommand, SQSClient } from '@aws-sdk/client-sqs';
import { PostgresStore } from '@oncely/postgres';
import { publish } from '@oncely/rabbitmq';
import amqp from 'amqplib';
import { startFauxqs } from 'fauxqs';
import pg from 'pg';

process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';

const CHILD = fileURLToPath(new URL('./outboxChild.mjs', import.meta.url));
const ROOT = fileURLToPath(new URL('../../..', import.meta.url));
const CREDENTIALS = { accessKeyId: 'x', secretAccessKey: 'x' };
const REGION = 'us-east-1';
const ROLES = /** @type {const} */ (['payments', 'relay', 'receipts']);

/**
 * @typedef {object} OutboxChaosOptions
 * @property {number} [orders] distinct orders (default: 10000)
 * @property {number} [kills] SIGKILLs while orders flow (default: 24)
 * @property {number} [perRole] processes of each role at once (default: 2)
 * @property {number} [seed] (default: 42)
 * @property {'direct-publish'} [defect] consumer A publishes from the handler, no outbox
 * @property {ReadonlyArray<'payments' | 'relay' | 'receipts'>} [killRoles] roles the kills pick from (default: all)
 * @property {number} [timeoutMs] give up waiting for the chain to drain (default: 240000)
 * @property {string} [logDir] child logs (a temp dir removed when the run passes)
 * @property {{ every?: number, keys?: number, outageMs?: number, relayKills?: number, atFraction?: number }} [failingDestination]
 *   the audit destination that fails for a stretch (see above; default: none)
 * @property {string} [databaseUrl]
 * @property {string} [rabbitUrl]
 */

/** A small seeded PRNG (mulberry32), so a run's kill choices repeat. */
function prng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** @param {OutboxChaosOptions} options */
export async function runOutboxChaos(options = {}) {
  const orders = options.orders ?? 10_000;
  const kills = options.kills ?? 24;
  const perRole = options.perRole ?? 2;
  const killRoles = options.killRoles ?? ROLES;
  const random = prng(options.seed ?? 42);
  const databaseUrl =
    options.databaseUrl ?? process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
  const rabbitUrl = options.rabbitUrl ?? process.env.RABBITMQ_URL ?? 'amqp://guest:guest@127.0.0.1:5672';
  const timeoutMs = options.timeoutMs ?? 240_000;
  const runId = randomUUID().replaceAll('-', '').slice(0, 10);
  const schema = `chaos_outbox_${runId}`;
  const ownLogDir = !options.logDir;
  const logDir = options.logDir ?? mkdtempSync(join(tmpdir(), 'oncely-outbox-chaos-'));
  const started = Date.now();
  /** @type {Array<{ at: number, what: string }>} */
  const timeline = [];
  const note = (what) => timeline.push({ at: Date.now() - started, what });

  // The database: the store's tables and the two services' effects, without unique keys
  // so a doubled effect shows up as a second row.
  const admin = new pg.Pool({ connectionString: databaseUrl, max: 2 });
  const setup = new PostgresStore({ connectionString: databaseUrl, schema, poolMax: 2 });
  await setup.migrate();
  await setup.close();
  await admin.query(
    `CREATE TABLE "${schema}".payments (order_id text NOT NULL, at timestamptz DEFAULT clock_timestamp())`,
  );
  await admin.query(
    `CREATE TABLE "${schema}".receipts (order_id text NOT NULL, at timestamptz DEFAULT clock_timestamp())`,
  );
  await admin.query(
    `CREATE TABLE "${schema}".audits (order_id text NOT NULL, at timestamptz DEFAULT clock_timestamp())`,
  );
  const failing = options.failingDestination
    ? {
        every: options.failingDestination.every ?? 5,
        keys: options.failingDestination.keys ?? 3,
        outageMs: options.failingDestination.outageMs ?? 6000,
        relayKills: options.failingDestination.relayKills ?? 2,
        atFraction: options.failingDestination.atFraction ?? 0.25,
      }
    : undefined;
  const audited = (n) => failing !== undefined && n % failing.every === 0;
  const expectedAudits = failing ? Math.ceil(orders / failing.every) : 0;

  // SQS on fauxqs, in this process (it outlives every child).
  const fauxqs = await startFauxqs({ port: 0, logger: false });
  const sqs = new SQSClient({ endpoint: fauxqs.address, region: REGION, credentials: CREDENTIALS });
  const receiptsQueue = `oncely-outbox-chaos-${runId}`;
  const queueUrl = (
    await sqs.send(
      new CreateQueueCommand({ QueueName: receiptsQueue, Attributes: { VisibilityTimeout: '5' } }),
    )
  ).QueueUrl;

  const auditExchange = `oncely-outbox-chaos-audit-${runId}`;
  const auditQueue = `oncely-outbox-chaos-audits-${runId}`;

  // RabbitMQ: the orders queue (the consumer declares its topology; the runner publishes).
  const ordersQueue = `oncely-outbox-chaos-${runId}`;
  const connection = await amqp.connect(rabbitUrl);
  connection.on('error', () => {});
  const channel = await connection.createConfirmChannel();
  channel.on('error', () => {});

  const childBase = {
    schema,
    connectionString: databaseUrl,
    defect: options.defect,
    rabbit: { url: rabbitUrl, queue: ordersQueue },
    sqs: { endpoint: fauxqs.address, queueUrl, region: REGION, credentials: CREDENTIALS },
    ...(failing
      ? { audit: { exchange: auditExchange, queue: auditQueue, every: failing.every, keys: failing.keys } }
      : {}),
    maxLifetimeMs: timeoutMs + 120_000,
  };

  /** @type {Map<string, { role: string, child: import('node:child_process').ChildProcess, killed: boolean, counts: Record<string, number> }>} */
  const live = new Map();
  const totals = { received: 0, duplicate: 0, sent: 0 };
  const byRole = {
    payments: { received: 0, duplicate: 0 },
    receipts: { received: 0, duplicate: 0 },
    audits: { received: 0, duplicate: 0 },
    relay: { sent: 0 },
  };
  let unexpectedExits = 0;
  let spawned = 0;
  const killsBy = { payments: 0, relay: 0, receipts: 0 };
  /** @type {number[]} payment plus receipt rows when each of the kills above was sent */
  const killProgress = [];

  /** @param {'payments' | 'relay' | 'receipts' | 'audits'} role */
  async function spawnChild(role) {
    const label = `${role}-${++spawned}`;
    const log = openSync(join(logDir, `${label}.log`), 'a');
    const child = fork(CHILD, [], {
      cwd: ROOT,
      env: { ...process.env, ONCELY_OUTBOX_CHILD: JSON.stringify({ ...childBase, role }) },
      stdio: ['ignore', log, log, 'ipc'],
    });
    const entry = {
      role,
      child,
      killed: false,
      ready: false,
      counts: { received: 0, duplicate: 0, sent: 0 },
    };
    live.set(label, entry);
    const ready = new Promise((resolve, reject) => {
      child.on('message', (message) => {
        if (message.type === 'ready') {
          // Only a ready process is killed: one killed while it starts would fail its start.
          entry.ready = true;
          resolve(undefined);
        } else if (message.type === 'events') entry.counts = message.counts;
        else if (message.type === 'error') reject(new Error(`${label}: ${message.message}`));
      });
      child.once('exit', (code, signal) => {
        live.delete(label);
        for (const key of Object.keys(totals)) totals[key] += entry.counts[key] ?? 0;
        if (role === 'relay') byRole.relay.sent += entry.counts.sent;
        else {
          byRole[role].received += entry.counts.received;
          byRole[role].duplicate += entry.counts.duplicate;
        }
        if (!entry.killed && code !== 0) {
          unexpectedExits++;
          note(`${label} exited on its own (code ${code}, signal ${signal})`);
        }
        reject(new Error(`${label} exited before it was ready`));
      });
    });
    await ready;
    return label;
  }

  async function count(sql) {
    const { rows } = await admin.query(sql);
    return Number(rows[0].n);
  }
  const progress = async () =>
    (await count(`SELECT count(*) AS n FROM "${schema}".payments`)) +
    (await count(`SELECT count(*) AS n FROM "${schema}".receipts`));
  const auditRows = (status) =>
    count(
      `SELECT count(*) AS n FROM "${schema}".outbox WHERE destination = '${auditExchange}' AND status = '${status}'`,
    );

  /**
   * SIGKILLs a live process of `role` (one not already being killed); resolves with the
   * start of its replacement (300 ms later), or undefined when none was live.
   */
  function killOne(role, why) {
    const candidates = [...live.entries()].filter(([, e]) => e.role === role && e.ready && !e.killed);
    if (candidates.length === 0) return undefined;
    const [label, entry] = candidates[Math.floor(random() * candidates.length)];
    entry.killed = true;
    entry.child.kill('SIGKILL');
    note(`SIGKILL ${label}${why}`);
    return sleep(300).then(() => spawnChild(role));
  }

  /**
   * killOne, waiting (until `until`) for a process of `role` to be ready: the replacement of
   * one just killed may still be starting (over 4 s for a relay on a loaded machine).
   */
  async function killOneWhenReady(role, why, until) {
    for (;;) {
      const replacement = killOne(role, why);
      if (replacement || Date.now() >= until) return replacement;
      await sleep(50);
    }
  }
  // While the failing destination's stretch runs, its kills are the only relay kills, so
  // the random kills do not leave it no ready relay to kill.
  let outageRunning = false;

  /**
   * @type {{ ms: number, relayKills: number, receiptsDuring: number, auditPendingAtEnd: number,
   *   auditFailedAtEnd: number, auditSentDuring: number, auditMaxAttempts?: number,
   *   operatorRetried?: number } | undefined}
   */
  let outage;
  // The audit topology on a channel of its own: a failed call closes only that one, not
  // the channel the orders are published on.
  const topology = await connection.createChannel();
  topology.on('error', () => {});
  const declareAuditExchange = async () => {
    await topology.assertExchange(auditExchange, 'direct', { durable: true });
    await topology.bindQueue(auditQueue, auditExchange, 'audit');
  };
  // The failing destination: the audit exchange deleted for a stretch, relays killed in it.
  async function runOutage() {
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline && (await progress()) < failing.atFraction * orders * 2) await sleep(50);
    outageRunning = true;
    await topology.deleteExchange(auditExchange);
    const startedAt = Date.now();
    note('audit exchange deleted');
    // Counted once the exchange is gone: a row sent during the stretch was one published
    // before and confirmed after the deletion.
    const receiptsBefore = await count(`SELECT count(*) AS n FROM "${schema}".receipts`);
    const auditSentBefore = await auditRows('sent');
    // Kills at even points of the stretch; the replacements start in the background, so a
    // slow start (a loaded machine) does not stretch the outage.
    const replacements = [];
    for (let k = 1; k <= failing.relayKills; k++) {
      await sleep(Math.max(0, startedAt + (k * failing.outageMs) / (failing.relayKills + 1) - Date.now()));
      // Inside the stretch: a kill waits for a ready relay until 200 ms before its end.
      const replacement = await killOneWhenReady(
        'relay',
        ' (audit exchange missing)',
        startedAt + failing.outageMs - 200,
      );
      if (replacement) replacements.push(replacement);
    }
    const relayKills = replacements.length;
    await sleep(Math.max(0, startedAt + failing.outageMs - Date.now()));
    const receiptsDuring = (await count(`SELECT count(*) AS n FROM "${schema}".receipts`)) - receiptsBefore;
    const auditPendingAtEnd = await auditRows('pending');
    const auditFailedAtEnd = await auditRows('failed');
    const auditSentDuring = (await auditRows('sent')) - auditSentBefore;
    await declareAuditExchange();
    const endedAt = Date.now();
    outageRunning = false;
    note('audit exchange declared again');
    await Promise.all(replacements);
    outage = {
      ms: endedAt - startedAt,
      relayKills,
      receiptsDuring,
      auditPendingAtEnd,
      auditFailedAtEnd,
      auditSentDuring,
    };
  }

  let result;
  try {
    if (failing) {
      // Consumer C declares its queue; the exchange is bound to it once it exists.
      await spawnChild('audits');
      await declareAuditExchange();
    }
    for (const role of ROLES) for (let i = 0; i < perRole; i++) await spawnChild(role);
    note('processes ready');
    // The flag is reset on every path: a failed stretch must not keep relays from the kills.
    const outageDone = failing
      ? runOutage().finally(() => {
          outageRunning = false;
        })
      : Promise.resolve();

    // The orders: published with confirms while the chain runs, each with its ID as
    // properties.messageId (consumer A's default ID strategy). In kills + 1 slices, each
    // at most two kills ahead of the kills sent: all at once, the chain wrote its last row
    // while five of twelve kills were still to come, which then hit finished processes and
    // proved nothing (issue 25's review). Only the kills gate them; a run without kills
    // publishes everything at once.
    let done = 0;
    const slice = Math.ceil(orders / (kills + 1));
    const publishing = (async () => {
      for (let start = 0, index = 0; start < orders; start += slice, index++) {
        while (kills > 0 && done < index - 2 && done < kills) await sleep(20);
        const batch = [];
        for (let i = start; i < Math.min(orders, start + slice); i++) {
          const orderId = `order-${i}`;
          batch.push(publish(channel, { queue: ordersQueue }, { orderId }, { messageId: orderId }));
        }
        await Promise.all(batch);
      }
      note(`${orders} orders published`);
    })();

    // The kills: at evenly spread progress points, a random live process of each role in
    // turn (payments, relay, receipts, ...), so that every role is killed whatever the
    // timing (a random role each time left one out now and then at a dozen kills). A relay
    // is not killed while the outage runs (its own kills are counted there): that turn goes
    // to the next role.
    let turn = 0;
    /** Replacements starting: awaited after the last kill, not before the next one. */
    const replacements = [];
    const deadline = Date.now() + timeoutMs;
    while (done < kills && Date.now() < deadline) {
      const target = ((done + 1) / (kills + 1)) * orders * 2;
      const reached = await progress();
      if (reached < target) {
        await sleep(50);
        continue;
      }
      let planned = killRoles[turn % killRoles.length];
      if (outageRunning && planned === 'relay' && killRoles.length > 1)
        planned = killRoles[++turn % killRoles.length];
      const candidates = [...live.entries()].filter(
        ([, e]) => e.role === planned && e.ready && !e.killed && !(outageRunning && e.role === 'relay'),
      );
      if (candidates.length === 0) {
        // Its processes are starting (a replacement takes a moment): wait for one.
        await sleep(50);
        continue;
      }
      turn++;
      const [label, entry] = candidates[Math.floor(random() * candidates.length)];
      entry.killed = true;
      entry.child.kill('SIGKILL');
      killsBy[entry.role]++;
      done++;
      // Rows applied when it died: a kill at 2 × orders hit a finished chain, proving nothing.
      killProgress.push(reached);
      note(`SIGKILL ${label} at ${reached}/${orders * 2} rows`);
      // Its replacement starts 300 ms later while the loop goes on: awaited here, the ready
      // message of each new process (3-9 s on a loaded machine) held every later kill back
      // until the chain had finished. The next kill is of another role.
      const role = entry.role;
      const replacement = sleep(300).then(() => spawnChild(role));
      replacement.catch(() => {}); // awaited below; no unhandled rejection meanwhile
      replacements.push(replacement);
    }
    await Promise.all(replacements);
    await publishing;
    await outageDone;

    // Drained: every order paid and receipted (or stuck for good), the outbox empty,
    // nothing left on either broker, twice in a row a second apart.
    let quiet = 0;
    let drained = false;
    // What an operator does once the destination is back (`oncely outbox --retry`): rows
    // dead-lettered during the outage (their maxAttempts ran out, which a loaded machine
    // can stretch it to) are sent again with their IDs.
    const operator = failing
      ? new PostgresStore({ connectionString: databaseUrl, schema, poolMax: 1 })
      : undefined;
    let operatorRetried = 0;
    while (Date.now() < deadline) {
      if (operator && (await auditRows('failed')) > 0) {
        const retried = await operator.outbox.retry();
        operatorRetried += retried.length;
        note(`${retried.length} dead-lettered audit rows sent again (outbox.retry())`);
      }
      const paid = await count(`SELECT count(DISTINCT order_id) AS n FROM "${schema}".payments`);
      const receipted = await count(`SELECT count(DISTINCT order_id) AS n FROM "${schema}".receipts`);
      const pending = await count(`SELECT count(*) AS n FROM "${schema}".outbox WHERE status = 'pending'`);
      const onRabbit =
        (await channel.checkQueue(ordersQueue)).messageCount +
        (failing ? (await topology.checkQueue(auditQueue)).messageCount : 0);
      const onQueue = (name) => {
        const inspected = fauxqs.inspectQueue(name)?.messages;
        return inspected ? inspected.ready.length + inspected.delayed.length + inspected.inflight.length : 0;
      };
      const onSqs = onQueue(receiptsQueue);
      const auditsDone = await count(`SELECT count(DISTINCT order_id) AS n FROM "${schema}".audits`);
      if (
        paid === orders &&
        receipted === orders &&
        auditsDone === expectedAudits &&
        pending === 0 &&
        onRabbit === 0 &&
        onSqs === 0
      ) {
        if (++quiet >= 2) {
          drained = true;
          break;
        }
      } else quiet = 0;
      await sleep(1000);
    }
    note(drained ? 'drained' : 'did not drain before the deadline');
    await operator?.close();
    if (outage) outage.operatorRetried = operatorRetried;

    // Graceful stop of what is left, then the count.
    await Promise.all(
      [...live.values()].map(
        (entry) =>
          new Promise((resolve) => {
            entry.child.once('exit', resolve);
            entry.child.send({ type: 'stop' });
            setTimeout(() => entry.child.kill('SIGKILL'), 20_000).unref();
          }),
      ),
    );

    const perOrder = async (table) => {
      const { rows } = await admin.query(
        `SELECT order_id, count(*)::int AS n FROM "${schema}".${table} GROUP BY order_id`,
      );
      return new Map(rows.map((row) => [row.order_id, row.n]));
    };
    const payments = await perOrder('payments');
    const receipts = await perOrder('receipts');
    const audits = await perOrder('audits');
    const lostIds = [];
    const doubledIds = [];
    for (let i = 0; i < orders; i++) {
      const id = `order-${i}`;
      const p = payments.get(id) ?? 0;
      const r = receipts.get(id) ?? 0;
      const a = audits.get(id) ?? 0;
      if (p === 0 || r === 0 || (audited(i) && a === 0)) lostIds.push(id);
      if (p > 1 || r > 1 || a > 1) doubledIds.push(id);
    }
    // Rows for no order, and audits of orders that publish none: doubled effects too.
    const strangers = [
      ...[...payments.keys(), ...receipts.keys(), ...audits.keys()].filter((id) => !/^order-\d+$/.test(id)),
      ...[...audits.keys()].filter(
        (id) => /^order-\d+$/.test(id) && !audited(Number(id.slice('order-'.length))),
      ),
    ];
    const { rows: statuses } = await admin.query(
      `SELECT status, count(*)::int AS n FROM "${schema}".outbox GROUP BY status`,
    );
    const outbox = Object.fromEntries(statuses.map((row) => [row.status, row.n]));
    if (outage) {
      // How often the audit rows were tried: more than once means they failed and waited.
      outage.auditMaxAttempts = await count(
        `SELECT coalesce(max(attempts), 0) AS n FROM "${schema}".outbox WHERE destination = '${auditExchange}'`,
      );
    }
    result = {
      broker: options.defect
        ? `rabbitmq → outbox → sqs (defect: ${options.defect})`
        : 'rabbitmq → outbox → sqs',
      orders,
      kills: killsBy.payments + killsBy.relay + killsBy.receipts,
      killsBy,
      killProgress,
      paymentRows: [...payments.values()].reduce((a, b) => a + b, 0),
      receiptRows: [...receipts.values()].reduce((a, b) => a + b, 0),
      auditRows: [...audits.values()].reduce((a, b) => a + b, 0),
      outage,
      lost: lostIds.length,
      doubled: doubledIds.length + strangers.length,
      lostIds: lostIds.slice(0, 20),
      doubledIds: doubledIds.slice(0, 20),
      outbox,
      relaySent: byRole.relay.sent,
      receiptDuplicatesSkipped: byRole.receipts.duplicate,
      paymentDuplicatesSkipped: byRole.payments.duplicate,
      drained,
      unexpectedExits,
      durationMs: Date.now() - started,
      timeline,
      logDir,
    };
    result.ok = result.lost === 0 && result.doubled === 0 && drained && unexpectedExits === 0;
    return result;
  } finally {
    for (const entry of live.values()) entry.child.kill('SIGKILL');
    const ch = await connection.createChannel().catch(() => undefined);
    if (ch) {
      for (const queue of [ordersQueue, auditQueue]) {
        for (const name of [queue, `${queue}.dlq`]) await ch.deleteQueue(name).catch(() => {});
        await ch.deleteExchange(`${queue}.dlx`).catch(() => {});
      }
      await ch.deleteExchange(auditExchange).catch(() => {});
      await ch.close().catch(() => {});
    }
    await connection.close().catch(() => {});
    sqs.destroy();
    await fauxqs.stop();
    // A failed run keeps its schema as evidence; a defect run is expected to fail.
    if (result?.ok || (result && options.defect)) {
      await admin.query(`DROP SCHEMA "${schema}" CASCADE`).catch(() => {});
      if (ownLogDir) rmSync(logDir, { recursive: true, force: true });
    }
    await admin.end();
  }
}
