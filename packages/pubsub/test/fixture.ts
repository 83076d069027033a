import { randomUUID } from 'node:crypto';
import type { CreateSubscriptionOptions, PubSub, Topic } from '@google-cloud/pubsub';
import { Consumer, type ConsumerConfig, type ConsumerEvent, type Logger, silentLogger } from '@oncely/core';
import type { PubSubEmulator } from '@oncely/emulators/pubsub';
import { PostgresStore } from '@oncely/postgres';
import { createAdapter, type PubSubAdapter, type PubSubAdapterOptions } from '@oncely/pubsub';
import { DATABASE_URL, PROJECT } from './support.js';

/** A unique resource ID per test. */
export const unique = (label: string) => `${label}-${randomUUID().slice(0, 8)}`;

/** Every event of one consumer, in the order emitted, for ordering assertions. */
export interface EventLog {
  readonly events: Array<{ type: string; messageId?: string; attempt?: number; error?: unknown }>;
  /** How many events of `type` (for `messageId`, when given) were emitted. */
  count(type: string, messageId?: string): number;
  /** Position of the first event of `type` for `messageId` that matches, or -1. */
  indexOf(type: string, messageId: string, attempt?: number): number;
}

const EVENT_TYPES = [
  'received',
  'processed',
  'duplicate',
  'failed',
  'retried',
  'deadLettered',
  'leaseRenewed',
  'leaseLost',
  'ackFailed',
] as const;

function recordEvents(consumer: Consumer): EventLog {
  const events: EventLog['events'] = [];
  for (const type of EVENT_TYPES) {
    consumer.on(type, (event: ConsumerEvent) =>
      events.push({ type, messageId: event.messageId, attempt: event.attempt, error: event.error }),
    );
  }
  return {
    events,
    count: (type, messageId) =>
      events.filter((e) => e.type === type && (messageId === undefined || e.messageId === messageId)).length,
    indexOf: (type, messageId, attempt) =>
      events.findIndex(
        (e) =>
          e.type === type && e.messageId === messageId && (attempt === undefined || e.attempt === attempt),
      ),
  };
}

/** A logger that keeps what it was told, for assertions on what the adapter said. */
export function recordingLogger(): Logger & { lines: Array<{ level: string; message: string }> } {
  const lines: Array<{ level: string; message: string }> = [];
  const at = (level: string) => (message: string) => {
    lines.push({ level, message });
  };
  return { lines, debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') };
}

export interface AdapterFixture {
  store: PostgresStore;
  schema: string;
  topic: Topic;
  subscriptionName: string;
  broker: { type: 'pubsub'; projectId: string; apiEndpoint: string; subscription: string };
  /** A consumer on a new adapter of this subscription, its events recorded. */
  consumer(
    config: Omit<ConsumerConfig<unknown>, 'name' | 'broker' | 'store'> & {
      broker?: Record<string, unknown>;
      adapterOptions?: Partial<PubSubAdapterOptions>;
    },
  ): { consumer: Consumer; adapter: PubSubAdapter; events: EventLog };
  /** Stops every consumer made here, drops the schema and closes the store. */
  drop(): Promise<void>;
}

/**
 * A migrated store in its own schema (with an `effects(id)` table), a new topic and a
 * subscription on the emulator, and consumers on them: what each adapter test needs.
 */
export async function adapterFixture(
  pubsub: PubSub,
  emulator: PubSubEmulator,
  label: string,
  subscriptionOptions: CreateSubscriptionOptions = {},
): Promise<AdapterFixture> {
  const schema = `oncely_ps_${label.replaceAll('-', '_')}_${randomUUID().replaceAll('-', '').slice(0, 10)}`;
  const store = new PostgresStore({ connectionString: DATABASE_URL, schema, logger: silentLogger });
  await store.migrate();
  await store.transaction((tx) => tx.query(`CREATE TABLE "${schema}".effects (id text NOT NULL)`));
  const [topic] = await pubsub.createTopic(unique(label));
  if (subscriptionOptions.enableMessageOrdering) topic.setPublishOptions({ messageOrdering: true });
  const [subscription] = await topic.createSubscription(unique(`${label}-sub`), {
    ackDeadlineSeconds: 10,
    ...subscriptionOptions,
  });
  const broker = {
    type: 'pubsub' as const,
    projectId: PROJECT,
    apiEndpoint: emulator.address,
    subscription: subscription.name,
  };
  const consumers: Consumer[] = [];
  return {
    store,
    schema,
    topic,
    subscriptionName: subscription.name,
    broker,
    consumer({ broker: overrides, adapterOptions, ...config }) {
      const brokerConfig = { ...broker, ...overrides };
      const log = config.logger ?? silentLogger;
      const adapter = createAdapter(brokerConfig, {
        consumerName: label,
        log,
        handlerTimeoutMs: config.handlerTimeoutMs,
        maxAttempts: config.maxAttempts,
        ...adapterOptions,
      }) as PubSubAdapter;
      const consumer = new Consumer(
        {
          name: label,
          broker: brokerConfig as never,
          store,
          logger: log,
          ...config,
        } as ConsumerConfig<unknown>,
        adapter,
      );
      consumers.push(consumer);
      return { consumer, adapter, events: recordEvents(consumer) };
    },
    async drop() {
      for (const consumer of consumers) await consumer.stop().catch(() => {});
      await store.transaction((tx) => tx.query(`DROP SCHEMA "${schema}" CASCADE`)).catch(() => {});
      await store.close();
    },
  };
}
