import { type AdapterModule, DeadLetters } from '@oncely/core';
import { PostgresStore } from '@oncely/postgres';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { main } from '../src/index.js';

// What closes at the end of a command and fails there reaches the operator: on stderr, and
// in the exit code. Before, a dead-letter session that could not give its letters back
// (DeadLetters attaches it to the pass's error as `closeError`) was never printed, and a
// store.close() that rejected made main() reject instead of answering an exit code (the bin
// then died on an unhandled rejection, its stack instead of `oncely <command>: ...`).
//
// The failures are injected where they start: the dead-letter session through the
// adapter module DeadLetters.open accepts (as packages/memory/test/deadLettersCore.test.ts
// does), the store's close through PostgresStore.prototype.close, after the real close ran.

const DATABASE_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const schema = `cli_close_${process.pid}_${Date.now()}`;

async function run(
  argv: string[],
  env: Record<string, string> = {},
): Promise<{ code: number; out: string; err: string }> {
  let out = '';
  let err = '';
  const code = await main(argv, {
    out: { write: (t: string) => (out += t) },
    err: { write: (t: string) => (err += t) },
    env: { DATABASE_URL, ONCELY_BROKER_TYPE: 'memory', ONCELY_BROKER_QUEUE: 'orders', ...env },
  });
  return { code, out, err };
}

/** DeadLetters.open on a dead-letter queue holding one letter, with `session` overriding its methods. */
function deadLettersWith(session: Record<string, unknown>): void {
  const open = DeadLetters.open.bind(DeadLetters);
  const module = {
    openDeadLetters: async () => ({
      name: 'orders.dlq',
      defaultIdStrategy: 'producer' as const,
      read: async () => [
        { envelope: { body: '{}', attributes: {}, producerMessageId: 'm-1' }, reason: 'max-attempts' },
      ],
      replay: async () => {},
      remove: async () => {},
      close: async () => {},
      ...session,
    }),
  } as unknown as AdapterModule;
  vi.spyOn(DeadLetters, 'open').mockImplementation((config) => open(config, module));
}

/** The next store.close() closes, then rejects with `error`. */
function storeCloseFails(error: Error): void {
  const close = PostgresStore.prototype.close;
  vi.spyOn(PostgresStore.prototype, 'close').mockImplementationOnce(async function (this: PostgresStore) {
    await close.call(this);
    throw error;
  });
}

beforeAll(async () => {
  const store = new PostgresStore({ connectionString: DATABASE_URL, schema });
  await store.migrate();
  await store.close();
});
afterEach(() => {
  vi.restoreAllMocks();
});
afterAll(async () => {
  const client = new pg.Client({ connectionString: DATABASE_URL });
  await client.connect();
  await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await client.end();
});

describe('a close that fails at the end of a command', () => {
  it('dlq: the session that could not give its letters back is printed beside the failure', async () => {
    deadLettersWith({
      read: async () => {
        throw new Error('the broker refused the read');
      },
      close: async () => {
        throw new Error('could not give back 1 of 1 dead letters');
      },
    });
    const { code, err } = await run(['dlq', 'list', 'orders', '--schema', schema]);
    expect(code).toBe(1);
    expect(err).toContain('oncely dlq: the broker refused the read');
    expect(err).toMatch(/oncely dlq: .*could not give back 1 of 1 dead letters/);
  });

  it('dlq: a replay that moved letters but whose session did not close prints what moved, then the failure', async () => {
    deadLettersWith({
      close: async () => {
        throw new Error('could not give back 1 of 1 dead letters');
      },
    });
    const { code, out, err } = await run(['dlq', 'replay', 'orders', '--schema', schema]);
    // m-1 was re-sent: the report says so, as after a clean close.
    expect(out).toContain('replayed 1 not yet processed: m-1');
    expect(err).toMatch(
      /oncely dlq: .*completed, but closing the dead-letter queue failed.*could not give back/,
    );
    expect(code).toBe(1);
  });

  it('dlq: a command that succeeded but whose store did not close exits 1, saying so', async () => {
    deadLettersWith({});
    storeCloseFails(new Error('pool end failed'));
    const { code, out, err } = await run(['dlq', 'list', 'orders', '--schema', schema]);
    expect(out).toContain('m-1');
    expect(err).toMatch(/oncely dlq: closing the store failed: pool end failed/);
    expect(code).toBe(1);
  });

  it('dlq: a command that failed keeps its own exit code, and the close failure is printed too', async () => {
    deadLettersWith({});
    storeCloseFails(new Error('pool end failed'));
    // A config for another consumer: refused as bad usage (2) once the store is open.
    const { code, err } = await run(['dlq', 'list', 'orders', '--schema', schema], {
      ONCELY_NAME: 'payments',
    });
    expect(err).toContain("oncely dlq: the config names consumer 'payments', not 'orders'");
    expect(err).toMatch(/oncely dlq: closing the store failed: pool end failed/);
    expect(code).toBe(2);
  });

  it('outbox: a command that succeeded but whose store did not close exits 1, saying so', async () => {
    storeCloseFails(new Error('pool end failed'));
    const { code, out, err } = await run(['outbox', '--schema', schema]);
    expect(out).toMatch(/^pending 0/);
    expect(err).toMatch(/oncely outbox: closing the store failed: pool end failed/);
    expect(code).toBe(1);
  });
});
