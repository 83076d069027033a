import type { MessageKey } from '@oncely/core';
import type { StoreCore } from './StoreCore.js';

// The advisory attempt counters: each change is its own short commit, never a dedup gate.

/** PostgresStore.recordAttempt(): see its documentation. */
export function recordAttempt(this: StoreCore, key: MessageKey, run?: string): Promise<number> {
  return attemptStatement
    .call(this, this.queries.recordAttempt, [key.consumer, key.messageId, run ?? null], 'recordAttempt()')
    .then((rows) => Number(rows[0]!.attempts));
}

/** PostgresStore.forgetAttempt(): see its documentation. */
export async function forgetAttempt(this: StoreCore, key: MessageKey, run?: string): Promise<void> {
  await attemptStatement.call(
    this,
    this.queries.forgetAttempt,
    [key.consumer, key.messageId, run ?? null],
    'forgetAttempt()',
  );
}

/** PostgresStore.clearAttempts(): see its documentation. */
export async function clearAttempts(this: StoreCore, key: MessageKey): Promise<void> {
  await attemptStatement.call(
    this,
    this.queries.clearAttempts,
    [key.consumer, key.messageId],
    'clearAttempts()',
  );
}

async function attemptStatement(
  this: StoreCore,
  sql: string,
  params: unknown[],
  operation: string,
): Promise<Array<{ attempts: number }>> {
  // Once the schema is known good, the counter is one autocommit statement: one round
  // trip instead of BEGIN / statement / COMMIT.
  const { rows } =
    this.schemaVerified && this.driver.statement
      ? await this.driver.statement<{ attempts: number }>(sql, params)
      : await this.run(operation, (client) => client.query<{ attempts: number }>(sql, params));
  return rows;
}
