/**
 * SQS on fauxqs, started in the runner's process (which outlives every consumer). The
 * consumers reach it through a TCP proxy: a connection drop cuts every open connection;
 * a "restart" refuses connections for a few seconds. fauxqs keeps its state in memory
 * only, so stopping its server for real would drop every queued message (a loss of the
 * emulator, not of Oncely); the proxy outage is what a restart of a durable SQS endpoint
 * looks like to its clients.
 */
import {
  CreateQueueCommand,
  DeleteQueueCommand,
  GetQueueAttributesCommand,
  SendMessageBatchCommand,
  SQSClient,
} from '@aws-sdk/client-sqs';
import { DEAD_LETTER_ATTRIBUTES } from '@oncely/sqs';
import { TcpProxy } from '@oncely/testkit';
import { startFauxqs } from 'fauxqs';

// The SDK's Node 20 end-of-support notice would otherwise fill every run's output.
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';

const CREDENTIALS = { accessKeyId: 'x', secretAccessKey: 'x' };
const REGION = 'us-east-1';

/**
 * @param {{ runId: string, restartDownMs?: number }} input
 * @returns {Promise<import('./types.mjs').Backend>}
 */
export async function sqsBackend({ runId, restartDownMs = 3000 }) {
  const leaseMs = 2000;
  const server = await startFauxqs({ port: 0, logger: false });
  const client = new SQSClient({ endpoint: server.address, region: REGION, credentials: CREDENTIALS });
  const proxy = new TcpProxy({ host: '127.0.0.1', port: server.port });
  const proxyPort = await proxy.start();
  const queueName = `oncely-chaos-${runId}`;
  const dlqName = `${queueName}-dlq`;
  const dlqUrl = (await client.send(new CreateQueueCommand({ QueueName: dlqName }))).QueueUrl;
  const dlqArn = (
    await client.send(new GetQueueAttributesCommand({ QueueUrl: dlqUrl, AttributeNames: ['QueueArn'] }))
  ).Attributes?.QueueArn;
  const queueUrl = (
    await client.send(
      new CreateQueueCommand({
        QueueName: queueName,
        Attributes: {
          VisibilityTimeout: String(leaseMs / 1000),
          // Far above the consumer's maxAttempts: the consumer, which knows why, dead-letters first.
          RedrivePolicy: JSON.stringify({ deadLetterTargetArn: dlqArn, maxReceiveCount: 1000 }),
        },
      }),
    )
  ).QueueUrl;

  /** @param {import('fauxqs').FauxqsServer['inspectQueue'] extends (n: string) => infer R ? R : never} inspected */
  const all = (inspected) => {
    const messages = inspected?.messages;
    if (!messages) return [];
    return [...messages.ready, ...messages.delayed, ...messages.inflight.map((entry) => entry.message)];
  };

  return {
    name: 'sqs',
    crossProcess: true,
    leaseMs,
    stallMs: Math.round(leaseMs * 1.5),
    leaseLossSlot: true,
    notes: {
      consumers: 'child processes; fauxqs runs in the runner',
      brokerDrop: 'every consumer connection to fauxqs cut (TCP proxy)',
      brokerRestart: `fauxqs unreachable for ${restartDownMs} ms (TCP proxy); state kept, as a durable SQS keeps it`,
    },
    async consumerBroker() {
      return {
        type: 'sqs',
        queueUrl,
        endpoint: `http://127.0.0.1:${proxyPort}`,
        region: REGION,
        credentials: CREDENTIALS,
        waitTimeSeconds: 1,
      };
    },
    async publish(messages) {
      for (let i = 0; i < messages.length; i += 10) {
        const entries = messages.slice(i, i + 10).map((message, j) => ({
          Id: String(j),
          MessageBody: message.rawBody ?? JSON.stringify(message.body),
          MessageAttributes:
            message.id === undefined ? {} : { 'message-id': { DataType: 'String', StringValue: message.id } },
        }));
        const out = await client.send(new SendMessageBatchCommand({ QueueUrl: queueUrl, Entries: entries }));
        if (out.Failed?.length) throw new Error(`SQS publish failed: ${JSON.stringify(out.Failed)}`);
      }
    },
    async backlog() {
      return all(server.inspectQueue(queueName)).length;
    },
    async deadLetters() {
      return all(server.inspectQueue(dlqName)).map((message) => ({
        id: message.messageAttributes?.['message-id']?.StringValue,
        reason: message.messageAttributes?.[DEAD_LETTER_ATTRIBUTES.reason]?.StringValue ?? 'sqs-redrive',
      }));
    },
    async disconnect() {
      const count = proxy.connectionCount;
      await proxy.cut();
      await proxy.resume();
      return `cut ${count} connection(s) to fauxqs`;
    },
    async restart() {
      await proxy.cut();
      await new Promise((resolve) => setTimeout(resolve, restartDownMs));
      await proxy.resume();
      return `fauxqs unreachable for ${restartDownMs} ms`;
    },
    async teardown() {
      await proxy.close();
      for (const url of [queueUrl, dlqUrl]) {
        await client.send(new DeleteQueueCommand({ QueueUrl: url })).catch(() => {});
      }
      client.destroy();
      await server.stop();
    },
  };
}
