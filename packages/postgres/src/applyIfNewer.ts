import type { SqlClient } from '@oncely/core';
import { ConfigError } from '@oncely/core';
import { quoteIdentifier, quoteQualifiedName } from './identifiers.js';

/**
 * What {@link applyIfNewer} writes.
 *
 * @example
 * ```ts
 * const options: ApplyIfNewerOptions = { table: 'order_status', key: { order_id: 'o-1' }, version: 7, values: { status: 'shipped' } };
 * ```
 */
export interface ApplyIfNewerOptions {
  /** Target table, optionally schema-qualified (`'orders'`, `'shop.orders'`). Needs a unique key over the `key` columns. */
  table: string;
  /** Column → value of the row's unique key (the `ON CONFLICT` target). */
  key: Record<string, unknown>;
  /** The incoming version (an event sequence, a timestamp in ms, a Kafka offset as a string). */
  version: number | bigint | string;
  /** Column → value written together with the version. */
  values?: Record<string, unknown>;
  /** Column holding the version. @default 'version' */
  versionColumn?: string;
}

/**
 * Version guard for out-of-order delivery: upserts one row only when the incoming version
 * is greater than the stored one. Use it inside `ctx.tx` for state that later events
 * replace (a customer's address, an order's status), where a redelivered or reordered
 * older event must not overwrite newer state. Dedup (the processed marker) stops the
 * same message applying twice; this stops an *older* message applying after a newer one.
 *
 * Identifiers (table and column names) are validated as plain identifiers and quoted;
 * values are always parameters. Returns true when the row was inserted or updated, false
 * when the stored version was equal or newer.
 *
 * @example
 * ```ts
 * // CREATE TABLE customer_address (customer_id text PRIMARY KEY, version bigint NOT NULL, street text, city text);
 * handler: async (message, ctx) => {
 *   const applied = await applyIfNewer(ctx.tx, {
 *     table: 'customer_address',
 *     key: { customer_id: message.body.customerId },
 *     version: message.body.sequence,
 *     values: { street: message.body.street, city: message.body.city },
 *   });
 *   if (!applied) ctx.log.info('older address event ignored');
 * }
 * ```
 */
export async function applyIfNewer(tx: SqlClient, options: ApplyIfNewerOptions): Promise<boolean> {
  const table = quoteQualifiedName(options.table, 'table');
  const versionColumn = options.versionColumn ?? 'version';
  const keyColumns = Object.keys(options.key ?? {});
  const valueColumns = Object.keys(options.values ?? {});
  if (keyColumns.length === 0) throw new ConfigError('key', 'needs at least one column');
  const all = [...keyColumns, versionColumn, ...valueColumns];
  if (new Set(all).size !== all.length) {
    throw new ConfigError('values', 'must not repeat a key column or the version column');
  }
  const quoted = all.map((column) => quoteIdentifier(column, 'column'));
  const quotedKey = quoted.slice(0, keyColumns.length);
  const quotedVersion = quoted[keyColumns.length]!;
  const updated = quoted.slice(keyColumns.length);
  const placeholders = all.map((_, index) => `$${index + 1}`);
  const sql =
    `INSERT INTO ${table} AS target (${quoted.join(', ')}) VALUES (${placeholders.join(', ')}) ` +
    `ON CONFLICT (${quotedKey.join(', ')}) DO UPDATE SET ${updated.map((c) => `${c} = EXCLUDED.${c}`).join(', ')} ` +
    `WHERE target.${quotedVersion} < EXCLUDED.${quotedVersion} RETURNING 1 AS applied`;
  const version = typeof options.version === 'bigint' ? options.version.toString() : options.version;
  const params = [
    ...keyColumns.map((column) => options.key[column]),
    version,
    ...valueColumns.map((column) => options.values![column]),
  ];
  const { rows } = await tx.query(sql, params);
  return rows.length === 1;
}
