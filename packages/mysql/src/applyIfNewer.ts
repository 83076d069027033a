import type { SqlClient } from '@oncely/core';
import { ConfigError } from '@oncely/core';
import { ER_DUP_ENTRY } from './classifyError.js';
import { quoteMySqlIdentifier, quoteMySqlQualifiedName } from './identifiers.js';
import { StoreConnection } from './StoreConnection.js';

/**
 * What {@link applyIfNewer} writes.
 *
 * @example
 * ```ts
 * const options: MySqlApplyIfNewerOptions = { table: 'order_status', key: { order_id: 'o-1' }, version: 7, values: { status: 'shipped' } };
 * ```
 */
export interface MySqlApplyIfNewerOptions {
  /** Target table, optionally database-qualified (`'orders'`, `'shop.orders'`). Needs a unique key over the `key` columns. */
  table: string;
  /** Column → value of the row's unique key. */
  key: Record<string, unknown>;
  /** The incoming version (an event sequence, a timestamp in ms, a Kafka offset as a string). */
  version: number | bigint | string;
  /** Column → value written together with the version. */
  values?: Record<string, unknown>;
  /** Column holding the version. @default 'version' */
  versionColumn?: string;
}

const DUPLICATE = new Set([ER_DUP_ENTRY]);

/**
 * Version guard for out-of-order delivery on MySQL: writes one row only when the incoming
 * version is greater than the stored one, inside `tx`. An `UPDATE ... WHERE version < ?`
 * first (a match always changes the row, so the affected-rows answer does not depend on
 * CLIENT_FOUND_ROWS); no match, an `INSERT`; a duplicate key there means the row exists
 * with an equal or newer version (or was just inserted by a competing transaction, which
 * the UPDATE is asked again for). Identifiers are validated and quoted; values are
 * parameters. Returns true when the row was inserted or updated.
 *
 * @example
 * ```ts
 * // CREATE TABLE customer_address (customer_id VARCHAR(64) PRIMARY KEY, version BIGINT NOT NULL, street TEXT);
 * handler: async (message, ctx) => {
 *   const applied = await applyIfNewer(ctx.tx, {
 *     table: 'customer_address',
 *     key: { customer_id: message.body.customerId },
 *     version: message.body.sequence,
 *     values: { street: message.body.street },
 *   });
 *   if (!applied) ctx.log.info('older address event ignored');
 * }
 * ```
 */
export async function applyIfNewer(tx: SqlClient, options: MySqlApplyIfNewerOptions): Promise<boolean> {
  const table = quoteMySqlQualifiedName(options.table, 'table');
  const versionColumn = options.versionColumn ?? 'version';
  const keyColumns = Object.keys(options.key ?? {});
  const valueColumns = Object.keys(options.values ?? {});
  if (keyColumns.length === 0) throw new ConfigError('key', 'needs at least one column');
  const all = [...keyColumns, versionColumn, ...valueColumns];
  if (new Set(all).size !== all.length) {
    throw new ConfigError('values', 'must not repeat a key column or the version column');
  }
  const quoted = all.map((column) => quoteMySqlIdentifier(column, 'column'));
  const quotedKey = quoted.slice(0, keyColumns.length);
  const quotedVersion = quoted[keyColumns.length]!;
  const quotedValues = quoted.slice(keyColumns.length + 1);
  const version = typeof options.version === 'bigint' ? options.version.toString() : options.version;
  const keyParams = keyColumns.map((column) => options.key[column]);
  const valueParams = valueColumns.map((column) => options.values![column]);
  const update =
    `UPDATE ${table} SET ${[...quotedValues, quotedVersion].map((c) => `${c} = ?`).join(', ')} ` +
    `WHERE ${quotedKey.map((c) => `${c} = ?`).join(' AND ')} AND ${quotedVersion} < ?`;
  const updateParams = [...valueParams, version, ...keyParams, version];
  const insert = `INSERT INTO ${table} (${quoted.join(', ')}) VALUES (${quoted.map(() => '?').join(', ')})`;
  const insertParams = [...keyParams, version, ...valueParams];
  if ((await tx.query(update, updateParams)).rowCount === 1) return true;
  try {
    await expecting(tx, insert, insertParams);
    return true;
  } catch (error) {
    if ((error as { errno?: unknown }).errno !== ER_DUP_ENTRY) throw error;
  }
  // Inserted meanwhile by another transaction (we waited for its commit): ask once more.
  return (await tx.query(update, updateParams)).rowCount === 1;
}

/** A statement whose duplicate-key error is an answer: it does not mark the store's transaction failed. */
function expecting(tx: SqlClient, text: string, params: unknown[]) {
  return tx instanceof StoreConnection ? tx.queryExpecting(text, params, DUPLICATE) : tx.query(text, params);
}
