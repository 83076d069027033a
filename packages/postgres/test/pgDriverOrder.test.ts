import { silentLogger } from '@oncely/core';
import { describe, expect, it } from 'vitest';
import type { PgPoolClientLike, PgPoolLike } from '../src/drivers/PgDriver.js';
import { PgDriver } from '../src/drivers/PgDriver.js';

/** A driver on a pool of one client that answers at once and records what it is sent. */
function recordingDriver() {
  const sent: string[] = [];
  const client: PgPoolClientLike = {
    query: async (text: string) => {
      sent.push(text);
      return { command: text.split(' ')[0], rows: [], rowCount: 0 } as never;
    },
    release() {},
    on() {},
    removeListener() {},
  };
  const pool: PgPoolLike = { connect: async () => client, on() {}, removeListener() {}, end: async () => {} };
  const driver = new PgDriver({ pool }, silentLogger, {
    queryTimeoutMs: 1000,
    idleInTransactionTimeoutMs: 0,
  });
  return { driver, sent };
}

describe('PgDriver statement order', () => {
  it('sends statements in call order, also one issued as the first answers while another waits for it', async () => {
    const { driver, sent } = recordingDriver();
    await driver.transaction(
      'transaction()',
      async (tx) => {
        const first = tx.query('SELECT 1');
        // Runs as soon as the first answers, before the statement queued below is sent:
        // it must not overtake it.
        const third = first.then(() => tx.query('SELECT 3'));
        const second = tx.query('SELECT 2');
        await Promise.all([second, third]);
        await tx.query('SELECT 4');
      },
      undefined,
    );
    expect(sent).toEqual([
      'BEGIN ISOLATION LEVEL READ COMMITTED',
      'SELECT 1',
      'SELECT 2',
      'SELECT 3',
      'SELECT 4',
      'COMMIT',
    ]);
  });

  it('sends a statement still waiting for the first before COMMIT', async () => {
    const { driver, sent } = recordingDriver();
    await driver.transaction(
      'transaction()',
      async (tx) => {
        void tx.query('SELECT 1');
        void tx.query('SELECT 2');
      },
      undefined,
    );
    expect(sent).toEqual(['BEGIN ISOLATION LEVEL READ COMMITTED', 'SELECT 1', 'SELECT 2', 'COMMIT']);
  });
});
