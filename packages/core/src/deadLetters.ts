import { createHash } from 'node:crypto';
import { loadAdapterModule } from './createConsumer.js';
import { ConfigError, isOncelyError, OncelyError } from './errors.js';
import { resolveMessageId } from './idStrategy.js';
import type {
  AdapterModule,
  BrokerType,
  ConsumerConfig,
  DeadLetterSession,
  HeldDeadLetter,
  IdempotencyStore,
} from './types.js';

/** How many re-sends a replay has in flight at once. */
const REPLAY_WINDOW = 50;

/** The rejected ones of `results`, with their positions. */
function failedOf(results: PromiseSettledResult<unknown>[]): Array<{ index: number; reason: unknown }> {
  return results.flatMap((result, index) =>
    result.status === 'rejected' ? [{ index, reason: (result as PromiseRejectedResult).reason }] : [],
  );
}

/**
 * `error` with `partial` attached. A thrown value that cannot carry it (not an object, a
 * frozen error) is wrapped in an Error with the same message and the value as `cause`.
 */
function withPartialReport(error: unknown, partial: PartialReplayReport): unknown {
  const attach = (carrier: object) =>
    Object.defineProperty(carrier, PARTIAL_REPORT, { value: partial, enumerable: false, configurable: true });
  if (typeof error === 'object' && error !== null && Object.isExtensible(error)) {
    try {
      return attach(error);
    } catch {
      // A proxy that refuses the property: wrapped below.
    }
  }
  return attach(new Error(failureText(error), { cause: error }));
}

/** A failure's text for a report: the message (the name when it is empty), never a throw. */
function failureText(reason: unknown): string {
  if (reason instanceof Error) return reason.message || reason.name;
  try {
    return asText(reason) ?? 'unknown error';
  } catch {
    return 'unknown error';
  }
}

/** One dead letter as `list()` reports it. */
export interface DeadLetterInfo {
  /** The message ID under the consumer's ID strategy; absent when it has none (`missing-id`). */
  messageId?: string;
  reason: string;
  error?: string;
  attempts?: number;
  firstFailedAt?: Date;
  lastFailedAt?: Date;
  attributes: Record<string, string>;
  /** Its failure group: {@link failureGroupId} of reason and error. */
  group: string;
}

/** Dead letters with one reason and one error (numbers in the error aside). */
export interface FailureGroup {
  /** Stable across runs: pass it to `replay`/`discard` (`--group`). */
  id: string;
  reason: string;
  /** The error with its numbers replaced by `#` (positions, counts). */
  error: string;
  count: number;
  firstFailedAt?: Date;
  lastFailedAt?: Date;
}

/**
 * What `replay`/`discard` act on: message IDs, a group (its ID or a reason), or everything
 * (`all: true`; one of the three at most). `replay({})` is everything too; `discard` needs
 * the selection by name, so a forgotten one cannot wipe the dead-letter queue.
 */
export interface DeadLetterSelection {
  ids?: readonly string[];
  /** A failure group's ID, or a reason (`max-attempts`): every group with that reason. */
  group?: string;
  /** Every dead letter. */
  all?: boolean;
}

/** What `list()` returns: every dead letter, and the letters grouped by failure. */
export interface DeadLetterListing {
  letters: DeadLetterInfo[];
  groups: FailureGroup[];
}

/** What `replay` did (or, with `dryRun`, would do). */
export interface ReplayReport {
  dryRun: boolean;
  /** Sent back to the source (dry run: would be) and not yet processed. */
  replayed: string[];
  /** Have a processed marker: the consumer acks them as duplicates (still moved back). */
  alreadyProcessed: string[];
  /** Selected dead letters without a message ID (moved back too; the consumer dead-letters them again unless fixed). */
  withoutId: number;
  /** `ids` asked for that the dead-letter queue does not hold, or the `group` when it matched none. */
  notFound: string[];
}

/**
 * What a replay had done when it failed, on its error (see {@link replayReportOf}). A pass
 * stops after the first window of re-sends with a failure; what it had moved is moved, the
 * failed letters and the ones not attempted are still in the dead-letter queue.
 */
export interface PartialReplayReport extends ReplayReport {
  /**
   * Letters whose replay failed, with the error: the clearing of their attempts, the
   * re-send, or the removal from the DLQ after a confirmed re-send (then the letter is in
   * both, and a second replay sends it again: the consumer's marker absorbs the copy).
   */
  failed: Array<{ messageId?: string; error: string }>;
  /** Selected letters the pass did not get to. */
  notAttempted: number;
}

/** What a `list`, `replay` or `discard` pass returns. */
export type DeadLetterPassResult = DeadLetterListing | ReplayReport | DiscardReport;

/**
 * A `list`, `replay` or `discard` pass that completed, but whose dead-letter session failed
 * to close (for example letters it could not give back, hidden until their lease lapses).
 * `result` is what the pass returned: a replay's letters were re-sent, a discard's removed,
 * so a caller reports it as after a clean close, then the failure (`cause`). Read it with
 * {@link completedPassOf}.
 */
export class DeadLetterCloseError extends OncelyError {
  constructor(
    readonly result: DeadLetterPassResult,
    cause: unknown,
  ) {
    super(
      'DEAD_LETTER_CLOSE',
      `the dead-letter pass completed, but closing the dead-letter queue failed: ${failureText(cause)}`,
      { cause },
    );
  }
}

/**
 * What a dead-letter pass returned when only its close failed (a {@link DeadLetterCloseError});
 * undefined for any other error. Matched by code, not `instanceof`, like {@link isOncelyError}.
 *
 * @example
 * ```ts
 * const report = await dlq.replay({}).catch((error) => {
 *   const done = completedPassOf(error) as ReplayReport | undefined;
 *   if (done) console.log(`replayed ${done.replayed.length}, then:`, error.message);
 *   throw error;
 * });
 * ```
 */
export function completedPassOf(error: unknown): DeadLetterPassResult | undefined {
  return isOncelyError(error, 'DEAD_LETTER_CLOSE') ? (error as DeadLetterCloseError).result : undefined;
}

/** Where the partial report of a failed replay is kept on its error. */
const PARTIAL_REPORT = Symbol.for('oncely.replayReport');

/**
 * The {@link PartialReplayReport} of an error `DeadLetters.replay` threw once it had begun
 * re-sending; undefined for any other error (a failed read or marker look-up moved nothing). The error
 * is the session's or the store's own; one that cannot carry the report (not an object,
 * frozen) comes wrapped in an Error with the same message and it as `cause`.
 *
 * @example
 * ```ts
 * try {
 *   await dlq.replay({ group: 'max-attempts' });
 * } catch (error) {
 *   const done = replayReportOf(error);
 *   if (done) console.error(`replayed ${done.replayed.length}, failed ${done.failed.length}, left ${done.notAttempted}`);
 *   throw error;
 * }
 * ```
 */
export function replayReportOf(error: unknown): PartialReplayReport | undefined {
  if (typeof error !== 'object' || error === null) return undefined;
  return (error as { [PARTIAL_REPORT]?: PartialReplayReport })[PARTIAL_REPORT];
}

/** What `discard` removed. */
export interface DiscardReport {
  discarded: Array<{ messageId?: string; reason: string }>;
  /** As {@link ReplayReport.notFound}. */
  notFound: string[];
}

/**
 * The broker-neutral dead-letter API: list the consumer's dead letters in failure groups,
 * replay them to its source under their original message IDs, or discard them with a
 * record in the store. The broker work is the adapter's {@link DeadLetterSession}; each
 * call here is one session (read everything, act, give the rest back).
 *
 * Replay is at least once and keeps the ID: a crash after the broker confirmed the re-send
 * and before the dead letter was removed leaves both, and the consumer's marker turns the
 * second run into a duplicate. Each replayed message's attempt counter is cleared first,
 * so it gets the full `maxAttempts` again.
 *
 * @example
 * ```ts
 * const dlq = await DeadLetters.open({ ...config, store, handler });
 * const { groups } = await dlq.list();
 * await dlq.replay({ group: groups[0].id });
 * await dlq.discard({ group: 'invalid-body' }, { by: 'alice' });
 * ```
 */
export class DeadLetters {
  private constructor(
    private readonly config: ConsumerConfig<any, any>,
    private readonly openSession: () => Promise<DeadLetterSession>,
  ) {}

  /** Loads the adapter by `config.broker.type`; throws a ConfigError when it cannot reach dead letters. */
  static async open(config: ConsumerConfig<any, any>, module?: AdapterModule): Promise<DeadLetters> {
    const adapter = module ?? (await loadAdapterModule(config.broker.type as BrokerType));
    if (!adapter.openDeadLetters) {
      throw new ConfigError(
        'broker.type',
        `the ${config.broker.type} adapter cannot work with dead letters yet (no openDeadLetters)`,
      );
    }
    return new DeadLetters(config, () => adapter.openDeadLetters!(config));
  }

  /** Every dead letter, and the failure groups (largest first). */
  async list(): Promise<DeadLetterListing> {
    return this.withSession(async (session) => {
      const letters = (await session.read()).map((letter) => this.describe(session, letter));
      return { letters, groups: groupLetters(letters) };
    });
  }

  /**
   * Moves the selected dead letters back to the source, each removed from the DLQ only
   * after the broker confirmed its re-send. `dryRun`: reads and reports, moves nothing.
   * `onReplayed` is called after each one is back in the source and out of the DLQ. Sessions
   * get up to 50 `replay` calls at once, made in the DLQ's order. A window with a failed
   * re-send ends the pass: its first failure is thrown as the broker (or store) gave it,
   * carrying what the pass had done ({@link replayReportOf}: replayed, failed, not attempted).
   */
  async replay(
    selection: DeadLetterSelection,
    options: { dryRun?: boolean; onReplayed?: (letter: DeadLetterInfo) => void } = {},
  ): Promise<ReplayReport> {
    const dryRun = options.dryRun ?? false;
    return this.withSession(async (session) => {
      const { chosen, notFound } = this.select(session, await session.read(), selection);
      const ids = chosen.flatMap(({ info }) => (info.messageId === undefined ? [] : [info.messageId]));
      const processed = await this.processed(ids, dryRun);
      // In the DLQ's order, whatever order the confirms came in.
      const report = (moved: (info: DeadLetterInfo) => boolean): ReplayReport => {
        const done: ReplayReport = { dryRun, replayed: [], alreadyProcessed: [], withoutId: 0, notFound };
        for (const { info } of chosen) {
          if (!moved(info)) continue;
          if (info.messageId === undefined) done.withoutId += 1;
          else if (processed.has(info.messageId)) done.alreadyProcessed.push(info.messageId);
          else done.replayed.push(info.messageId);
        }
        return done;
      };
      if (dryRun) return report(() => true);
      const moved = new Set<DeadLetterInfo>();
      // Windows of concurrent re-sends: a broker confirms a persistent message after its
      // disk sync, so one at a time would wait for a sync per message. Each letter is
      // still removed only after its own confirm, and they are sent in the DLQ's order.
      for (let start = 0; start < chosen.length; start += REPLAY_WINDOW) {
        const window = chosen.slice(start, start + REPLAY_WINDOW);
        // A fresh attempt budget: the old count would dead-letter it after one failure.
        const cleared = await Promise.allSettled(
          window.map(async ({ info }) => {
            if (info.messageId === undefined) return;
            await this.store.clearAttempts?.({ consumer: this.config.name, messageId: info.messageId });
          }),
        );
        const sent = failedOf(cleared).length
          ? cleared
          : await Promise.allSettled(
              window.map(async ({ letter, info }) => {
                await session.replay(letter);
                moved.add(info);
                options.onReplayed?.(info);
              }),
            );
        const rejected = failedOf(sent);
        if (rejected.length > 0) {
          // A letter whose onReplayed threw did move: reported as moved, not as failed.
          const failures = rejected.filter(({ index }) => !moved.has(window[index]!.info));
          // The first failure is thrown as it is (its class and message say what the broker
          // did); what the pass had done goes with it, so a caller can tell what moved.
          const partial: PartialReplayReport = {
            ...report((info) => moved.has(info)),
            failed: failures.map(({ index, reason }) => ({
              ...(window[index]!.info.messageId === undefined
                ? {}
                : { messageId: window[index]!.info.messageId }),
              error: failureText(reason),
            })),
            // Every selected letter is moved, failed or not attempted.
            notAttempted: chosen.length - moved.size - failures.length,
          };
          throw withPartialReport((failures[0] ?? rejected[0])!.reason, partial);
        }
      }
      return report((info) => moved.has(info));
    });
  }

  /**
   * Removes the selected dead letters for good, after recording each (ID, reason, error,
   * who, when) in the store's discard log. Needs a store with a `deadLetterLog`.
   */
  async discard(selection: DeadLetterSelection, options: { by: string }): Promise<DiscardReport> {
    if (selection.ids === undefined && selection.group === undefined && selection.all !== true) {
      throw new ConfigError(
        'selection',
        'discard needs ids, a group, or all: true to remove every dead letter (an empty selection is refused)',
      );
    }
    const log = this.store.deadLetterLog;
    if (!log)
      throw new ConfigError('store', 'this store keeps no dead-letter discard log (no deadLetterLog)');
    return this.withSession(async (session) => {
      const { chosen, notFound } = this.select(session, await session.read(), selection);
      const discardedAt = new Date();
      // The record first: a crash after it leaves the letter in the DLQ with a record
      // (a second discard records it again); the reverse could remove it unrecorded.
      await log.recordDiscards(
        chosen.map(({ info }) => ({
          consumer: this.config.name,
          messageId: info.messageId,
          reason: info.reason,
          error: info.error,
          discardedBy: options.by,
          discardedAt,
        })),
      );
      for (const { letter } of chosen) await session.remove(letter);
      return {
        discarded: chosen.map(({ info }) => ({ messageId: info.messageId, reason: info.reason })),
        notFound,
      };
    });
  }

  private get store(): IdempotencyStore<any> {
    return this.config.store as IdempotencyStore<any>;
  }

  private async withSession<T extends DeadLetterPassResult>(
    work: (session: DeadLetterSession) => Promise<T>,
  ): Promise<T> {
    const session = await this.openSession();
    let result: T;
    try {
      result = await work(session);
    } catch (error) {
      // The pass's own failure is what the caller must see; a close that fails as well
      // (letters it could not give back) is attached to it, not put in its place.
      await session.close().catch((closeError: unknown) => {
        // Best effort: a frozen error keeps its own story without the close's.
        if (error instanceof Error && Object.isExtensible(error)) Object.assign(error, { closeError });
      });
      throw error;
    }
    try {
      await session.close();
    } catch (closeError) {
      // The pass did its work (letters re-sent or removed): the close's failure must not
      // hide that, so it is thrown as a DeadLetterCloseError carrying the pass's result.
      throw new DeadLetterCloseError(result, closeError);
    }
    return result;
  }

  private describe(session: DeadLetterSession, letter: HeldDeadLetter): DeadLetterInfo {
    const strategy = this.config.idStrategy ?? session.defaultIdStrategy;
    const messageId = resolveMessageId(strategy, {
      ...letter.envelope,
      source: session.name,
      raw: undefined,
    });
    // As text whatever the adapter read: a header a broker kept as a number or an object
    // must be listed, not end the pass with a TypeError (nothing could be listed then).
    const reason = asText(letter.reason) ?? 'unknown';
    const error = asText(letter.error);
    return {
      messageId,
      reason,
      error,
      attempts: letter.attempts,
      firstFailedAt: letter.firstFailedAt,
      lastFailedAt: letter.lastFailedAt,
      attributes: letter.envelope.attributes,
      group: failureGroupId(reason, error),
    };
  }

  private select(session: DeadLetterSession, letters: HeldDeadLetter[], selection: DeadLetterSelection) {
    const { ids, group, all } = selection;
    if ([ids !== undefined, group !== undefined, all === true].filter(Boolean).length > 1) {
      throw new ConfigError('selection', 'give message IDs, a group or all, only one of them');
    }
    const wanted = ids === undefined ? undefined : new Set(ids);
    const chosen: Array<{ letter: HeldDeadLetter; info: DeadLetterInfo }> = [];
    const found = new Set<string>();
    for (const letter of letters) {
      const info = this.describe(session, letter);
      const take = wanted
        ? info.messageId !== undefined && wanted.has(info.messageId)
        : group === undefined || info.group === group || info.reason === group;
      if (!take) continue;
      chosen.push({ letter, info });
      if (info.messageId !== undefined) found.add(info.messageId);
    }
    // A group that matches nothing is most often a typo: reported like an absent ID.
    if (group !== undefined && chosen.length === 0) return { chosen, notFound: [group] };
    return { chosen, notFound: [...(wanted ?? [])].filter((id) => !found.has(id)) };
  }

  /**
   * The IDs with a processed marker. A store without a `deadLetterLog` cannot tell: a dry
   * run (whose point that is) refuses, a replay goes on and reports every one as replayed.
   */
  private async processed(ids: string[], required: boolean): Promise<ReadonlySet<string>> {
    if (ids.length === 0) return new Set();
    const log = this.store.deadLetterLog;
    if (log) return log.processed(this.config.name, ids);
    if (!required) return new Set();
    throw new ConfigError(
      'store',
      'cannot look up markers for dead letters (the store has no deadLetterLog)',
    );
  }
}

/**
 * The failure group of a reason and an error: `reason:` plus 8 hex digits of a hash of the
 * error with its numbers replaced (so `position 12` and `position 40` group together).
 *
 * @example
 * ```ts
 * failureGroupId('invalid-body', 'Unexpected token } in JSON at position 12'); // 'invalid-body:3f1c0a9e'
 * ```
 */
export function failureGroupId(reason: string, error: string | undefined): string {
  const hash = createHash('sha256').update(maskFailureError(error)).digest('hex').slice(0, 8);
  return `${reason}:${hash}`;
}

/**
 * An error as its failure group sees it: numbers replaced by `#`, trimmed (what
 * {@link failureGroupId} hashes and a group shows).
 *
 * @example
 * ```ts
 * maskFailureError('message 42 too large: 9000 bytes'); // 'message # too large: # bytes'
 * ```
 */
export function maskFailureError(error: string | undefined): string {
  return (error ?? '').replace(/\d+/g, '#').trim();
}

function asText(value: unknown): string | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value === 'string') return value;
  if (typeof value === 'object' && !Buffer.isBuffer(value)) {
    try {
      return JSON.stringify(value);
    } catch {
      // A cycle: fall through to String().
    }
  }
  return String(value);
}

function groupLetters(letters: DeadLetterInfo[]): FailureGroup[] {
  const groups = new Map<string, FailureGroup>();
  for (const letter of letters) {
    let group = groups.get(letter.group);
    if (!group) {
      group = { id: letter.group, reason: letter.reason, error: maskFailureError(letter.error), count: 0 };
      groups.set(letter.group, group);
    }
    group.count += 1;
    group.firstFailedAt = earliest(group.firstFailedAt, letter.firstFailedAt ?? letter.lastFailedAt);
    group.lastFailedAt = latest(group.lastFailedAt, letter.lastFailedAt ?? letter.firstFailedAt);
  }
  return [...groups.values()].sort((a, b) => b.count - a.count || a.id.localeCompare(b.id));
}

function earliest(a: Date | undefined, b: Date | undefined): Date | undefined {
  if (!a) return b;
  if (!b) return a;
  return a <= b ? a : b;
}

function latest(a: Date | undefined, b: Date | undefined): Date | undefined {
  if (!a) return b;
  if (!b) return a;
  return a >= b ? a : b;
}
