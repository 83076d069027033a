import { randomUUID } from 'node:crypto';
import type { LeaseClaim, MessageKey } from '@oncely/core';
import { ConfigError } from '@oncely/core';
import { checkKey, DUPLICATE } from './claims.js';
import { ER_DUP_ENTRY } from './classifyError.js';
import type { MySqlQueries } from './queries.js';
import type { StoreConnection } from './StoreConnection.js';

/** One store transaction on a connection of the store (`MySqlStore`'s run). */
export type RunInTransaction = <T>(
  operation: string,
  work: (connection: StoreConnection) => Promise<T>,
) => Promise<T>;

/** acquireLease re-reads at most this often when the row it ran into vanished meanwhile. */
const ACQUIRE_ATTEMPTS = 3;

/** Leased mode's claim; see `MySqlStore.acquireLease`. */
export function acquireLease(
  run: RunInTransaction,
  q: MySqlQueries,
  key: MessageKey,
  leaseMs: number,
): Promise<LeaseClaim> {
  assertLeaseMs(leaseMs);
  checkKey(key.consumer, key.messageId);
  const owner = randomUUID();
  const leaseUs = Math.round(leaseMs * 1000);
  return run('acquireLease()', async (connection) => {
    for (let attempt = 1; ; attempt++) {
      try {
        await connection.queryExpecting(
          q.insertLease,
          [key.consumer, key.messageId, leaseUs, owner],
          DUPLICATE,
        );
        return { status: 'acquired', owner, takeover: false, lockedUntil: new Date(Date.now() + leaseMs) };
      } catch (error) {
        if ((error as { errno?: unknown }).errno !== ER_DUP_ENTRY) throw error;
      }
      const { rows } = await connection.query<{
        status: string;
        result: string | null;
        remaining_us: number | string | null;
        expired: number | null;
      }>(q.readLeaseForUpdate, [key.consumer, key.messageId]);
      const current = rows[0];
      if (current?.status === 'completed') return { status: 'completed', result: parseJson(current.result) };
      if (current && Number(current.expired) === 1) {
        const taken = await connection.query(q.takeOverLease, [leaseUs, owner, key.consumer, key.messageId]);
        if (taken.rowCount === 1)
          return { status: 'acquired', owner, takeover: true, lockedUntil: new Date(Date.now() + leaseMs) };
      } else if (current) {
        // On this process's clock: the database's time left added to our now.
        return {
          status: 'busy',
          lockedUntil: new Date(Date.now() + Number(current.remaining_us ?? 0) / 1000),
        };
      }
      if (attempt >= ACQUIRE_ATTEMPTS)
        throw new Error(`acquireLease: the row of ${key.messageId} kept changing`);
    }
  });
}

export function assertLeaseMs(leaseMs: number): void {
  if (typeof leaseMs !== 'number' || !Number.isFinite(leaseMs) || leaseMs <= 0) {
    throw new ConfigError('leaseMs', `must be a positive number of ms; got ${leaseMs}`);
  }
}

/** A Date as a DATETIME(6) literal in UTC (the store's columns hold UTC). */
export function utcDateTime(date: Date): string {
  return `${date.toISOString().replace('T', ' ').replace('Z', '')}000`;
}

export function toJson(result: unknown): string {
  try {
    return JSON.stringify(result ?? null) ?? 'null';
  } catch {
    return 'null';
  }
}

export function parseJson(value: string | null): unknown {
  if (value === null || value === undefined) return null;
  try {
    return JSON.parse(value);
  } catch {
    return null;
  }
}
