import { randomUUID } from 'node:crypto';
import {
  ChangeMessageVisibilityCommand,
  CreateQueueCommand,
  DeleteQueueCommand,
  GetQueueAttributesCommand,
  type MessageAttributeValue,
  ReceiveMessageCommand,
  SendMessageBatchCommand,
  SQSClient,
} from '@aws-sdk/client-sqs';
import { silentLogger } from '@oncely/core';
import { PostgresStore } from '@oncely/postgres';
import {
  type AdapterFeatures,
  type AdapterHarness,
  type HarnessSetup,
  heldProxy,
  postgresStores,
  runAdapterConformance,
  TcpProxy,
} from '@oncely/testkit';
import type { FauxqsServer } from 'fauxqs';
import { it } from 'vitest';
import { CREDENTIALS, startEmulator } from './fauxqs.js';
import { DATABASE_URL, postgresAvailable } from './support.js';

// The shared adapter conformance suite (shared/CONFORMANCE.md) with the real PostgreSQL
// store, on two SQS implementations:
//
// - fauxqs 1.9, started in this process (always);
// - ElasticMQ, only when SQS_ELASTICMQ_ENDPOINT points at a running server
//   (packages/sqs/scripts/elasticmq-conformance.sh fetches, starts and stops one).
//
// Harness choices:
// - SQS traffic goes through a TcpProxy so `disconnect()` can cut the client's
//   connections from the server side (scenario 13).
// - Standard queues everywhere except scenario 15 (`ordered`), which gets a FIFO queue
//   with one group per ordering key. Producer duplicates are published with distinct
//   deduplication IDs, so SQS never drops them: `brokerDedup` is false.
// - Dead letters: every queue has a RedrivePolicy (maxReceiveCount = the scenario's
//   maxDeliveries, else 10) to its own DLQ; the adapter resolves that target and sends
//   dead-lettered messages there with the reason (no broker.deadLetterQueueUrl).
// - `staleAckDetectable` is false: a DeleteMessage with a stale handle may succeed on SQS
//   (and does on fauxqs, without deleting). Nothing here relies on that behaviour.
// - Emulator limit: fauxqs keeps one in-flight message per FIFO group. ElasticMQ, like
//   SQS, returns several messages of one group in one receive, so its run exercises the
//   adapter's per-group sequencing; without it that path is covered by
//   test/GroupSequencer.test.ts and the memory broker's conformance run.

const hasPostgres = await postgresAvailable();
const WAIT_SECONDS = 1;
const REASON = 'oncely-dead-letter-reason';
const SOURCE_ID = 'oncely-source-message-id';

const FEATURES: AdapterFeatures = {
  redeliveryOnRetry: true,
  delayedRetry: true,
  leaseExtension: true,
  nativeDeadLetter: true,
  deliveryCount: true,
  ordering: 'key',
  competingConsumers: true,
  serverSideDisconnect: true,
  brokerRestart: false,
  brokerDedup: false,
  staleAckDetectable: false,
  crossProcess: true,
  connectHold: true,
};

/** An SQS implementation to run the suite on. */
interface Backend {
  /** Where the proxy forwards to. */
  target: { host: string; port: number };
  client: SQSClient;
  /** fauxqs only: exact, non-destructive inspection. */
  fauxqs?: FauxqsServer;
  close(): Promise<void>;
}

async function fauxqsBackend(): Promise<Backend> {
  const emulator = await startEmulator();
  return {
    target: { host: '127.0.0.1', port: emulator.server.port },
    client: emulator.client,
    fauxqs: emulator.server,
    close: () => emulator.stop(),
  };
}

async function elasticMqBackend(endpoint: string): Promise<Backend> {
  const url = new URL(endpoint);
  const client = new SQSClient({ endpoint, region: 'us-east-1', credentials: CREDENTIALS });
  return {
    target: { host: url.hostname, port: Number(url.port) },
    client,
    close: async () => client.destroy(),
  };
}

type Attributes = Record<string, { StringValue?: string }> | undefined;
const idOf = (attributes: Attributes) => attributes?.['message-id']?.StringValue;
const reasonOf = (attributes: Attributes) => attributes?.[REASON]?.StringValue ?? 'sqs-redrive';

async function createHarness(createBackend: () => Promise<Backend>): Promise<AdapterHarness> {
  const backend = await createBackend();
  const { client, fauxqs } = backend;
  const proxy = new TcpProxy(backend.target);
  const proxyPort = await proxy.start();
  const endpoint = `http://127.0.0.1:${proxyPort}`;
  const schema = `oncely_sqs_conf_${randomUUID().replaceAll('-', '').slice(0, 10)}`;

  async function createQueue(name: string, attributes: Record<string, string>): Promise<string> {
    const out = await client.send(new CreateQueueCommand({ QueueName: name, Attributes: attributes }));
    return out.QueueUrl!;
  }

  return {
    brokerType: 'sqs',
    childModule: new URL('./conformanceChild.mjs', import.meta.url).href,
    ...postgresStores({
      connectionString: DATABASE_URL,
      schema,
      createStore: (connectionString, schema) =>
        new PostgresStore({ connectionString, schema, logger: silentLogger }),
    }),
    async setup({ name, leaseMs, maxDeliveries, ordered }): Promise<HarnessSetup> {
      const visibilitySeconds = Math.max(1, Math.ceil((leaseMs ?? 10_000) / 1000));
      const base = name.replace(/[^A-Za-z0-9_-]/g, '-').slice(0, 60);
      const suffix = ordered ? '.fifo' : '';
      const fifo: Record<string, string> = ordered ? { FifoQueue: 'true' } : {};
      const dlqName = `${base}-dlq${suffix}`;
      const queueName = `${base}${suffix}`;
      const dlqUrl = await createQueue(dlqName, fifo);
      const dlqArn = (
        await client.send(new GetQueueAttributesCommand({ QueueUrl: dlqUrl, AttributeNames: ['QueueArn'] }))
      ).Attributes!.QueueArn!;
      const queueUrl = await createQueue(queueName, {
        ...fifo,
        VisibilityTimeout: String(visibilitySeconds),
        RedrivePolicy: JSON.stringify({ deadLetterTargetArn: dlqArn, maxReceiveCount: maxDeliveries ?? 10 }),
      });
      // Dead letters read through the SQS API are hidden (never deleted) and remembered,
      // so repeated calls return the whole list.
      const seenDeadLetters = new Map<string, { id?: string; reason: string }>();

      const setup: HarnessSetup = {
        leaseMs: visibilitySeconds * 1000,
        brokerConfig: (overrides = {}) => ({
          type: 'sqs',
          queueUrl,
          endpoint,
          region: 'us-east-1',
          credentials: CREDENTIALS,
          waitTimeSeconds: WAIT_SECONDS,
          ...overrides,
        }),
        async publish(messages) {
          for (let i = 0; i < messages.length; i += 10) {
            const entries = messages.slice(i, i + 10).map((m, j) => {
              const attributes: Record<string, MessageAttributeValue> = {};
              if (m.id !== undefined) attributes['message-id'] = { DataType: 'String', StringValue: m.id };
              for (const [k, v] of Object.entries(m.attributes ?? {})) {
                attributes[k] = { DataType: 'String', StringValue: v };
              }
              return {
                Id: String(j),
                MessageBody: m.rawBody ?? JSON.stringify(m.body),
                MessageAttributes: attributes,
                ...(ordered
                  ? { MessageGroupId: m.orderingKey ?? 'default', MessageDeduplicationId: randomUUID() }
                  : {}),
              };
            });
            const out = await client.send(
              new SendMessageBatchCommand({ QueueUrl: queueUrl, Entries: entries }),
            );
            if (out.Failed?.length) throw new Error(`publish failed: ${JSON.stringify(out.Failed)}`);
          }
        },
        async deadLetters() {
          if (fauxqs) {
            const messages = fauxqs.inspectQueue(dlqName)?.messages;
            if (!messages) return [];
            // A copy whose original is still on the source queue is a dead-letter in
            // progress (sent, not yet deleted): report it once the delete went through.
            const source = fauxqs.inspectQueue(queueName)?.messages;
            const stillThere = new Set(
              source
                ? [...source.ready, ...source.delayed, ...source.inflight.map((m) => m.message)].map(
                    (m) => m.messageId,
                  )
                : [],
            );
            return [...messages.ready, ...messages.delayed, ...messages.inflight.map((m) => m.message)]
              .filter((m) => !stillThere.has(m.messageAttributes?.[SOURCE_ID]?.StringValue ?? ''))
              .map((m) => ({ id: idOf(m.messageAttributes), reason: reasonOf(m.messageAttributes) }));
          }
          for (;;) {
            const out = await client.send(
              new ReceiveMessageCommand({
                QueueUrl: dlqUrl,
                MaxNumberOfMessages: 10,
                WaitTimeSeconds: 0,
                VisibilityTimeout: 3600,
                MessageAttributeNames: ['All'],
              }),
            );
            if (!out.Messages?.length) break;
            for (const m of out.Messages) {
              seenDeadLetters.set(m.MessageId!, {
                id: idOf(m.MessageAttributes),
                reason: reasonOf(m.MessageAttributes),
              });
            }
          }
          return [...seenDeadLetters.values()];
        },
        async backlog() {
          if (fauxqs) {
            const messages = fauxqs.inspectQueue(queueName)?.messages;
            if (!messages) return undefined;
            return messages.ready.length + messages.delayed.length + messages.inflight.length;
          }
          const out = await client.send(
            new GetQueueAttributesCommand({
              QueueUrl: queueUrl,
              AttributeNames: [
                'ApproximateNumberOfMessages',
                'ApproximateNumberOfMessagesNotVisible',
                'ApproximateNumberOfMessagesDelayed',
              ],
            }),
          );
          const a = out.Attributes ?? {};
          return (
            Number(a.ApproximateNumberOfMessages ?? 0) +
            Number(a.ApproximateNumberOfMessagesNotVisible ?? 0) +
            Number(a.ApproximateNumberOfMessagesDelayed ?? 0)
          );
        },
        async disconnect() {
          // Every open connection of the consumers dies; new ones are accepted again.
          await proxy.cut();
          await proxy.resume();
        },
        holdConnections: () =>
          heldProxy(backend.target, (port) => ({ endpoint: `http://127.0.0.1:${port}` })),
        async teardown() {
          for (const url of [queueUrl, dlqUrl]) {
            await client.send(new DeleteQueueCommand({ QueueUrl: url })).catch(() => {});
          }
        },
      };
      if (fauxqs) {
        // What a lapsed visibility timeout does, without the wait: visibility 0 on the
        // receipt handle the consumer holds (read through fauxqs's inspection API). Other
        // backends let the lease lapse.
        setup.forceRedelivery = async (id) => {
          const inflight = fauxqs.inspectQueue(queueName)?.messages.inflight ?? [];
          for (const entry of inflight) {
            if (idOf(entry.message.messageAttributes) !== id) continue;
            await client.send(
              new ChangeMessageVisibilityCommand({
                QueueUrl: queueUrl,
                ReceiptHandle: entry.receiptHandle,
                VisibilityTimeout: 0,
              }),
            );
          }
        };
      }
      return setup;
    },
    async close() {
      await proxy.close();
      await backend.close();
    },
  };
}

const elasticMqEndpoint = process.env.SQS_ELASTICMQ_ENDPOINT;
// Debugging aid: SQS_CONFORMANCE_ONLY=4,11 runs just those scenarios.
const only = process.env.SQS_CONFORMANCE_ONLY?.split(',').map(Number);

if (!hasPostgres) {
  it.skip('SQS adapter conformance [skipped: PostgreSQL is not reachable]', () => {});
} else {
  // SQS_ELASTICMQ_ONLY: the test command's ElasticMQ run, beside the main run that already
  // ran the fauxqs suite (twice would only take CPU from the rest).
  if (!process.env.SQS_ELASTICMQ_ONLY) {
    runAdapterConformance({
      name: 'SQS adapter conformance (fauxqs 1.9 + PostgreSQL)',
      features: FEATURES,
      createHarness: () => createHarness(fauxqsBackend),
      only,
    });
  }
  if (elasticMqEndpoint) {
    runAdapterConformance({
      name: `SQS adapter conformance (ElasticMQ at ${elasticMqEndpoint} + PostgreSQL)`,
      features: FEATURES,
      createHarness: () => createHarness(() => elasticMqBackend(elasticMqEndpoint)),
      only,
    });
  } else {
    it.skip('SQS adapter conformance on ElasticMQ [skipped: set SQS_ELASTICMQ_ENDPOINT, see scripts/elasticmq-conformance.sh]', () => {});
  }
}
