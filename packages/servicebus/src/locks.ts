import type { ServiceBusSessionReceiver } from '@azure/service-bus';
import { isOncelyError, LeaseLostError, type Logger, pauseUnlessAborted } from '@oncely/core';
import { toSettlementError } from './errors.js';

/** Renewals come when half of what is left of a lock has passed, never closer than this. */
const MIN_RENEW_GAP_MS = 100;
/** After a renewal that failed for another reason than a lost lock, try again this soon. */
const RENEW_RETRY_MS = 500;

/**
 * Keeps one session's lock for as long as a worker holds the session, on the session's
 * own schedule (from `sessionLockedUntilUtc`), whatever its messages do. The lease
 * keeper of the message in flight renews on that message's schedule only: a session
 * whose messages each take under half the LockDuration was never renewed and lost its
 * lock mid-session (the next messages redelivered after their effects had committed),
 * and a message that started late in the lock's life got its first renewal after the
 * lock was gone.
 *
 * @example
 * ```ts
 * const keeper = new SessionKeeper(receiver, log);
 * try { await work(); } finally { keeper.stop(); }
 * ```
 */
export class SessionKeeper {
  private readonly done = new AbortController();
  private until: number;
  /** Why the lock is gone, once it is. */
  lostBecause: Error | undefined;
  readonly finished: Promise<void>;

  constructor(
    private readonly receiver: ServiceBusSessionReceiver,
    private readonly log: Logger,
    private readonly onLost: () => void,
  ) {
    this.until = receiver.sessionLockedUntilUtc?.getTime() ?? Date.now();
    this.finished = this.run();
  }

  /** When the session lock runs out, as last renewed. */
  get lockedUntil(): number {
    return this.until;
  }

  get lost(): boolean {
    return this.lostBecause !== undefined;
  }

  stop(): void {
    this.done.abort();
  }

  private async run(): Promise<void> {
    const signal = this.done.signal;
    while (!signal.aborted) {
      const left = this.until - Date.now();
      await pauseUnlessAborted(Math.max(MIN_RENEW_GAP_MS, left / 2), signal);
      if (signal.aborted) return;
      try {
        this.until = (await this.receiver.renewSessionLock()).getTime();
      } catch (error) {
        if (signal.aborted) return;
        const mapped = toSettlementError('renewSessionLock', error);
        if (isOncelyError(mapped, 'LEASE_LOST') || Date.now() >= this.until) {
          // Always a LeaseLostError: what the messages of the session then report (their
          // renewals and settlements), so the core treats it as the lost lease it is.
          this.lostBecause = isOncelyError(mapped, 'LEASE_LOST')
            ? mapped
            : new LeaseLostError(
                `the lock of session ${this.receiver.sessionId} ran out while renewing it kept failing`,
                { cause: mapped },
              );
          this.log.warn(`servicebus: the lock of session ${this.receiver.sessionId} is lost; giving it up`, {
            error,
          });
          this.onLost();
          return;
        }
        this.log.warn(
          `servicebus: renewing the lock of session ${this.receiver.sessionId} failed; trying again`,
          {
            error,
          },
        );
        await pauseUnlessAborted(Math.min(RENEW_RETRY_MS, Math.max(0, this.until - Date.now()) / 2), signal);
      }
    }
  }
}

/**
 * A delayed retry by holding the lock, run outside the handler slot: the settlement the
 * core waits for is over at once, and this renews the lock itself (`renew`, on the lock's
 * own schedule; nothing for a session message, whose session lock its SessionKeeper
 * keeps) until the delay is over, then abandons. A halt abandons at once. A lock lost
 * while waiting is only logged: the message comes back when the lock runs out, which is
 * what the abandon was for.
 *
 * @example
 * ```ts
 * const done = holdThenAbandon({ delayMs: 2000, lockedUntil, renew, abandon, halt, log });
 * ```
 */
export async function holdThenAbandon(input: {
  delayMs: number;
  lockedUntil: number;
  renew: (() => Promise<number>) | undefined;
  abandon: () => Promise<void>;
  halt: AbortSignal;
  log: Logger;
}): Promise<void> {
  const { delayMs, renew, abandon, halt, log } = input;
  const dueAt = Date.now() + delayMs;
  let lockedUntil = input.lockedUntil;
  while (!halt.aborted) {
    const now = Date.now();
    if (now >= dueAt) break;
    const renewAt = renew
      ? now + Math.max(MIN_RENEW_GAP_MS, (lockedUntil - now) / 2)
      : Number.POSITIVE_INFINITY;
    if (dueAt <= renewAt) {
      await pauseUnlessAborted(dueAt - now, halt);
      break;
    }
    await pauseUnlessAborted(renewAt - now, halt);
    if (halt.aborted) break;
    try {
      lockedUntil = await renew!();
    } catch (error) {
      if (isOncelyError(error, 'LEASE_LOST')) return;
      log.warn('servicebus: renewing a lock held for a delayed retry failed; trying again', { error });
    }
  }
  await abandon().catch((error: unknown) => {
    log.warn(
      'servicebus: abandoning after a delayed retry failed; the message comes back when its lock runs out',
      {
        error,
      },
    );
  });
}
