import { randomUUID } from 'node:crypto';
import diagnostics from 'node:diagnostics_channel';
import type { IncomingMessage, ServerResponse } from 'node:http';
import {
  CreateQueueCommand,
  GetQueueAttributesCommand,
  type MessageAttributeValue,
  ReceiveMessageCommand,
  SendMessageBatchCommand,
  SQSClient,
} from '@aws-sdk/client-sqs';
import { type FauxqsServer, startFauxqs } from 'fauxqs';

/** fauxqs started in-process for one test file, and a client for it. */
export interface Emulator {
  server: FauxqsServer;
  client: SQSClient;
  endpoint: string;
  /** Creates a uniquely named queue; `fifo` appends `.fifo`. */
  createQueue(
    prefix: string,
    attributes?: Record<string, string>,
    fifo?: boolean,
  ): Promise<{ url: string; arn: string; name: string }>;
  stop(): Promise<void>;
}

export const CREDENTIALS = { accessKeyId: 'x', secretAccessKey: 'x' };

export async function startEmulator(): Promise<Emulator> {
  const server = await startFauxqs({ port: 0, logger: false });
  const client = new SQSClient({ endpoint: server.address, region: 'us-east-1', credentials: CREDENTIALS });
  return {
    server,
    client,
    endpoint: server.address,
    async createQueue(prefix, attributes = {}, fifo = false) {
      const name = `${prefix}-${randomUUID().slice(0, 8)}${fifo ? '.fifo' : ''}`;
      const out = await client.send(
        new CreateQueueCommand({
          QueueName: name,
          Attributes: fifo ? { FifoQueue: 'true', ...attributes } : attributes,
        }),
      );
      const attrs = await client.send(
        new GetQueueAttributesCommand({ QueueUrl: out.QueueUrl, AttributeNames: ['QueueArn'] }),
      );
      return { url: out.QueueUrl!, arn: attrs.Attributes!.QueueArn!, name };
    },
    async stop() {
      client.destroy();
      await server.stop();
    },
  };
}

/** Sends messages in batches of 10; `id` goes into the `message-id` attribute. */
export async function send(
  client: SQSClient,
  queueUrl: string,
  messages: Array<{
    id?: string;
    body: string;
    group?: string;
    dedup?: string;
    attributes?: Record<string, string>;
  }>,
): Promise<void> {
  for (let i = 0; i < messages.length; i += 10) {
    const chunk = messages.slice(i, i + 10);
    const out = await client.send(
      new SendMessageBatchCommand({
        QueueUrl: queueUrl,
        Entries: chunk.map((m, j) => {
          const attributes: Record<string, MessageAttributeValue> = {};
          if (m.id !== undefined) attributes['message-id'] = { DataType: 'String', StringValue: m.id };
          for (const [k, v] of Object.entries(m.attributes ?? {}))
            attributes[k] = { DataType: 'String', StringValue: v };
          return {
            Id: String(j),
            MessageBody: m.body,
            MessageAttributes: attributes,
            MessageGroupId: m.group,
            MessageDeduplicationId: m.dedup,
          };
        }),
      }),
    );
    if (out.Failed?.length) throw new Error(`send failed: ${JSON.stringify(out.Failed)}`);
  }
}

/** Reads everything currently visible on a queue (the dead-letter queue), without deleting. */
export async function drainVisible(client: SQSClient, queueUrl: string) {
  const all = [];
  for (;;) {
    const out = await client.send(
      new ReceiveMessageCommand({
        QueueUrl: queueUrl,
        MaxNumberOfMessages: 10,
        WaitTimeSeconds: 0,
        VisibilityTimeout: 60,
        MessageAttributeNames: ['All'],
        MessageSystemAttributeNames: ['All'],
      }),
    );
    if (!out.Messages?.length) return all;
    all.push(...out.Messages);
  }
}

/**
 * How each ReceiveMessage of `queueUrl` sent through `client` ended, seen by the real client:
 * 'answered', or the error's name ('AbortError' when the client aborted it). Recorded by a
 * middleware on the client; the list fills as polls end.
 */
export function pollOutcomes(client: SQSClient, queueUrl: string): string[] {
  const polls: string[] = [];
  client.middlewareStack.add(
    (next, context) => async (args) => {
      const input = args.input as { QueueUrl?: string };
      if (context.commandName !== 'ReceiveMessageCommand' || input.QueueUrl !== queueUrl) return next(args);
      try {
        const result = await next(args);
        polls.push('answered');
        return result;
      } catch (error) {
        polls.push((error as Error).name);
        throw error;
      }
    },
    { step: 'initialize', name: `pollOutcomes-${randomUUID()}` },
  );
  return polls;
}

/**
 * Counts the ReceiveMessage requests that fauxqs (in this process) has read in full and not
 * yet answered: long polls held at the server. Seen from Node's own HTTP server
 * (`http.server.request.start`), not from the client, so a count of 1 means the request
 * is on the server's side of the wire: fauxqs will hold it for its WaitTimeSeconds whatever
 * the client does next (it does not notice a closed connection).
 */
export function heldPolls(emulator: Emulator): { count(): number; close(): void } {
  let held = 0;
  const onStart = (message: unknown) => {
    const { request, response, server } = message as {
      request: IncomingMessage;
      response: ServerResponse;
      server: unknown;
    };
    if (request.headers['x-amz-target'] !== 'AmazonSQS.ReceiveMessage') return;
    const port = (server as { address(): { port: number } | null }).address()?.port;
    if (port !== emulator.server.port) return;
    request.once('end', () => {
      held++;
      response.once('close', () => held--);
    });
  };
  diagnostics.subscribe('http.server.request.start', onStart);
  return { count: () => held, close: () => diagnostics.unsubscribe('http.server.request.start', onStart) };
}
