import { randomUUID } from 'node:crypto';
import type { LeaseClaim, MessageKey } from '@oncely/core';
import { ConfigError } from '@oncely/core';
import type { StoreCore } from './StoreCore.js';
import { toDate, toJson } from './values.js';

// Leased mode: a claim row `in_progress` until a deadline on the database clock, held by an owner token.

/** acquireLease re-reads at most this often when the row it ran into vanished meanwhile. */
const ACQUIRE_ATTEMPTS = 3;

/** PostgresStore.acquireLease(): see its documentation. */
export function acquireLease(this: StoreCore, key: MessageKey, leaseMs: number): Promise<LeaseClaim> {
  assertLeaseMs(leaseMs);
  const owner = randomUUID();
  const q = this.queries;
  return this.run('acquireLease()', async (client) => {
    for (let attempt = 1; ; attempt++) {
      const acquired = await client.query<{ locked_until: Date; inserted: boolean }>(q.acquireLease, [
        key.consumer,
        key.messageId,
        leaseMs,
        owner,
      ]);
      const row = acquired.rows[0];
      if (row)
        return {
          status: 'acquired',
          owner,
          takeover: !row.inserted,
          lockedUntil: toDate(row.locked_until),
        };
      // The conflicting row is completed or still held. ON CONFLICT locked it for us,
      // so it cannot change before this read.
      const existing = await client.query<{
        status: string;
        locked_until: Date | null;
        result: unknown;
        remaining_ms: number | null;
      }>(q.readLease, [key.consumer, key.messageId]);
      const current = existing.rows[0];
      if (current?.status === 'completed') return { status: 'completed', result: current.result ?? null };
      // On this process's clock: the database's deadline minus the database's now, added
      // to ours, so a caller waiting until `lockedUntil` is not misled by clock skew.
      if (current)
        return { status: 'busy', lockedUntil: new Date(Date.now() + Number(current.remaining_ms ?? 0)) };
      if (attempt >= ACQUIRE_ATTEMPTS)
        throw new Error(`acquireLease: the row of ${key.messageId} kept changing`);
    }
  });
}

/** PostgresStore.renewLease(): see its documentation. */
export function renewLease(
  this: StoreCore,
  key: MessageKey,
  owner: string,
  leaseMs: number,
): Promise<boolean> {
  assertLeaseMs(leaseMs);
  return this.run('renewLease()', async (client) => {
    const { rows } = await client.query(this.queries.renewLease, [
      key.consumer,
      key.messageId,
      owner,
      leaseMs,
    ]);
    return rows.length === 1;
  });
}

/** PostgresStore.completeLease(): see its documentation. */
export function completeLease(
  this: StoreCore,
  key: MessageKey,
  owner: string,
  result: unknown,
): Promise<boolean> {
  const json = toJson(result);
  return this.run('completeLease()', async (client) => {
    const { rows } = await client.query(this.queries.completeLease, [
      key.consumer,
      key.messageId,
      owner,
      json,
    ]);
    return rows.length === 1;
  });
}

/** PostgresStore.releaseLease(): see its documentation. */
export async function releaseLease(this: StoreCore, key: MessageKey, owner: string): Promise<void> {
  await this.run('releaseLease()', (client) =>
    client.query(this.queries.releaseLease, [key.consumer, key.messageId, owner]),
  );
}

function assertLeaseMs(leaseMs: number): void {
  if (typeof leaseMs !== 'number' || !Number.isFinite(leaseMs) || leaseMs <= 0) {
    throw new ConfigError('leaseMs', `must be a positive number of ms; got ${leaseMs}`);
  }
}
