import {
  CreateQueueCommand,
  GetQueueAttributesCommand,
  ReceiveMessageCommand,
  SQSClient,
} from '@aws-sdk/client-sqs';
import { isOncelyError } from '@oncely/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SqsQueueClient } from '../src/SqsQueueClient.js';
import { CREDENTIALS, send } from './fauxqs.js';

// Runs only against ElasticMQ (SQS_ELASTICMQ_ENDPOINT, see scripts/elasticmq-conformance.sh):
// unlike fauxqs it reports a stale receipt handle in a DeleteMessageBatch as a per-entry
// `Failed[]` result (`ReceiptHandleIsInvalid`), as SQS does for FIFO queues. That lets
// the per-entry mapping run against a real server. (Standard SQS queues may instead
// accept a stale delete silently; no test asserts either outcome on its own.)

const endpoint = process.env.SQS_ELASTICMQ_ENDPOINT;

describe.skipIf(!endpoint)('SQS adapter on ElasticMQ', () => {
  let client: SQSClient;
  beforeAll(() => {
    client = new SQSClient({ endpoint, region: 'us-east-1', credentials: CREDENTIALS });
  });
  afterAll(() => client?.destroy());

  it("a batch entry's Failed[] rejects only that ack, as LeaseLost; the other entry of the batch is deleted", async () => {
    const name = `entries-${Date.now()}.fifo`;
    const { QueueUrl } = await client.send(
      new CreateQueueCommand({ QueueName: name, Attributes: { FifoQueue: 'true', VisibilityTimeout: '1' } }),
    );
    const queueUrl = QueueUrl!;
    await send(client, queueUrl, [
      { id: 'a', body: 'a', group: 'ga', dedup: 'a' },
      { id: 'b', body: 'b', group: 'gb', dedup: 'b' },
    ]);
    const queue = new SqsQueueClient(client, queueUrl);
    const first = await queue.receive({ max: 10, visibilitySeconds: 1, waitSeconds: 1 });
    const staleA = first.find((m) => m.Body === 'a')?.ReceiptHandle;
    if (!staleA) throw new Error(`the first receive did not hold 'a': ${first.map((m) => m.Body)}`);
    // Let both lapse and receive them again: the first handles are now stale. One receive
    // may return only the message whose visibility lapsed first (a long poll answers as
    // soon as one is there): CI saw `b` missing from it. Receive until both are back.
    const current = new Map<string, string>();
    const deadline = Date.now() + 40_000;
    while (current.size < 2) {
      if (Date.now() > deadline) throw new Error(`only ${[...current.keys()]} came back within 40 s`);
      const again = await client.send(
        new ReceiveMessageCommand({
          QueueUrl: queueUrl,
          MaxNumberOfMessages: 10,
          WaitTimeSeconds: 5,
          VisibilityTimeout: 60,
        }),
      );
      for (const message of again.Messages ?? []) current.set(message.Body!, message.ReceiptHandle!);
    }
    const currentB = current.get('b')!;
    // Both acks land in one DeleteMessageBatch (issued in the same tick).
    const [resultA, resultB] = await Promise.allSettled([queue.delete(staleA), queue.delete(currentB)]);
    expect(resultA.status).toBe('rejected');
    expect(isOncelyError((resultA as PromiseRejectedResult).reason, 'LEASE_LOST')).toBe(true);
    expect(resultB.status).toBe('fulfilled');
    const attributes = await client.send(
      new GetQueueAttributesCommand({
        QueueUrl: queueUrl,
        AttributeNames: ['ApproximateNumberOfMessages', 'ApproximateNumberOfMessagesNotVisible'],
      }),
    );
    // 'a' is still there (in flight under its new handle); 'b' is gone.
    expect(
      Number(attributes.Attributes?.ApproximateNumberOfMessages) +
        Number(attributes.Attributes?.ApproximateNumberOfMessagesNotVisible),
    ).toBe(1);
  }, 60_000);
});
