/**
 * Shared helpers of the Kafka tests: the broker globalSetup started, admin calls, topic
 * names, group lag, a dead-letter reader, a proxy that can cut every client connection,
 * and a dedicated broker for tests that restart one.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createTopics, DEAD_LETTER_HEADERS } from '@oncely/kafka';
import { TcpProxy } from '@oncely/testkit';
import { type Admin, type Consumer, Kafka, logLevel, type Producer } from 'kafkajs';
import { inject } from 'vitest';

export const DATABASE_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const emulator = fileURLToPath(new URL('../../../../test/emulators/kafka/', import.meta.url));

process.env.KAFKAJS_NO_PARTITIONER_WARNING = '1';

/** Bootstrap brokers of the test broker; throws under CI=true when there is none. */
export function testBrokers(): string[] | undefined {
  const brokers = inject('kafkaBrokers');
  if (brokers) return brokers.split(',');
  if (process.env.CI === 'true') throw new Error(`no Kafka broker: ${inject('kafkaUnavailable')}`);
  return undefined;
}

export function uniqueName(prefix: string): string {
  return `${prefix}-${Date.now().toString(36)}-${randomBytes(3).toString('hex')}`;
}

export function kafkaClient(brokers: string[], clientId = 'oncely-test'): Kafka {
  return new Kafka({ clientId, brokers, logLevel: logLevel.NOTHING, retry: { retries: 8 } });
}

export async function createTopic(admin: Admin, topic: string, partitions: number): Promise<void> {
  await createTopics(admin, [{ topic, numPartitions: partitions }]);
}

/** Records not yet committed by `groupId` (sum over partitions of high watermark − committed offset). */
export async function groupLag(admin: Admin, groupId: string, topic: string): Promise<number> {
  const [committed, ends] = await Promise.all([
    admin.fetchOffsets({ groupId, topics: [topic] }),
    admin.fetchTopicOffsets(topic),
  ]);
  const at = new Map(committed[0]?.partitions.map((p) => [p.partition, Number(p.offset)]) ?? []);
  let lag = 0;
  for (const end of ends) {
    const offset = at.get(end.partition) ?? -1;
    lag += Number(end.high) - (offset < 0 ? Number(end.low) : offset);
  }
  return lag;
}

/** One dead-lettered record as the reader saw it. */
export interface DeadLetter {
  id?: string;
  reason: string;
  detail?: string;
  originalOffset?: string;
  originalPartition?: string;
}

/**
 * Reads a dead-letter topic from the start with a consumer group of its own and keeps
 * what it saw. `list()` first waits until it has read up to the topic's end.
 */
export class DeadLetterReader {
  private readonly seen: DeadLetter[] = [];
  private readonly positions = new Map<number, number>();
  private consumer: Consumer | undefined;

  constructor(
    private readonly kafka: Kafka,
    private readonly admin: Admin,
    private readonly topic: string,
  ) {}

  async start(): Promise<void> {
    const consumer = this.kafka.consumer({ groupId: uniqueName('dlq-reader'), maxWaitTimeInMs: 100 });
    this.consumer = consumer;
    await consumer.connect();
    await consumer.subscribe({ topics: [this.topic], fromBeginning: true });
    await consumer.run({
      eachMessage: async ({ partition, message }) => {
        const header = (name: string) => message.headers?.[name]?.toString();
        this.seen.push({
          id: header('message-id'),
          reason: header(DEAD_LETTER_HEADERS.reason) ?? '(none)',
          detail: header(DEAD_LETTER_HEADERS.detail),
          originalOffset: header(DEAD_LETTER_HEADERS.offset),
          originalPartition: header(DEAD_LETTER_HEADERS.partition),
        });
        this.positions.set(partition, Number(message.offset) + 1);
      },
    });
  }

  async list(timeoutMs = 10_000): Promise<DeadLetter[]> {
    const ends = await this.admin.fetchTopicOffsets(this.topic);
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      const caughtUp = ends.every(
        (end) =>
          Number(end.high) <= Number(end.low) || (this.positions.get(end.partition) ?? 0) >= Number(end.high),
      );
      if (caughtUp) break;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    return [...this.seen];
  }

  async stop(): Promise<void> {
    await this.consumer?.disconnect().catch(() => {});
  }
}

/** Publishes JSON bodies with a `message-id` header, in order. */
export async function publish(
  producer: Producer,
  topic: string,
  messages: ReadonlyArray<{
    id?: string;
    body: unknown;
    key?: string;
    partition?: number;
    headers?: Record<string, string>;
  }>,
): Promise<void> {
  await producer.send({
    topic,
    acks: -1,
    messages: messages.map((m) => ({
      value: JSON.stringify(m.body),
      headers: { ...(m.headers ?? {}), ...(m.id === undefined ? {} : { 'message-id': m.id }) },
      ...(m.key === undefined ? {} : { key: m.key }),
      ...(m.partition === undefined ? {} : { partition: m.partition }),
    })),
  });
}

/**
 * A TCP proxy on a fixed port in front of the broker's PROXIED listener. That listener
 * advertises the proxy's port, so a client bootstrapped here keeps every connection on
 * the proxy, and `disconnect()` cuts them all the way a server-side close would.
 */
export function kafkaProxy(port: number, targetPort: number): TcpProxy {
  return new TcpProxy({ host: '127.0.0.1', port: targetPort }, { port });
}

/**
 * A broker of its own (other ports, a temporary data dir), for tests that restart the
 * broker without disturbing the shared one.
 */
export class DedicatedBroker {
  readonly dataDir = mkdtempSync(join(tmpdir(), 'oncely-kafka-'));
  readonly brokers: string[];
  private readonly env: NodeJS.ProcessEnv;

  constructor(basePort: number) {
    this.brokers = [`127.0.0.1:${basePort}`];
    this.env = {
      ...process.env,
      KAFKA_PORT: String(basePort),
      KAFKA_CONTROLLER_PORT: String(basePort + 1),
      KAFKA_PROXIED_PORT: String(basePort + 2),
      KAFKA_PROXY_PORT: String(basePort + 3),
      KAFKA_DATA_DIR: join(this.dataDir, 'data'),
      KAFKA_LOG_FILE: join(this.dataDir, 'kafka.log'),
    };
  }

  start(): Promise<void> {
    return this.script('start.sh');
  }

  /** Stops and starts the broker on the same data: topics and committed offsets survive. */
  restart(): Promise<void> {
    return this.script('restart.sh');
  }

  /** Stops the broker but keeps its data, for `resume()`. */
  pause(): Promise<void> {
    return this.script('stop.sh', { KAFKA_KEEP_DATA: '1' });
  }

  /** Starts the broker again on the data `pause()` kept. */
  resume(): Promise<void> {
    return this.script('start.sh', { KAFKA_KEEP_DATA: '1' });
  }

  async stop(): Promise<void> {
    try {
      await this.script('stop.sh');
    } finally {
      rmSync(this.dataDir, { recursive: true, force: true });
    }
  }

  /** Runs a script without blocking the event loop (consumers in this process keep running). */
  private script(name: string, extraEnv: NodeJS.ProcessEnv = {}): Promise<void> {
    return new Promise((resolve, reject) => {
      const child = spawn('bash', [`${emulator}${name}`], {
        env: { ...this.env, ...extraEnv },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let output = '';
      child.stdout.on('data', (chunk) => (output += chunk));
      child.stderr.on('data', (chunk) => (output += chunk));
      child.once('error', reject);
      child.once('exit', (code) =>
        code === 0 ? resolve() : reject(new Error(`${name} failed (${code}):\n${output}`)),
      );
    });
  }
}
