import type { PostgresStore } from '@oncely/postgres';
import type { SQSEvent, SQSRecord } from 'aws-lambda';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sqsHandler } from '../src/index.js';
import {
  admin,
  createQueue,
  effects,
  openStore,
  postgresAvailable,
  SqsEventSourceMapping,
  sendMessages,
  startSqs,
  uniqueSchema,
} from './support.js';

const hasPostgres = await postgresAvailable();
const silent = { debug() {}, info() {}, warn() {}, error() {} };

describe.skipIf(!hasPostgres)(
  'sqsHandler driven by the SQS emulator (fauxqs) and a mapping driver, real PostgreSQL',
  () => {
    const schema = uniqueSchema('lambda_sqs');
    let store: PostgresStore;
    let sqs: Awaited<ReturnType<typeof startSqs>>;
    beforeAll(async () => {
      store = await openStore('postgres', schema);
      sqs = await startSqs();
    });
    afterAll(async () => {
      await sqs?.stop();
      await store?.close();
      await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    });
    const effectsOf = async (prefix: string) =>
      (await effects(store, schema))
        .filter((row) => row.message_id.startsWith(prefix))
        .map((row) => row.message_id);

    it.each([false, true])(
      'reports only the failing record in batchItemFailures; every effect happens once (batch fast path: %s)',
      async (batch) => {
        const prefix = `std-${batch}-`;
        const queue = await createQueue(sqs.client, false);
        const ids = Array.from({ length: 10 }, (_, i) => `${prefix}${i}`);
        await sendMessages(
          sqs.client,
          queue.url,
          ids.map((id) => ({ id, body: { id } })),
        );
        let poisonFailures = 2;
        const fn = sqsHandler<{ id: string }>({
          name: `std-${batch}`,
          store,
          batch,
          logger: silent,
          handler: async (message, ctx) => {
            await ctx.tx.query(`INSERT INTO "${schema}".effects (message_id) VALUES ($1)`, [message.id]);
            if (message.id === `${prefix}3` && poisonFailures-- > 0) throw new Error('downstream refused');
          },
        });
        const mapping = new SqsEventSourceMapping(sqs.client, queue, fn);
        await mapping.runUntil(async () => (await effectsOf(prefix)).length >= 10);
        expect((await effectsOf(prefix)).sort()).toEqual([...ids].sort());
        const reported = mapping.invocations.flatMap((inv) => inv.response?.batchItemFailures ?? []);
        const failedMessageIds = new Set(
          reported.map((f) => {
            const record = mapping.invocations
              .flatMap((inv) => inv.event.Records)
              .find((r) => r.messageId === f.itemIdentifier)!;
            return record.messageAttributes['message-id']!.stringValue;
          }),
        );
        expect([...failedMessageIds]).toEqual([`${prefix}3`]);
        // Per record: each failure reported it. Batch path: one batch runs a failing item twice
        // (without, then with savepoints), so one report may cover both failures.
        expect(reported.length).toBeGreaterThanOrEqual(1);
      },
    );

    it('batch: true commits what fits before the invocation deadline and reports only the rest (a handler honouring ctx.signal)', async () => {
      const prefix = 'deadline-';
      const queue = await createQueue(sqs.client, false);
      const ids = Array.from({ length: 10 }, (_, i) => `${prefix}${i}`);
      await sendMessages(
        sqs.client,
        queue.url,
        ids.map((id) => ({ id, body: { id } })),
      );
      const fn = sqsHandler({
        name: 'deadline-batch',
        store,
        batch: true,
        deadlineMarginMs: 1000,
        logger: silent,
        handler: async (message, ctx) => {
          // 600 ms of work per record that stops as soon as ctx.signal says time is up.
          ctx.signal.throwIfAborted();
          await ctx.tx.query(`INSERT INTO "${schema}".effects (message_id) VALUES ($1)`, [message.id]);
          await new Promise<void>((resolve, reject) => {
            const timer = setTimeout(resolve, 600);
            ctx.signal.addEventListener(
              'abort',
              () => {
                clearTimeout(timer);
                reject(ctx.signal.reason);
              },
              { once: true },
            );
          });
        },
      });
      // A 6 s function timeout: ctx.signal aborts 5 s into each invocation, and the batch of
      // 10 needs 6 s of work, so the deadline cuts every full batch. (With 3 s and 300 ms
      // records a loaded machine's 2 s stall left an invocation no time to commit anything.)
      const mapping = new SqsEventSourceMapping(sqs.client, queue, fn, 10, 6000);
      const committedAfter: number[] = [];
      // Ten invocations at most: each must commit something (before: 0 of 10 after 3).
      while (committedAfter.at(-1) !== 10 && mapping.invocations.length < 10) {
        if ((await mapping.pollOnce()) > 0) committedAfter.push(new Set(await effectsOf(prefix)).size);
      }
      expect(committedAfter[0]).toBeGreaterThan(0);
      for (let i = 1; i < committedAfter.length; i++) {
        expect(committedAfter[i]).toBeGreaterThan(committedAfter[i - 1]!);
      }
      expect(committedAfter.at(-1)).toBe(10);
      // The deadline did cut a batch: something was reported back for retry.
      expect(mapping.invocations.some((inv) => inv.response!.batchItemFailures.length > 0)).toBe(true);
      // What an invocation did not report failed is committed: nothing is deleted unapplied.
      const committed = new Set(await effectsOf(prefix));
      for (const invocation of mapping.invocations) {
        const reported = new Set(invocation.response!.batchItemFailures.map((f) => f.itemIdentifier));
        for (const record of invocation.event.Records) {
          if (!reported.has(record.messageId)) {
            expect(committed).toContain(record.messageAttributes['message-id']!.stringValue);
          }
        }
      }
      // Each record's effect committed once.
      expect((await effectsOf(prefix)).sort()).toEqual([...ids].sort());
    });

    it('a crash between commit and return (the response is lost) leaves one effect per message', async () => {
      const prefix = 'crash-';
      const queue = await createQueue(sqs.client, false);
      const ids = Array.from({ length: 5 }, (_, i) => `${prefix}${i}`);
      await sendMessages(
        sqs.client,
        queue.url,
        ids.map((id) => ({ id, body: { id } })),
      );
      let runs = 0;
      const fn = sqsHandler({
        name: 'crash',
        store,
        logger: silent,
        handler: async (message, ctx) => {
          runs++;
          await ctx.tx.query(`INSERT INTO "${schema}".effects (message_id) VALUES ($1)`, [message.id]);
        },
      });
      let crashed = false;
      // Everything committed, then the function dies before Lambda gets the response: the
      // mapping sees a failed invocation and deletes nothing.
      const crashing = async (event: SQSEvent, context: { getRemainingTimeInMillis(): number }) => {
        const response = await fn(event, context);
        if (!crashed) {
          crashed = true;
          throw new Error('Runtime exited with error: signal: killed');
        }
        return response;
      };
      const mapping = new SqsEventSourceMapping(sqs.client, queue, crashing);
      await mapping.runUntil(async () => {
        if (!crashed) return false;
        const attrs = await sqs.client.send(
          new (await import('@aws-sdk/client-sqs')).GetQueueAttributesCommand({
            QueueUrl: queue.url,
            AttributeNames: ['ApproximateNumberOfMessages', 'ApproximateNumberOfMessagesNotVisible'],
          }),
        );
        return (
          attrs.Attributes?.ApproximateNumberOfMessages === '0' &&
          attrs.Attributes?.ApproximateNumberOfMessagesNotVisible === '0'
        );
      });
      // The first invocation failed with the simulated crash, not some other error, and
      // the mapping got no response from it (everything had committed before the crash).
      expect(mapping.invocations[0]!.error).toMatchObject({
        message: 'Runtime exited with error: signal: killed',
      });
      expect(mapping.invocations[0]!.response).toBeUndefined();
      // The redelivered records were received again (receive count 2) and skipped as duplicates.
      const redelivered = mapping.invocations.slice(1).flatMap((inv) => inv.event.Records);
      expect(redelivered.length).toBeGreaterThan(0);
      expect(redelivered.every((r) => r.attributes.ApproximateReceiveCount === '2')).toBe(true);
      expect((await effectsOf(prefix)).sort()).toEqual([...ids].sort());
      expect(runs).toBe(5);
    });

    it('FIFO: group order survives a failure (the later records of the group are not run before it)', async () => {
      const prefix = 'fifo-';
      const queue = await createQueue(sqs.client, true);
      const messages = [
        { id: `${prefix}a1`, group: 'a' },
        { id: `${prefix}a2`, group: 'a' },
        { id: `${prefix}a3`, group: 'a' },
        { id: `${prefix}b1`, group: 'b' },
        { id: `${prefix}b2`, group: 'b' },
      ];
      await sendMessages(
        sqs.client,
        queue.url,
        messages.map((m) => ({ ...m, body: m })),
      );
      let failA2 = 1;
      const fn = sqsHandler<{ group: string }>({
        name: 'fifo',
        store,
        logger: silent,
        handler: async (message, ctx) => {
          if (message.id === `${prefix}a2` && failA2-- > 0) throw new Error('a2 fails once');
          await ctx.tx.query(`INSERT INTO "${schema}".effects (message_id, grp) VALUES ($1, $2)`, [
            message.id,
            message.body.group,
          ]);
        },
      });
      const mapping = new SqsEventSourceMapping(sqs.client, queue, fn);
      await mapping.runUntil(async () => (await effectsOf(prefix)).length >= 5);
      const rows = (await effects(store, schema)).filter((row) => row.message_id.startsWith(prefix));
      expect(rows.filter((r) => r.grp === 'a').map((r) => r.message_id)).toEqual([
        `${prefix}a1`,
        `${prefix}a2`,
        `${prefix}a3`,
      ]);
      expect(rows.filter((r) => r.grp === 'b').map((r) => r.message_id)).toEqual([
        `${prefix}b1`,
        `${prefix}b2`,
      ]);
    });
  },
);

describe('sqsHandler on events shaped like the mapping builds them (PGlite)', () => {
  const schema = uniqueSchema('lambda_sqs_events');
  let store: PostgresStore;
  beforeAll(async () => {
    store = await openStore('pglite', schema);
  });
  afterAll(async () => {
    await store?.close();
  });

  const fifoArn = 'arn:aws:sqs:us-east-1:123456789012:orders.fifo';
  function record(id: string, group: string, seq: number, arn = fifoArn): SQSRecord {
    return {
      messageId: `sqs-${id}`,
      receiptHandle: `rh-${id}`,
      body: JSON.stringify({ id }),
      attributes: {
        ApproximateReceiveCount: '1',
        SentTimestamp: '1700000000000',
        SenderId: 'AIDAIENQZJOLO23YVJ4VO',
        ApproximateFirstReceiveTimestamp: '1700000000001',
        MessageGroupId: group,
        MessageDeduplicationId: id,
        SequenceNumber: String(18_000_000_000_000_000_000 + seq),
      },
      messageAttributes: {
        'message-id': { stringValue: id, stringListValues: [], binaryListValues: [], dataType: 'String' },
      },
      md5OfBody: '',
      eventSource: 'aws:sqs',
      eventSourceARN: arn,
      awsRegion: 'us-east-1',
    };
  }
  const event: SQSEvent = {
    Records: [
      record('a1', 'a', 1),
      record('b1', 'b', 2),
      record('a2', 'a', 3),
      record('b2', 'b', 4),
      record('a3', 'a', 5),
    ],
  };

  it.each([
    ['batch', ['sqs-a2', 'sqs-b2', 'sqs-a3'], ['a1', 'b1']],
    ['group', ['sqs-a2', 'sqs-a3'], ['a1', 'b1', 'b2']],
  ] as const)(
    "FIFO fifoStopOnFailure: '%s' reports the failure and what it stopped",
    async (scope, failures, ran) => {
      const seen: string[] = [];
      const fn = sqsHandler({
        name: `fifo-${scope}`,
        store,
        fifoStopOnFailure: scope,
        logger: silent,
        handler: async (message) => {
          if (message.id === 'a2') throw new Error('a2 fails');
          seen.push(message.id);
        },
      });
      const response = await fn(event);
      expect(response.batchItemFailures.map((f) => f.itemIdentifier)).toEqual(failures);
      expect(seen).toEqual(ran);
    },
  );

  it('skips duplicates as successes, and reports (never runs) a record without an ID', async () => {
    const standard = 'arn:aws:sqs:us-east-1:123456789012:orders';
    const noId = record('x', 'g', 9, standard);
    noId.messageAttributes = {};
    let runs = 0;
    const fn = sqsHandler({
      name: 'dups',
      store,
      logger: silent,
      handler: async () => {
        runs++;
      },
    });
    const first = await fn({ Records: [record('d1', 'g', 1, standard), noId] });
    expect(first.batchItemFailures).toEqual([{ itemIdentifier: 'sqs-x' }]);
    const retried = await fn({ Records: [record('d1', 'g', 1, standard)] });
    expect(retried.batchItemFailures).toEqual([]);
    expect(runs).toBe(1);
  });

  it.each([
    ['skip', false],
    ['skip', true],
    ['dead-letter', false],
    ['dead-letter', true],
  ] as const)(
    "payloadFingerprint: a reused ID with another payload follows onPayloadMismatch '%s' (batch: %s)",
    async (policy, batch) => {
      const standard = 'arn:aws:sqs:us-east-1:123456789012:orders';
      const name = `fp-${policy}-${batch}`;
      const withBody = (itemId: string, amount: number): SQSRecord => ({
        ...record('p1', 'g', 1, standard),
        messageId: itemId,
        body: JSON.stringify({ amount }),
      });
      const warnings: Array<{ message: string; fields: unknown }> = [];
      let runs = 0;
      const fn = sqsHandler({
        name,
        store,
        batch,
        payloadFingerprint: true,
        onPayloadMismatch: policy,
        logger: { ...silent, warn: (message: string, fields: unknown) => warnings.push({ message, fields }) },
        handler: async () => {
          runs++;
        },
      });
      expect((await fn({ Records: [withBody('first', 40)] })).batchItemFailures).toEqual([]);
      // The same payload again is a plain duplicate under either policy.
      expect((await fn({ Records: [withBody('same-again', 40)] })).batchItemFailures).toEqual([]);
      expect(warnings).toEqual([]);
      const reused = await fn({ Records: [withBody('other-payload', 41)] });
      expect(reused.batchItemFailures).toEqual(
        policy === 'dead-letter' ? [{ itemIdentifier: 'other-payload' }] : [],
      );
      expect(runs, 'the handler ran for the first payload only').toBe(1);
      expect(warnings).toHaveLength(1);
      expect(warnings[0]!.fields).toMatchObject({
        consumer: name,
        messageId: 'p1',
        reason: 'payload-mismatch',
      });
      const { storedFingerprint, fingerprint } = warnings[0]!.fields as Record<string, string>;
      expect(storedFingerprint).toMatch(/^sha256:/);
      expect(fingerprint).not.toBe(storedFingerprint);
    },
  );

  it('refuses bad payloadFingerprint and onPayloadMismatch options', () => {
    const handler = async () => {};
    expect(() => sqsHandler({ name: 'x', store, handler, payloadFingerprint: 'yes' as never })).toThrow(
      /payloadFingerprint/,
    );
    expect(() => sqsHandler({ name: 'x', store, handler, onPayloadMismatch: 'drop' as never })).toThrow(
      /onPayloadMismatch/,
    );
  });

  it('refuses an event that is not an SQS event, and bad options, with clear errors', async () => {
    const fn = sqsHandler({ name: 'x', store, handler: async () => {} });
    await expect(fn({} as SQSEvent)).rejects.toMatchObject({ code: 'LAMBDA_EVENT_INVALID' });
    expect(() => sqsHandler({ name: '', store, handler: async () => {} })).toThrow(/name/);
  });
});

describe('sqsHandler failing closed', () => {
  const standard = 'arn:aws:sqs:us-east-1:123456789012:orders';
  const rec = (id: string): SQSRecord => ({
    messageId: `sqs-${id}`,
    receiptHandle: `rh-${id}`,
    body: '{}',
    attributes: {
      ApproximateReceiveCount: '1',
      SentTimestamp: '1700000000000',
      SenderId: 'AIDAIENQZJOLO23YVJ4VO',
      ApproximateFirstReceiveTimestamp: '1700000000001',
    },
    messageAttributes: {
      'message-id': { stringValue: id, stringListValues: [], binaryListValues: [], dataType: 'String' },
    },
    md5OfBody: '',
    eventSource: 'aws:sqs',
    eventSourceARN: standard,
    awsRegion: 'us-east-1',
  });

  it('reports the whole batch after the first store outage, without trying the rest or running the handler', async () => {
    const { PostgresStore } = await import('@oncely/postgres');
    const down = new PostgresStore({
      connectionString: 'postgres://postgres@127.0.0.1:1/none',
      connectTimeoutMs: 500,
    });
    // Each record's try opens a store transaction: counted here, so "without trying the
    // rest" is a count. It was a 5 s wall-clock bound, which three refused connections
    // (port 1 refuses at once) met easily, and a loaded machine could exceed with one.
    let transactions = 0;
    const transaction = down.transaction.bind(down);
    down.transaction = ((work) => {
      transactions++;
      return transaction(work);
    }) as typeof down.transaction;
    let runs = 0;
    const fn = sqsHandler({
      name: 'down',
      store: down,
      logger: silent,
      handler: async () => {
        runs++;
      },
    });
    const response = await fn({ Records: [rec('1'), rec('2'), rec('3')] });
    expect(response.batchItemFailures.map((f) => f.itemIdentifier)).toEqual(['sqs-1', 'sqs-2', 'sqs-3']);
    expect(runs).toBe(0);
    expect(transactions, 'store transactions tried: the first record only').toBe(1);
    await down.close();
  });

  it('stops starting records near the invocation deadline and reports the rest', async () => {
    const schema = uniqueSchema('lambda_deadline');
    const store = await openStore('pglite', schema);
    const seen: string[] = [];
    const fn = sqsHandler({
      name: 'deadline',
      store,
      deadlineMarginMs: 1000,
      logger: silent,
      handler: async (message, ctx) => {
        seen.push(message.id);
        // The first record uses up the time left; ctx.signal tells it so.
        await new Promise((resolve) => ctx.signal.addEventListener('abort', resolve, { once: true }));
      },
    });
    const response = await fn(
      { Records: [rec('a'), rec('b'), rec('c')] },
      { getRemainingTimeInMillis: () => 1100 },
    );
    expect(seen).toEqual(['a']);
    expect(response.batchItemFailures.map((f) => f.itemIdentifier)).toEqual(['sqs-b', 'sqs-c']);
    await store.close();
  });
});
