import type { PostgresStore } from '@oncely/postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sqsHandler } from '../src/index.js';
import { admin, effects, openStore, postgresAvailable, uniqueSchema } from './support.js';

// A hostile reviewer's pass against the README's promises (see the report of branch `http`).
const hasPostgres = await postgresAvailable();
const arn = 'arn:aws:sqs:eu-west-1:123456789012:orders';

function record(id: string, body: unknown = JSON.stringify({ id })) {
  return {
    messageId: id,
    body,
    attributes: { ApproximateReceiveCount: '1' },
    messageAttributes: { 'message-id': { stringValue: id, dataType: 'String' } },
    eventSourceARN: arn,
  };
}

describe.skipIf(!hasPostgres)('hostile review of sqsHandler', () => {
  const schema = uniqueSchema('lambda_hostile');
  let store: PostgresStore;
  const silent = { debug() {}, info() {}, warn() {}, error() {} };
  beforeAll(async () => {
    store = await openStore('postgres', schema);
  });
  afterAll(async () => {
    await store?.close();
    await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await admin.end();
  });

  function handlerFor(name: string, batch: boolean) {
    const runs: string[] = [];
    const fn = sqsHandler<{ id?: string }>({
      name,
      store,
      batch,
      logger: silent,
      handler: async (message, ctx) => {
        runs.push(message.id);
        await ctx.tx.query(`INSERT INTO "${schema}".effects (message_id, grp) VALUES ($1, $2)`, [
          message.id,
          name,
        ]);
      },
    });
    return { fn, runs };
  }

  async function ranFor(name: string): Promise<string[]> {
    return (await effects(store, schema)).filter((row) => row.grp === name).map((row) => row.message_id);
  }

  it.each([false, true])(
    'the same message twice in one batch (batch: %s) has one effect and no failure',
    async (batch) => {
      const name = `twice-${batch}`;
      const { fn } = handlerFor(name, batch);
      const response = await fn({
        Records: [record(`${name}-1`), record(`${name}-1`), record(`${name}-2`)],
      } as never);
      expect(response).toEqual({ batchItemFailures: [] });
      expect(await ranFor(name)).toEqual([`${name}-1`, `${name}-2`]);
    },
  );

  it.each([false, true])(
    'bodies that do not decode (not JSON, missing, a number) are reported failed, unrun (batch: %s)',
    async (batch) => {
      const name = `bodies-${batch}`;
      const { fn, runs } = handlerFor(name, batch);
      const response = await fn({
        Records: [
          record(`${name}-bad`, '{not json'),
          record(`${name}-missing`, null),
          record(`${name}-number`, 42),
          record(`${name}-ok`),
        ],
      } as never);
      expect(response.batchItemFailures.map((f) => f.itemIdentifier).sort()).toEqual([
        `${name}-bad`,
        `${name}-missing`,
        `${name}-number`,
      ]);
      expect(runs).toEqual([`${name}-ok`]);
    },
  );

  it('an empty batch answers an empty response, running nothing', async () => {
    const { fn, runs } = handlerFor('empty', false);
    expect(await fn({ Records: [] } as never)).toEqual({ batchItemFailures: [] });
    expect(runs).toEqual([]);
  });

  it('a context whose remaining time is not a number does not stop every record', async () => {
    const name = 'nan-deadline';
    const { fn } = handlerFor(name, false);
    const response = await fn({ Records: [record(`${name}-1`)] } as never, {
      getRemainingTimeInMillis: () => Number.NaN,
    });
    expect(response).toEqual({ batchItemFailures: [] });
    expect(await ranFor(name)).toEqual([`${name}-1`]);
  });
});
