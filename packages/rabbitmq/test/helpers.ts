import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { Socket } from 'node:net';
import { promisify } from 'node:util';
import type { AdapterRuntime, Delivery, Logger } from '@oncely/core';
import { silentLogger } from '@oncely/core';
import { PostgresStore } from '@oncely/postgres';
import { delayQueueName } from '@oncely/rabbitmq';
import { type Channel, type ChannelModel, type ConfirmChannel, connect, type GetMessage } from 'amqplib';
import pg from 'pg';

export const RABBITMQ_URL = process.env.RABBITMQ_URL ?? 'amqp://guest:guest@127.0.0.1:5672';
export const DATABASE_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

const run = promisify(execFile);

/** Short unique suffix for queue, schema and connection names. */
export function unique(prefix: string): string {
  return `${prefix}_${randomUUID().replace(/-/g, '').slice(0, 12)}`;
}

async function reachable(url: string, defaultPort: number): Promise<boolean> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    const socket = new Socket();
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(2000, () => done(false));
    socket.once('error', () => done(false));
    socket.connect(Number(port || defaultPort), hostname, () => done(true));
  });
}

/**
 * True when RabbitMQ and PostgreSQL answer. When one is missing: throws under CI=true (a
 * missing service must fail the build there), else returns false so the file skips.
 */
export async function servicesAvailable(): Promise<boolean> {
  const [rabbit, postgres] = await Promise.all([
    reachable(RABBITMQ_URL, 5672),
    reachable(DATABASE_URL, 5432),
  ]);
  if (rabbit && postgres) return true;
  const missing = [!rabbit && `RabbitMQ (${RABBITMQ_URL})`, !postgres && `PostgreSQL (${DATABASE_URL})`]
    .filter(Boolean)
    .join(' and ');
  if (process.env.CI === 'true') throw new Error(`@oncely/rabbitmq tests need ${missing}`);
  console.warn(`skipping @oncely/rabbitmq integration tests: ${missing} not reachable`);
  return false;
}

/** A real PostgreSQL store in its own schema, with an `effects` table for the handler's writes. */
export interface TestStore {
  store: PostgresStore;
  schema: string;
  /** Rows written by handlers, per message ID. */
  effects(): Promise<Map<string, number>>;
  /** Total effect rows. */
  effectCount(): Promise<number>;
  /** Processed markers in the store. */
  markerCount(consumer: string): Promise<number>;
  cleanup(): Promise<void>;
}

export async function createTestStore(): Promise<TestStore> {
  const schema = unique('rmq');
  const admin = new pg.Client({ connectionString: DATABASE_URL });
  await admin.connect();
  await admin.query(`CREATE SCHEMA "${schema}"`);
  await admin.query(
    `CREATE TABLE "${schema}".effects (message_id text NOT NULL, at timestamptz NOT NULL DEFAULT now())`,
  );
  const store = new PostgresStore({ connectionString: DATABASE_URL, schema, poolMax: 12 });
  await store.migrate();
  return {
    store,
    schema,
    async effects() {
      const { rows } = await admin.query<{ message_id: string; n: string }>(
        `SELECT message_id, count(*) AS n FROM "${schema}".effects GROUP BY message_id`,
      );
      return new Map(rows.map((row) => [row.message_id, Number(row.n)]));
    },
    async effectCount() {
      const { rows } = await admin.query<{ n: string }>(`SELECT count(*) AS n FROM "${schema}".effects`);
      return Number(rows[0]!.n);
    },
    async markerCount(consumer: string) {
      const { rows } = await admin.query<{ n: string }>(
        `SELECT count(*) AS n FROM "${schema}".processed_messages WHERE consumer = $1`,
        [consumer],
      );
      return Number(rows[0]!.n);
    },
    async cleanup() {
      await store.close().catch(() => {});
      await admin.query(`DROP SCHEMA "${schema}" CASCADE`).catch(() => {});
      await admin.end().catch(() => {});
    },
  };
}

/** A plain amqplib connection for the test's own publishing and inspection. */
export interface RawBroker {
  connection: ChannelModel;
  channel: ConfirmChannel;
  /** Publishes with confirms; `id` becomes `properties.messageId` (omit it for a poison message). */
  publish(
    queue: string,
    messages: Array<{ id?: string; body?: unknown; rawBody?: string; headers?: Record<string, unknown> }>,
  ): Promise<void>;
  /** Ready messages in a queue (unacked ones are not counted). */
  ready(queue: string): Promise<number>;
  /** Takes every ready message off a queue (basic.get + ack). */
  drain(queue: string): Promise<GetMessage[]>;
  /** A fresh channel (a failed passive check closes the one it ran on). */
  freshChannel(): Promise<Channel>;
  deleteQueues(...queues: string[]): Promise<void>;
  close(): Promise<void>;
}

export async function rawBroker(): Promise<RawBroker> {
  const connection = await connect(RABBITMQ_URL, {
    clientProperties: { connection_name: 'oncely-test-raw' },
  });
  connection.on('error', () => {});
  const channel = await connection.createConfirmChannel();
  channel.on('error', () => {});
  const broker: RawBroker = {
    connection,
    channel,
    async publish(queue, messages) {
      for (const message of messages) {
        const content = Buffer.from(message.rawBody ?? JSON.stringify(message.body ?? { id: message.id }));
        channel.sendToQueue(queue, content, {
          persistent: true,
          contentType: 'application/json',
          ...(message.id !== undefined ? { messageId: message.id } : {}),
          headers: message.headers ?? {},
        });
      }
      await channel.waitForConfirms();
    },
    async ready(queue) {
      const ch = await connection.createChannel();
      try {
        return (await ch.checkQueue(queue)).messageCount;
      } finally {
        await ch.close().catch(() => {});
      }
    },
    async drain(queue) {
      const ch = await connection.createChannel();
      const messages: GetMessage[] = [];
      try {
        for (;;) {
          const message = await ch.get(queue, { noAck: false });
          if (message === false) break;
          ch.ack(message);
          messages.push(message);
        }
      } finally {
        await ch.close().catch(() => {});
      }
      return messages;
    },
    async freshChannel() {
      const ch = await connection.createChannel();
      ch.on('error', () => {});
      return ch;
    },
    async deleteQueues(...queues) {
      const ch = await broker.freshChannel();
      for (const queue of queues) await ch.deleteQueue(queue).catch(() => {});
      await ch.close().catch(() => {});
    },
    async close() {
      await connection.close().catch(() => {});
    },
  };
  return broker;
}

/** Every queue and exchange a test's topology may have created, for cleanup. */
export async function deleteTopology(raw: RawBroker, queue: string, delays: number[] = []): Promise<void> {
  const ch = await raw.freshChannel();
  for (const name of [queue, `${queue}.dlq`, ...delays.map((d) => delayQueueName(queue, d))]) {
    await ch.deleteQueue(name).catch(() => {});
  }
  await ch.deleteExchange(`${queue}.dlx`).catch(() => {});
  await ch.close().catch(() => {});
}

/**
 * Closes, from the server side, every client connection whose `connection_name` starts
 * with `prefix` (`rabbitmqctl eval`, one call). Resolves with how many were closed.
 * A connection still in its handshake has no client properties yet (`none`) and is
 * skipped: a keyfind on it was a badarg that failed the whole call (CI of 3dd4dc0's parent,
 * with three conformance files connecting at once).
 */
export async function closeConnectionsServerSide(prefix: string): Promise<number> {
  if (!/^[\w:.-]+$/.test(prefix)) throw new Error(`unsafe connection prefix ${prefix}`);
  const expr =
    `Prefix = <<"${prefix}">>, L = byte_size(Prefix), ` +
    'Pids = [P || Info <- rabbit_networking:connection_info_all([pid, client_properties]), ' +
    '{pid, P} <- [lists:keyfind(pid, 1, Info)], ' +
    '{client_properties, CP} <- [lists:keyfind(client_properties, 1, Info)], is_list(CP), ' +
    '{<<"connection_name">>, longstr, Name} <- [lists:keyfind(<<"connection_name">>, 1, CP)], ' +
    'byte_size(Name) >= L, binary:part(Name, 0, L) =:= Prefix], ' +
    '[rabbit_networking:close_connection(P, "oncely test: server-side disconnect") || P <- Pids], length(Pids).';
  const { stdout } = await run('rabbitmqctl', ['-q', 'eval', expr]);
  return Number(stdout.trim());
}

/** Open client connections whose `connection_name` starts with `prefix` (`rabbitmqctl eval`). */
export async function connectionCount(prefix: string): Promise<number> {
  if (!/^[\w:.-]+$/.test(prefix)) throw new Error(`unsafe connection prefix ${prefix}`);
  const expr =
    `Prefix = <<"${prefix}">>, L = byte_size(Prefix), ` +
    'length([P || Info <- rabbit_networking:connection_info_all([pid, client_properties]), ' +
    '{pid, P} <- [lists:keyfind(pid, 1, Info)], ' +
    '{client_properties, CP} <- [lists:keyfind(client_properties, 1, Info)], is_list(CP), ' +
    '{<<"connection_name">>, longstr, Name} <- [lists:keyfind(<<"connection_name">>, 1, CP)], ' +
    'byte_size(Name) >= L, binary:part(Name, 0, L) =:= Prefix]).';
  const { stdout } = await run('rabbitmqctl', ['-q', 'eval', expr]);
  return Number(stdout.trim());
}

/** Messages per queue (ready + unacked) for queues whose name starts with `prefix` (`rabbitmqctl list_queues`). */
export async function queueDepths(prefix: string): Promise<Map<string, number>> {
  const { stdout } = await run('rabbitmqctl', [
    '-q',
    'list_queues',
    '--no-table-headers',
    'name',
    'messages',
  ]);
  const depths = new Map<string, number>();
  for (const line of stdout.split('\n')) {
    const [name, messages] = line.trim().split(/\s+/);
    if (name?.startsWith(prefix) && messages !== undefined) depths.set(name, Number(messages));
  }
  return depths;
}

/** Waits until `condition` holds, polling; fails with `what` after `timeoutMs`. */
export async function waitFor(
  condition: () => boolean | Promise<boolean>,
  what: string,
  timeoutMs = 15_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await condition()) return;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

/** A promise with its resolver, for latches inside handlers. */
export function latch(): { promise: Promise<void>; open(): void } {
  let open!: () => void;
  const promise = new Promise<void>((resolve) => {
    open = resolve;
  });
  return { promise, open };
}

/**
 * A stand-in for the core's side of the adapter contract, for adapter-level tests: it
 * records every dispatched delivery and settles nothing itself.
 */
export function recordingRuntime(concurrency: number): AdapterRuntime & {
  deliveries: Delivery[];
  errors: Array<{ error: unknown; context: string }>;
  stop(): void;
} {
  const stopping = new AbortController();
  const deliveries: Delivery[] = [];
  const errors: Array<{ error: unknown; context: string }> = [];
  const log: Logger = silentLogger;
  return {
    consumerName: 'adapter-test',
    concurrency,
    mode: 'transactional',
    store: undefined as never,
    log,
    stopping: stopping.signal,
    deliveries,
    errors,
    stop: () => stopping.abort(),
    whenReady: async () => (stopping.signal.aborted ? 0 : concurrency),
    dispatch: async (delivery) => {
      deliveries.push(delivery);
    },
    reportError: (error, context) => {
      errors.push({ error, context });
    },
  };
}
