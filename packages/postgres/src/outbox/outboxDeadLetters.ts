import type { DeadLetterSelection, SqlClient } from '@oncely/core';
import { ConfigError, failureGroupId, maskFailureError } from '@oncely/core';
import type { OutboxQueries } from './outboxQueries.js';

/**
 * A dead-lettered outbox row, as {@link PostgresOutbox.deadLetters} lists it.
 *
 * @example
 * ```ts
 * const { rows } = await store.outbox.deadLetters();
 * for (const row of rows) console.log(row.id, row.group, row.lastError);
 * ```
 */
export interface OutboxDeadLetter {
  id: string;
  destination: string;
  key: string | null;
  attempts: number;
  lastError: string | null;
  createdAt: Date;
  /** Its failure group: core's `failureGroupId(destination, lastError)`. */
  group: string;
}

/**
 * Dead-lettered rows of one destination that failed with one error (numbers masked).
 *
 * @example
 * ```ts
 * const { groups } = await store.outbox.deadLetters();
 * await store.outbox.retryDeadLetters({ group: groups[0]!.id });
 * ```
 */
export interface OutboxFailureGroup {
  /** `destination:` plus 8 hex digits, stable across runs (core's `failureGroupId`). */
  id: string;
  destination: string;
  /** The last error with its numbers replaced by `#`. */
  error: string;
  count: number;
  /** Its rows' IDs, oldest first. */
  ids: string[];
}

/** What `retryDeadLetters` did (or, with `dryRun`, would do). */
export interface OutboxRetryReport {
  dryRun: boolean;
  /** Rows put back to pending (or that would be), oldest first. */
  retried: string[];
  /** Selected IDs, or the group, that are not dead-lettered. */
  notFound: string[];
}

/** What `discard` did. */
export interface OutboxDiscardReport {
  /** Rows now `discarded`, oldest first. */
  discarded: string[];
  notFound: string[];
  /** Who the discard is recorded as. */
  by: string;
}

/**
 * A discarded outbox row and its record, as {@link PostgresOutbox.discarded} lists it.
 *
 * @example
 * ```ts
 * for (const row of await store.outbox.discarded()) console.log(row.id, row.discardedBy, row.discardedAt);
 * ```
 */
export interface DiscardedOutboxRow {
  id: string;
  destination: string;
  key: string | null;
  attempts: number;
  lastError: string | null;
  discardedBy: string;
  discardedAt: Date;
}

interface DeadLetteredRow {
  id: string;
  destination: string;
  key: string | null;
  attempts: number;
  last_error: string | null;
  created_at: Date | string;
}

/** Reads the dead-lettered rows (locked when `forUpdate`) with their groups. */
export async function readDeadLetters(
  client: SqlClient,
  queries: OutboxQueries,
  forUpdate: boolean,
): Promise<{ rows: OutboxDeadLetter[]; groups: OutboxFailureGroup[] }> {
  const { rows } = await client.query<DeadLetteredRow>(
    forUpdate ? queries.deadLetteredForUpdate : queries.deadLettered,
  );
  const letters = rows.map((row) => ({
    id: row.id,
    destination: row.destination,
    key: row.key,
    attempts: Number(row.attempts),
    lastError: row.last_error,
    createdAt: new Date(row.created_at),
    group: failureGroupId(row.destination, row.last_error ?? undefined),
  }));
  const groups = new Map<string, OutboxFailureGroup>();
  for (const letter of letters) {
    let group = groups.get(letter.group);
    if (!group) {
      const error = maskFailureError(letter.lastError ?? undefined);
      group = { id: letter.group, destination: letter.destination, error, count: 0, ids: [] };
      groups.set(letter.group, group);
    }
    group.count += 1;
    group.ids.push(letter.id);
  }
  const sorted = [...groups.values()].sort((a, b) => b.count - a.count || a.id.localeCompare(b.id));
  return { rows: letters, groups: sorted };
}

/**
 * The rows a selection names, and what it names that is not dead-lettered. `group` is a
 * failure group's ID or a destination (every group of it), as `oncely dlq` takes a group
 * or a reason. `required`: an empty selection is refused rather than read as "all".
 */
export function selectDeadLetters(
  letters: OutboxDeadLetter[],
  selection: DeadLetterSelection,
  required: boolean,
): { chosen: OutboxDeadLetter[]; notFound: string[] } {
  const given = [selection.ids !== undefined, selection.group !== undefined, selection.all === true];
  const count = given.filter(Boolean).length;
  if (count > 1) throw new ConfigError('selection', 'ids, group and all exclude each other');
  if (count === 0 && required) {
    throw new ConfigError('selection', 'needs ids, a group or, for every dead-lettered row, all: true');
  }
  if (selection.ids !== undefined) {
    const wanted = new Set(selection.ids);
    const chosen = letters.filter((letter) => wanted.has(letter.id));
    const found = new Set(chosen.map((letter) => letter.id));
    return { chosen, notFound: [...wanted].filter((id) => !found.has(id)) };
  }
  if (selection.group !== undefined) {
    const group = selection.group;
    const chosen = letters.filter((letter) => letter.group === group || letter.destination === group);
    return { chosen, notFound: chosen.length === 0 ? [group] : [] };
  }
  return { chosen: letters, notFound: [] };
}
