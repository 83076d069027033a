/**
 * One process of the outbox chaos run (see outboxChaos.mjs). Its role, from
 * ONCELY_OUTBOX_CHILD (JSON):
 *
 * - `payments`: consumer A on RabbitMQ. Writes a payment row and publishes "payment
 *   made" through the outbox (`ctx.publish`), in the handler's transaction. With
 *   `defect: 'direct-publish'` it sends the event straight to SQS from the handler
 *   instead, with a fresh ID per send, as a plain SDK call does.
 * - `relay`: the outbox relay, sending rows to SQS (fauxqs, in the runner).
 * - `receipts`: consumer B on SQS. Writes a receipt row.
 * - `audits` (with `audit`, the failing destination): consumer C on the audit RabbitMQ
 *   queue. Writes an audit row. With `audit`, consumer A also publishes an audit event for
 *   every `audit.every`-th order (keyed `audit-<n mod audit.keys>`) to the audit exchange,
 *   which the relay sends with the RabbitMQ producer, and keys its "payment made" events
 *   by customer (`customer-<n mod 32>`), so healthy keys flow beside failing ones.
 *
 * IPC: runner → child `{ type: 'stop' }` (graceful stop, exit 0); child → runner
 * `ready`, `events` (counts of received/duplicate/sent), `error`. The runner ends it with
 * SIGKILL at random: no finally block runs.
 */
import { randomUUID } from 'node:crypto';
import { SQSClient } from '@aws-sdk/client-sqs';
import { createConsumer } from '@oncely/core';
import { createRelay, PostgresStore } from '@oncely/postgres';
import { createRabbitMqProducer } from '@oncely/rabbitmq';
import { createSqsProducer, sendMessage } from '@oncely/sqs';

process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';

/** @param {unknown} message */
function send(message) {
  if (process.connected) process.send?.(message);
}

/** @type {import('@oncely/core').Logger} */
const logger = {
  debug: () => {},
  info: () => {},
  warn: (message, fields) => console.error(`${new Date().toISOString()} warn ${message}`, brief(fields)),
  error: (message, fields) => console.error(`${new Date().toISOString()} error ${message}`, brief(fields)),
};

/** @param {Record<string, unknown> | undefined} fields */
function brief(fields) {
  if (!fields) return '';
  const error = fields.error;
  const text =
    error instanceof Error ? `${error.name}: ${error.message}` : error === undefined ? '' : String(error);
  return `${JSON.stringify({ ...fields, error: undefined })} ${text}`;
}

async function main() {
  const raw = process.env.ONCELY_OUTBOX_CHILD;
  if (!raw)
    throw new Error('ONCELY_OUTBOX_CHILD is not set: this script is started by the outbox chaos runner');
  /**
   * @type {{ role: 'payments' | 'relay' | 'receipts' | 'audits', defect?: string, schema: string,
   *   audit?: { exchange: string, queue: string, every: number, keys: number },
   *   connectionString: string, rabbit: { url: string, queue: string },
   *   sqs: { endpoint: string, queueUrl: string, region: string, credentials: { accessKeyId: string, secretAccessKey: string } },
   *   maxLifetimeMs: number }}
   */
  const config = JSON.parse(raw);
  process.on('disconnect', () => process.exit(2));
  setTimeout(() => process.exit(3), config.maxLifetimeMs).unref();

  const store = new PostgresStore({
    connectionString: config.connectionString,
    schema: config.schema,
    poolMax: 10,
    connectTimeoutMs: 2000,
    logger,
  });
  const sqs = new SQSClient({
    endpoint: config.sqs.endpoint,
    region: config.sqs.region,
    credentials: config.sqs.credentials,
  });
  const counts = { received: 0, duplicate: 0, sent: 0 };
  const flush = setInterval(() => send({ type: 'events', counts: { ...counts } }), 200);
  flush.unref();

  /** @type {() => Promise<void>} */
  let stopWork;
  if (config.role === 'relay') {
    const toSqs = createSqsProducer({ client: sqs });
    const toRabbit = config.audit
      ? createRabbitMqProducer({
          url: config.rabbit.url,
          target: (message) => ({ exchange: message.destination, routingKey: 'audit' }),
        })
      : undefined;
    const relay = createRelay({
      store,
      producers: config.audit && toRabbit ? { [config.audit.exchange]: toRabbit, '*': toSqs } : toSqs,
      batchSize: 100,
      pollIntervalMs: 500,
      backoff: { initialMs: 200, maxMs: 2000 },
      logger,
    });
    relay.on('sent', () => counts.sent++);
    await relay.start();
    stopWork = async () => {
      await relay.stop();
      await toRabbit?.close();
    };
  } else {
    const payments = config.role === 'payments';
    const table = `"${config.schema}".${config.role}`;
    const onRabbit = payments || config.role === 'audits';
    const consumer = await createConsumer({
      name: config.role,
      broker: onRabbit
        ? {
            type: 'rabbitmq',
            url: config.rabbit.url,
            queue: payments ? config.rabbit.queue : (config.audit?.queue ?? ''),
            queueType: 'classic',
          }
        : {
            type: 'sqs',
            queueUrl: config.sqs.queueUrl,
            endpoint: config.sqs.endpoint,
            region: config.sqs.region,
            credentials: config.sqs.credentials,
            waitTimeSeconds: 1,
          },
      store,
      concurrency: 8,
      maxAttempts: 50,
      backoff: { initialMs: 100, maxMs: 1000 },
      logger,
      handler: async (message, ctx) => {
        const { orderId } = /** @type {{ orderId: string }} */ (message.body);
        await ctx.tx.query(`INSERT INTO ${table} (order_id) VALUES ($1)`, [orderId]);
        if (!payments) return;
        if (config.defect === 'direct-publish') {
          // The dual write: the event leaves before the commit, with an ID of its own.
          await sendMessage(sqs, { queueUrl: config.sqs.queueUrl, id: randomUUID(), body: { orderId } });
        } else if (config.audit) {
          const n = Number(orderId.slice('order-'.length));
          await ctx.publish(config.sqs.queueUrl, { orderId }, { key: `customer-${n % 32}` });
          if (n % config.audit.every === 0) {
            await ctx.publish(config.audit.exchange, { orderId }, { key: `audit-${n % config.audit.keys}` });
          }
        } else {
          await ctx.publish(config.sqs.queueUrl, { orderId });
        }
      },
    });
    consumer.on('received', () => counts.received++);
    consumer.on('duplicate', () => counts.duplicate++);
    await consumer.start();
    stopWork = () => consumer.stop();
  }

  let stopping = false;
  const stop = async () => {
    if (stopping) return;
    stopping = true;
    await stopWork();
    await store.close().catch(() => {});
    sqs.destroy();
    send({ type: 'events', counts: { ...counts } });
    send({ type: 'stopped' });
    setTimeout(() => process.exit(0), 50);
  };
  process.on('message', (/** @type {{ type: string }} */ message) => {
    if (message.type === 'stop') void stop();
  });
  process.on('SIGTERM', () => void stop());
  send({ type: 'ready' });
}

main().catch((error) => {
  const message = error instanceof Error ? (error.stack ?? error.message) : String(error);
  console.error(message);
  send({ type: 'error', message });
  setTimeout(() => process.exit(1), 100);
});
