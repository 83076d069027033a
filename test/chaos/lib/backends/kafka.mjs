/**
 * Kafka: a broker of the run's own (test/emulators/kafka/start.sh on free ports and a
 * temporary data dir), so it can be restarted mid-run without disturbing the shared test
 * broker. Consumers bootstrap at a TCP proxy in front of the broker's PROXIED listener,
 * which advertises the proxy's port: all their connections pass the proxy, and a
 * connection drop cuts them all.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createTopics, DEAD_LETTER_HEADERS } from '@oncely/kafka';
import { TcpProxy } from '@oncely/testkit';
import kafkajs from 'kafkajs';

const { Kafka, logLevel } = kafkajs;
const EMULATOR = fileURLToPath(new URL('../../../emulators/kafka/', import.meta.url));
process.env.KAFKAJS_NO_PARTITIONER_WARNING = '1';

/**
 * A single-node broker on ports `base`..`base+2` with its own data dir.
 */
export class ChaosKafkaBroker {
  dataDir = mkdtempSync(join(tmpdir(), 'oncely-chaos-kafka-'));

  /** @param {number} base @param {number} proxyPort */
  constructor(base, proxyPort) {
    this.base = base;
    this.address = `127.0.0.1:${base}`;
    this.env = {
      ...process.env,
      KAFKA_PORT: String(base),
      KAFKA_CONTROLLER_PORT: String(base + 1),
      KAFKA_PROXIED_PORT: String(base + 2),
      KAFKA_PROXY_PORT: String(proxyPort),
      KAFKA_DATA_DIR: join(this.dataDir, 'data'),
      KAFKA_LOG_FILE: join(this.dataDir, 'kafka.log'),
    };
  }

  start() {
    return this.#script('start.sh');
  }

  /** Stop and start on the same data: topics and committed offsets survive. */
  restart() {
    return this.#script('restart.sh');
  }

  async stop() {
    try {
      await this.#script('stop.sh');
    } finally {
      rmSync(this.dataDir, { recursive: true, force: true });
    }
  }

  /** Runs a script without blocking the event loop (the run goes on meanwhile). @param {string} name */
  #script(name) {
    return new Promise((resolve, reject) => {
      const child = spawn('bash', [`${EMULATOR}${name}`], {
        env: this.env,
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let output = '';
      child.stdout.on('data', (chunk) => {
        output += chunk;
      });
      child.stderr.on('data', (chunk) => {
        output += chunk;
      });
      child.once('error', reject);
      child.once('exit', (code) =>
        code === 0
          ? resolve(undefined)
          : reject(new Error(`${name} failed (${code}):\n${output.slice(-4000)}`)),
      );
    });
  }
}

/**
 * Ports base..base+2 all free, from 19120 upwards (the shared broker uses 19092-19095,
 * kafka's tests 19100-19103), or from ONCELY_CHAOS_KAFKA_PORT_BASE (a run beside another
 * checkout's test command keeps to ports of its own).
 */
export async function freeKafkaBase() {
  const first = Number(process.env.ONCELY_CHAOS_KAFKA_PORT_BASE || 19120);
  for (let base = first; base < first + 280; base += 10) {
    const free = await Promise.all([0, 1, 2].map((i) => portFree(base + i)));
    if (free.every(Boolean)) return base;
  }
  throw new Error(`no free ports for a Kafka broker between ${first} and ${first + 280}`);
}

/** @param {number} port */
function portFree(port) {
  return new Promise((resolve) => {
    const server = createServer();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

/**
 * Starts the run's broker and provisions its topic.
 *
 * The consumers run on `kafkaClient` (`broker.client`); the runner's own producer, admin
 * and dead-letter reader stay on kafkajs whatever the consumers use, so what is checked is
 * not read through the client under test.
 *
 * @param {{ runId: string, consumerName: string, partitions: number, kafkaClient?: 'kafkajs' | 'platformatic' }} input
 * @returns {Promise<import('./types.mjs').Backend>}
 */
export async function kafkaBackend({ runId, consumerName, partitions, kafkaClient = 'kafkajs' }) {
  const sessionTimeout = 6000;
  const base = await freeKafkaBase();
  // The proxy listens before the broker starts: its port is what the PROXIED listener advertises.
  const proxy = new TcpProxy({ host: '127.0.0.1', port: base + 2 });
  const proxyPort = await proxy.start();
  const broker = new ChaosKafkaBroker(base, proxyPort);
  await broker.start();
  const kafka = new Kafka({
    clientId: `oncely-chaos-runner-${runId}`,
    brokers: [broker.address],
    logLevel: logLevel.NOTHING,
    retry: { retries: 10 },
  });
  const admin = kafka.admin();
  const producer = kafka.producer({ allowAutoTopicCreation: false, idempotent: true });
  await admin.connect();
  await producer.connect();
  const topic = `oncely-chaos-${runId}`;
  const deadLetterTopic = `${topic}.dlq`;
  await createTopics(admin, [
    { topic, numPartitions: partitions },
    { topic: deadLetterTopic, numPartitions: partitions },
  ]);

  return {
    name: 'kafka',
    crossProcess: true,
    leaseMs: Math.floor((sessionTimeout * 2) / 3),
    stallMs: Math.round(((sessionTimeout * 2) / 3) * 1.5),
    leaseLossSlot: false,
    notes: {
      consumers: `child processes in one group on ${kafkaClient === 'platformatic' ? '@platformatic/kafka' : 'kafkajs'}; topic of ${partitions} partitions on a broker of the run's own`,
      ackLoss: 'the ack is dropped: the record stays unsettled, its partition holds and it is fetched again',
      stall: 'longer than the lease (2/3 of the session timeout): heartbeats keep the member',
      brokerDrop: 'every consumer connection cut (TCP proxy in front of the PROXIED listener)',
      brokerRestart: 'restart.sh: the broker stops and starts on the same data',
    },
    async consumerBroker() {
      return {
        type: 'kafka',
        client: kafkaClient,
        brokers: [`127.0.0.1:${proxyPort}`],
        topic,
        groupId: consumerName,
        fromBeginning: true,
        sessionTimeout,
        heartbeatInterval: 500,
        rebalanceTimeout: 10_000,
        maxWaitTimeInMs: 200,
        createDeadLetterTopic: false,
      };
    },
    async publish(messages) {
      for (let i = 0; i < messages.length; i += 500) {
        await producer.send({
          topic,
          acks: -1,
          messages: messages.slice(i, i + 500).map((message) => ({
            // Copies of one ID share a partition, as a keyed producer's retries do.
            ...(message.id === undefined ? {} : { key: message.id, headers: { 'message-id': message.id } }),
            value: message.rawBody ?? JSON.stringify(message.body),
          })),
        });
      }
    },
    async backlog() {
      const [committed, ends] = await Promise.all([
        admin.fetchOffsets({ groupId: consumerName, topics: [topic] }),
        admin.fetchTopicOffsets(topic),
      ]);
      const at = new Map(committed[0]?.partitions.map((p) => [p.partition, Number(p.offset)]) ?? []);
      let lag = 0;
      for (const end of ends) {
        const offset = at.get(end.partition) ?? -1;
        lag += Number(end.high) - (offset < 0 ? Number(end.low) : offset);
      }
      return lag;
    },
    async deadLetters() {
      return readTopic(kafka, admin, deadLetterTopic, (message) => ({
        id: message.headers?.['message-id']?.toString(),
        reason: message.headers?.[DEAD_LETTER_HEADERS.reason]?.toString() ?? '(no reason header)',
      }));
    },
    async disconnect() {
      const count = proxy.connectionCount;
      await proxy.cut();
      await proxy.resume();
      return `cut ${count} consumer connection(s) to Kafka`;
    },
    async restart() {
      const started = Date.now();
      await broker.restart();
      return `broker restarted in ${((Date.now() - started) / 1000).toFixed(1)} s`;
    },
    async teardown() {
      await Promise.allSettled([producer.disconnect(), admin.disconnect()]);
      await proxy.close();
      await broker.stop();
    },
  };
}

/**
 * Every record of `topic`, read from the start by a throwaway group.
 *
 * @template T
 * @param {import('kafkajs').Kafka} kafka
 * @param {import('kafkajs').Admin} admin
 * @param {string} topic
 * @param {(message: import('kafkajs').KafkaMessage) => T} map
 * @returns {Promise<T[]>}
 */
async function readTopic(kafka, admin, topic, map) {
  const ends = await admin.fetchTopicOffsets(topic);
  if (ends.every((end) => Number(end.high) <= Number(end.low))) return [];
  const consumer = kafka.consumer({ groupId: `oncely-chaos-dlq-reader-${Date.now()}`, maxWaitTimeInMs: 100 });
  /** @type {T[]} */
  const seen = [];
  const positions = new Map();
  await consumer.connect();
  try {
    await consumer.subscribe({ topics: [topic], fromBeginning: true });
    await consumer.run({
      eachMessage: async ({ partition, message }) => {
        seen.push(map(message));
        positions.set(partition, Number(message.offset) + 1);
      },
    });
    const deadline = Date.now() + 30_000;
    while (Date.now() < deadline) {
      const caughtUp = ends.every(
        (end) =>
          Number(end.high) <= Number(end.low) || (positions.get(end.partition) ?? 0) >= Number(end.high),
      );
      if (caughtUp) break;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  } finally {
    await consumer.disconnect().catch(() => {});
  }
  return seen;
}
