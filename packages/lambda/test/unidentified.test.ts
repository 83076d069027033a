import type { PostgresStore } from '@oncely/postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BatchFailedError, kafkaHandler, sqsHandler } from '../src/index.js';
import { admin, effects, openStore, postgresAvailable, uniqueSchema } from './support.js';

const hasPostgres = await postgresAvailable();
const arn = 'arn:aws:sqs:eu-west-1:123456789012:orders';
const fifoArn = 'arn:aws:sqs:eu-west-1:123456789012:orders.fifo';

function record(id: string | undefined, options: { arn?: string; group?: string } = {}) {
  return {
    ...(id === undefined ? {} : { messageId: id }),
    body: JSON.stringify({ id }),
    attributes: { ApproximateReceiveCount: '1', ...(options.group ? { MessageGroupId: options.group } : {}) },
    messageAttributes: { 'message-id': { stringValue: id ?? 'attr-only', dataType: 'String' } },
    eventSourceARN: options.arn ?? arn,
  };
}

// Issue 27 follow-ups (b) and (c). AWS: a partial batch response whose itemIdentifier is
// null, empty or not a message ID of the batch makes Lambda treat the WHOLE batch as failed.
// A record the response cannot name must therefore fail the batch explicitly (with a clear
// error, after the other records ran), never crash the batch before any record runs, and
// never send `{ itemIdentifier: undefined }`.
describe.skipIf(!hasPostgres)('SQS records the partial batch response cannot name', () => {
  const schema = uniqueSchema('lambda_unid');
  let store: PostgresStore;
  const logged: string[] = [];
  const logger = {
    debug() {},
    info() {},
    warn() {},
    error: (message: string) => void logged.push(message),
  };
  beforeAll(async () => {
    store = await openStore('postgres', schema);
  });
  afterAll(async () => {
    await store?.close();
    await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await admin.end();
  });

  function handlerFor(name: string, options: { batch?: boolean; failIds?: string[] } = {}) {
    return sqsHandler<{ id?: string }>({
      name,
      store,
      logger,
      batch: options.batch,
      handler: async (message, ctx) => {
        if (options.failIds?.includes(message.id)) throw new Error(`handler failed ${message.id}`);
        await ctx.tx.query(`INSERT INTO "${schema}".effects (message_id, grp) VALUES ($1, $2)`, [
          message.id,
          name,
        ]);
      },
    });
  }

  async function ranFor(name: string): Promise<string[]> {
    return (await effects(store, schema)).filter((row) => row.grp === name).map((row) => row.message_id);
  }

  it.each([false, true])(
    '{ Records: [ok, null, ok] } (batch: %s): the others run and commit, then the whole batch fails with BatchFailedError',
    async (batch) => {
      const name = `nulls-${batch}`;
      const fn = handlerFor(name, { batch });
      const event = { Records: [record(`${name}-a`), null, record(`${name}-b`)] };
      const outcome = await fn(event as never).catch((error: unknown) => error);
      expect(outcome).toBeInstanceOf(BatchFailedError);
      expect(outcome).toMatchObject({ code: 'LAMBDA_BATCH_FAILED' });
      expect((outcome as Error).message).toMatch(/Records\[1\]/);
      expect(await ranFor(name)).toEqual([`${name}-a`, `${name}-b`]);
      expect(logged.some((line) => /not an SQS record/.test(line))).toBe(true);
      expect(logged.some((line) => /whole batch/.test(line))).toBe(true);
      // Lambda retries the whole batch: what committed is skipped as a duplicate.
      await fn(event as never).catch(() => {});
      expect(await ranFor(name)).toEqual([`${name}-a`, `${name}-b`]);
    },
  );

  it('a failed record without messageId fails the whole batch explicitly, never { itemIdentifier: undefined }', async () => {
    const name = 'no-message-id';
    const fn = handlerFor(name, { failIds: ['attr-only'] });
    const outcome = await fn({ Records: [record(`${name}-a`), record(undefined)] } as never).catch(
      (error: unknown) => error,
    );
    expect(outcome).toBeInstanceOf(BatchFailedError);
    expect((outcome as Error).message).toMatch(/Records\[1\] \(no messageId\)/);
    expect(await ranFor(name)).toEqual([`${name}-a`]);
    expect(logged.some((line) => /no messageId.*whole batch/s.test(line))).toBe(true);
  });

  it('a record without messageId that succeeds needs no report: the response is empty', async () => {
    const name = 'no-message-id-ok';
    const fn = handlerFor(name);
    const response = await fn({ Records: [record(undefined), record(`${name}-b`)] } as never);
    expect(response).toEqual({ batchItemFailures: [] });
  });

  it('FIFO: a null record stops the batch (order), and the whole batch fails', async () => {
    const name = 'fifo-null';
    const fn = handlerFor(name);
    const event = {
      Records: [
        record(`${name}-1`, { arn: fifoArn, group: 'g' }),
        null,
        record(`${name}-3`, { arn: fifoArn, group: 'g' }),
      ],
    };
    await expect(fn(event as never)).rejects.toBeInstanceOf(BatchFailedError);
    expect(await ranFor(name)).toEqual([`${name}-1`]);
  });

  it.each(['throw', 'report'] as const)(
    'Kafka (failureReport: %s): a null record fails its partition and the whole batch; other partitions run',
    async (failureReport) => {
      const name = `kafka-null-${failureReport}`;
      const fn = kafkaHandler<{ id?: string }>({
        name,
        store,
        logger,
        failureReport,
        idStrategy: 'broker',
        handler: async (message, ctx) => {
          await ctx.tx.query(`INSERT INTO "${schema}".effects (message_id, grp) VALUES ($1, $2)`, [
            message.id,
            name,
          ]);
        },
      });
      const kafkaRecord = (partition: number, offset: number) => ({
        topic: 'orders',
        partition,
        offset,
        timestamp: 0,
        timestampType: 'CREATE_TIME',
        value: Buffer.from('{}').toString('base64'),
        headers: [],
      });
      const event = {
        eventSource: 'aws:kafka',
        records: {
          'orders-0': [kafkaRecord(0, 1), null, kafkaRecord(0, 3)],
          'orders-1': [kafkaRecord(1, 7)],
        },
      };
      const outcome = await fn(event as never).catch((error: unknown) => error);
      expect(outcome).toBeInstanceOf(BatchFailedError);
      expect((outcome as Error).message).toMatch(/records\["orders-0"\]\[1\]/);
      // Partition 0 stops at the null record (order); partition 1 runs.
      expect(await ranFor(name)).toEqual(['orders/0/1', 'orders/1/7']);
    },
  );
});
