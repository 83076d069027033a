import { randomUUID } from 'node:crypto';
import { setMaxListeners } from 'node:events';
import {
  ServiceBusClient,
  type ServiceBusReceivedMessage,
  type ServiceBusReceiver,
  type ServiceBusSender,
  type ServiceBusSessionReceiver,
} from '@azure/service-bus';
import {
  type AdapterLease,
  type AdapterOptions,
  type AdapterRuntime,
  type BrokerAdapter,
  BrokerMisconfiguredError,
  type DeadLetterReason,
  type IdStrategy,
  isOncelyError,
  type Logger,
  pauseUnlessAborted,
  type SettlementInfo,
} from '@oncely/core';
import { DispositionGate } from './DispositionGate.js';
import { serviceBusErrorCode, toSettlementError } from './errors.js';
import { onLiveLink } from './liveLink.js';
import { holdThenAbandon, SessionKeeper } from './locks.js';
import { retryCopy } from './retryCopy.js';
import { type DeliveryHost, ServiceBusDelivery } from './ServiceBusDelivery.js';
import { parseServiceBusConfig, type ServiceBusSettings } from './serviceBusConfig.js';
import { toEnvelope } from './toEnvelope.js';
import { waitUntil } from './waitUntil.js';

/** Lock duration assumed until the first delivery shows the real one (the service default). */
const DEFAULT_LOCK_DURATION_MS = 60_000;
/** Service Bus caps a dead-letter description; longer details are cut. */
const MAX_DETAIL_LENGTH = 1024;
/** How long a session worker waits for the next message before giving the session up. */
const SESSION_IDLE_MS = 1000;
/**
 * Past `maxWaitTimeMs`, how long stop() and close() wait for a receive still running
 * before they go on without it (a silent connection: it never returns).
 */
const RECEIVE_ANSWER_MARGIN_MS = 5000;
/** How long close() waits for the broker to close the links and the connection. */
const CLOSE_TIMEOUT_MS = 10_000;
/**
 * How long a receive asking for more messages right after some arrived waits for them.
 * `receiveMessages(n)` returns once n messages arrived, or once this wait and a drain of
 * the link's leftover credit are over (the drain still delivers what the entity holds).
 */
export const FOLLOW_UP_WAIT_MS = 20;
/** Codes with which accept-next-session says that no session is free right now. */
const NO_SESSION_CODES = new Set(['ServiceTimeout', 'SessionCannotBeLocked']);
/** Codes with which accepting a named session says that the entity has no sessions. */
const NOT_A_SESSION_ENTITY = new Set(['SessionCannotBeLocked', 'InvalidOperation']);

/**
 * What `createAdapter` receives besides the broker section (the core's adapter options).
 *
 * @example
 * ```ts
 * const options: ServiceBusAdapterOptions = { consumerName: 'payments', log: console, maxAttempts: 5 };
 * ```
 */
export type ServiceBusAdapterOptions = AdapterOptions;

/**
 * Counters an application may export as metrics (`adapter.stats`).
 *
 * @example
 * ```ts
 * setInterval(() => gauge.set((adapter as ServiceBusAdapter).stats.lockLost), 10_000);
 * ```
 */
export interface ServiceBusAdapterStats {
  received: number;
  /** Settlements or renewals that found the lock gone. */
  lockLost: number;
  deadLettered: number;
  /** Delayed retries made as scheduled copies. */
  retryCopies: number;
}

/**
 * The Azure Service Bus adapter: peek-lock receives without the SDK's auto-complete or
 * auto lock renewal (the core's lease keeper renews per lock token), complete after
 * commit, delayed retries (a scheduled copy on queues, a held lock elsewhere),
 * dead-lettering with reason and description, and per-session ordering.
 *
 * Usually created by `createConsumer` (`broker.type: 'servicebus'`) or
 * `createServiceBusConsumer`.
 *
 * @example
 * ```ts
 * const adapter = new ServiceBusAdapter({ type: 'servicebus', connectionString, queueName: 'payments' }, { consumerName: 'payments', log: console });
 * ```
 */
export class ServiceBusAdapter implements BrokerAdapter {
  readonly type = 'servicebus';
  /** The namespace endpoint and entity, for the error of a failed start (no key). */
  get address(): string {
    const endpoint = /(?:^|;)\s*Endpoint=([^;]+)/i.exec(this.settings.connectionString ?? '')?.[1];
    const host = endpoint ?? this.settings.client?.fullyQualifiedNamespace ?? 'the given client';
    return `${host} (${this.settings.entityPath})`;
  }
  /** Service Bus `messageId`; a retry copy carries the original's in `oncely-message-id`. */
  readonly defaultIdStrategy: IdStrategy = 'producer';
  readonly stats: ServiceBusAdapterStats = { received: 0, lockLost: 0, deadLettered: 0, retryCopies: 0 };

  readonly settings: ServiceBusSettings;
  private readonly client: ServiceBusClient;
  private readonly ownsClient: boolean;
  private readonly log: Logger;
  private lockDurationMs: number;
  /** Largest lock time left seen on a fresh lock: the entity's LockDuration, at most. */
  private learnedMs: number | undefined;
  private warnedLockDuration = false;
  private sender: ServiceBusSender | undefined;
  private receiver: ServiceBusReceiver | undefined;
  private readonly sessionReceivers = new Set<ServiceBusSessionReceiver>();
  private readonly loops: Array<Promise<void>> = [];
  /** Delayed retries waiting out their delay with the lock held, outside any handler slot. */
  private readonly holds = new Set<Promise<void>>();
  /** Session workers running, and those of them waiting out a delayed retry. */
  private sessionWorkers = 0;
  private holdingWorkers = 0;
  private readonly halt = new AbortController();
  /** Set by the first stop() or close(): the end of their waits for the calls running. */
  private giveUpAt: number | undefined;

  constructor(
    broker: Record<string, unknown>,
    private readonly options: ServiceBusAdapterOptions,
  ) {
    this.settings = parseServiceBusConfig(broker);
    this.log = options.log;
    // Every held delayed retry and every session worker waits on the halt signal: more
    // than Node's default of 10 listeners is normal here, not a leak.
    setMaxListeners(0, this.halt.signal);
    this.ownsClient = this.settings.client === undefined;
    this.client =
      this.settings.client ??
      new ServiceBusClient(this.settings.connectionString!, this.settings.clientOptions);
    this.lockDurationMs = this.settings.lockDurationMs ?? DEFAULT_LOCK_DURATION_MS;
  }

  /**
   * Each renewal extends the lock by the entity's LockDuration (the service decides the
   * length); the keeper renews at half of it. Learned from every delivery's lock; a
   * configured `lockDurationMs` is only an upper bound (a longer one is warned about and
   * ignored: trusted, every renewal would come after the lock is gone).
   */
  get lease(): AdapterLease {
    return { extendByMs: this.lockDurationMs };
  }

  async start(runtime: AdapterRuntime): Promise<void> {
    const { maxDeliveryCount } = this.settings;
    const { maxAttempts } = this.options;
    const { queueName, topicName, subscriptionName, retryStrategy, sessions } = this.settings;
    if (maxDeliveryCount !== undefined && maxAttempts !== undefined && maxDeliveryCount <= maxAttempts) {
      throw new BrokerMisconfiguredError(
        `${this.settings.entityPath}: MaxDeliveryCount (${maxDeliveryCount}) must be above maxAttempts (${maxAttempts}); otherwise Service Bus dead-letters messages (MaxDeliveryCountExceeded, without Oncely's reason) before Oncely does, and releases during a store outage count towards it`,
      );
    }
    // A peek works on every entity, with sessions or without: the existence check of both
    // modes (with sessions: true a misspelt queue would start and only log forever).
    const peeker = queueName
      ? this.client.createReceiver(queueName, { maxAutoLockRenewalDurationInMs: 0 })
      : this.client.createReceiver(topicName!, subscriptionName!, { maxAutoLockRenewalDurationInMs: 0 });
    let known: boolean;
    try {
      known = await this.checkEntity(peeker);
    } finally {
      await peeker.close().catch(() => {});
    }
    if (known) await this.checkSessions();
    if (queueName && retryStrategy === 'schedule' && !sessions)
      this.sender = this.client.createSender(queueName);
    if (sessions) {
      for (let worker = 0; worker < runtime.concurrency; worker++) this.loops.push(this.sessionLoop(runtime));
      return;
    }
    const receiverOptions = {
      receiveMode: 'peekLock' as const,
      // The core's lease keeper renews per lock token. The SDK's renewer keys its timers
      // by messageId, so two in-flight copies of one producer duplicate would cancel
      // each other's renewal.
      maxAutoLockRenewalDurationInMs: 0,
      // The core decodes the body (bodyFormat); an unparseable one is dead-lettered.
      skipParsingBodyAsJson: true,
    };
    this.receiver = queueName
      ? this.client.createReceiver(queueName, receiverOptions)
      : this.client.createReceiver(topicName!, subscriptionName!, receiverOptions);
    this.loops.push(this.receiveLoop(runtime));
  }

  /**
   * Fails fast on an entity that does not exist, and on a `sessions` setting the entity
   * contradicts: a non-session receiver on a RequiresSession entity (or the reverse) is
   * refused on every receive, which the loops could only log. Accepting a session of a
   * random ID takes nothing: it is granted (an empty session) only on a RequiresSession
   * entity, and closed at once.
   */
  private async checkSessions(): Promise<void> {
    const { queueName, topicName, subscriptionName, sessions, entityPath } = this.settings;
    const probe = `oncely-probe-${randomUUID()}`;
    const options = { receiveMode: 'peekLock' as const, maxAutoLockRenewalDurationInMs: 0 };
    let requiresSession: boolean;
    try {
      const receiver = await (queueName
        ? this.client.acceptSession(queueName, probe, options)
        : this.client.acceptSession(topicName!, subscriptionName!, probe, options));
      await receiver.close().catch(() => {});
      requiresSession = true;
    } catch (error) {
      // The entity exists (checkEntity): a session of a random ID no one else can hold
      // that cannot be accepted means the entity has no sessions. The SDK reports the
      // refused attach as SessionCannotBeLocked; other codes are taken as not knowing.
      if (!NOT_A_SESSION_ENTITY.has(serviceBusErrorCode(error) ?? '')) {
        this.log.warn(
          `servicebus: cannot tell whether ${entityPath} requires sessions at start; receiving anyway`,
          {
            error,
          },
        );
        return;
      }
      requiresSession = false;
    }
    if (requiresSession !== sessions) {
      await this.close().catch(() => {});
      throw new BrokerMisconfiguredError(
        requiresSession
          ? `Service Bus entity ${entityPath} requires sessions: set broker.sessions: true (a receiver without sessions is refused on every receive)`
          : `Service Bus entity ${entityPath} does not require sessions: remove broker.sessions (a session receiver is refused on it)`,
      );
    }
  }

  /**
   * Fails fast on an entity that does not exist (a peek, which locks nothing), rather
   * than start a receive loop that can only report errors. Other failures (the namespace
   * not reachable yet) are left to the loop, which retries.
   */
  private async checkEntity(receiver: ServiceBusReceiver): Promise<boolean> {
    try {
      await receiver.peekMessages(1);
      return true;
    } catch (error) {
      if (serviceBusErrorCode(error) === 'MessagingEntityNotFound') {
        await this.close().catch(() => {});
        throw new BrokerMisconfiguredError(`Service Bus entity ${this.settings.entityPath} does not exist`, {
          cause: error,
        });
      }
      // A socket error (the SDK keeps Node's syscall/errno, code 'GeneralError'): the
      // namespace is unreachable. Fail the start; core names the broker and address.
      if (typeof (error as { syscall?: unknown } | null)?.syscall === 'string') {
        await this.close().catch(() => {});
        throw error;
      }
      this.log.warn(`servicebus: cannot peek ${this.settings.entityPath} at start; receiving anyway`, {
        error,
      });
      return false;
    }
  }

  /**
   * Stops fetching: the receive loop ends after its current receive call (at most
   * `maxWaitTimeMs`); whatever that call returns after stop is abandoned at once.
   * Receivers stay open until `close()` so in-flight messages can still be completed.
   */
  async stop(): Promise<void> {
    const giveUpAt = this.halted();
    if (!this.settings.sessions) await waitUntil(settled(this.loops), giveUpAt);
    // A held delayed retry abandons at once on the halt.
    await waitUntil(settled(this.holds), giveUpAt);
  }

  /**
   * Each wait is bounded: on a silent connection (a black-holing network) a receive never
   * returns (the SDK waits for the broker's answer to its drain) and each link's close
   * waits a minute and more, which held the consumer's stop() for good. Past the bounds
   * the client finishes closing in the background; what a late receive returns is
   * abandoned at once (the halt), and what is locked returns when its lock expires.
   */
  async close(): Promise<void> {
    const giveUpAt = this.halted();
    await waitUntil(settled(this.loops), giveUpAt);
    await waitUntil(settled(this.holds), giveUpAt);
    const closing = (async () => {
      await this.receiver?.close().catch(() => {});
      for (const receiver of this.sessionReceivers) await receiver.close().catch(() => {});
      await this.sender?.close().catch(() => {});
      if (this.ownsClient) await this.client.close().catch(() => {});
    })();
    await waitUntil(closing, Date.now() + CLOSE_TIMEOUT_MS);
  }

  /** Halts the loops; returns until when stop() and close() wait for the calls running. */
  private halted(): number {
    this.halt.abort();
    this.giveUpAt ??= Date.now() + this.settings.maxWaitTimeMs + RECEIVE_ANSWER_MARGIN_MS;
    return this.giveUpAt;
  }

  // ------------------------------------------------------------------------------------
  // Receiving
  // ------------------------------------------------------------------------------------

  /**
   * Receives at most the free handler slots. Once the first message of a call has arrived
   * the SDK waits up to another second for the rest of the count before it returns any
   * (its batching window), with the received messages locked and the slots idle. So the
   * loop never asks for more than is likely there: after an empty call it waits (up to
   * `maxWaitTimeMs`) for one message, which returns the moment it arrives; after a
   * non-empty one it asks for the free slots but waits only {@link FOLLOW_UP_WAIT_MS}.
   */
  private async receiveLoop(runtime: AdapterRuntime): Promise<void> {
    let failures = 0;
    let flowing = false;
    // One host (and so one DispositionGate) for every delivery of this receiver: the
    // gate keeps settlements of different messages out of one disposition frame, which
    // a gate per message cannot do.
    const receiver = this.receiver!;
    const host = this.hostFor(receiver);
    for (;;) {
      const free = await runtime.whenReady();
      if (free <= 0 || this.halt.signal.aborted) return;
      let messages: ServiceBusReceivedMessage[];
      try {
        messages = await receiver.receiveMessages(flowing ? Math.min(free, this.settings.maxBatchSize) : 1, {
          maxWaitTimeInMs: flowing ? FOLLOW_UP_WAIT_MS : this.settings.maxWaitTimeMs,
        });
        flowing = messages.length > 0;
        failures = 0;
      } catch (error) {
        if (this.halt.signal.aborted) return;
        failures++;
        flowing = false;
        runtime.reportError(error, 'receiveMessages failed; receiving again after a pause');
        await pauseUnlessAborted(Math.min(5000, 100 * 2 ** Math.min(failures, 6)), this.halt.signal);
        continue;
      }
      for (const message of messages) void this.accept(runtime, message, host);
    }
  }

  /**
   * One session at a time per worker; its messages one by one, in order. A worker whose
   * message waits out a delayed retry keeps its session (the message stays first in it)
   * but no handler slot: a spare worker serves other sessions meanwhile, and leaves once
   * it is one too many.
   */
  private async sessionLoop(runtime: AdapterRuntime): Promise<void> {
    this.sessionWorkers++;
    try {
      await this.sessionWorker(runtime);
    } finally {
      this.sessionWorkers--;
    }
  }

  private async sessionWorker(runtime: AdapterRuntime): Promise<void> {
    const { queueName, topicName, subscriptionName } = this.settings;
    let failures = 0;
    while (!this.halt.signal.aborted) {
      if (this.sessionWorkers - this.holdingWorkers > runtime.concurrency) return;
      if ((await runtime.whenReady()) <= 0) return;
      let receiver: ServiceBusSessionReceiver | undefined;
      const options = {
        receiveMode: 'peekLock' as const,
        maxAutoLockRenewalDurationInMs: 0,
        skipParsingBodyAsJson: true,
        abortSignal: this.halt.signal,
      };
      try {
        receiver = await this.unlessHalted(
          queueName
            ? this.client.acceptNextSession(queueName, options)
            : this.client.acceptNextSession(topicName!, subscriptionName!, options),
        );
        if (!receiver) return;
        failures = 0;
      } catch (error) {
        if (this.halt.signal.aborted) return;
        if (!NO_SESSION_CODES.has(serviceBusErrorCode(error) ?? '')) {
          failures++;
          runtime.reportError(error, 'acceptNextSession failed; trying again after a pause');
        }
        await pauseUnlessAborted(
          failures === 0 ? 50 : Math.min(5000, 100 * 2 ** Math.min(failures, 6)),
          this.halt.signal,
        );
        continue;
      }
      this.sessionReceivers.add(receiver);
      const held = receiver;
      // A lost session lock gives the session up (closing releases it), rather than
      // keep receiving on a link the service detached.
      const keeper = new SessionKeeper(receiver, this.log, () => void held.close().catch(() => {}));
      const session: SessionState = { keeper, hold: undefined };
      try {
        this.learnSessionLock(receiver);
        const host = this.hostFor(receiver, session);
        while (!this.halt.signal.aborted && !keeper.lost) {
          if ((await runtime.whenReady()) <= 0) break;
          const [message] = await receiver.receiveMessages(1, {
            maxWaitTimeInMs: Math.min(this.settings.maxWaitTimeMs, SESSION_IDLE_MS),
          });
          if (!message) break;
          // Awaited: one message of a session at a time keeps the session's order.
          await this.accept(runtime, message, host, keeper.lockedUntil);
          if (session.hold) await this.waitOutHold(runtime, session);
        }
      } catch (error) {
        if (!this.halt.signal.aborted && !keeper.lost)
          runtime.reportError(error, `session ${receiver.sessionId} ended with an error`);
      } finally {
        keeper.stop();
        this.sessionReceivers.delete(receiver);
        await receiver.close().catch(() => {});
      }
    }
  }

  /** Waits out a session message's delayed retry, a spare worker taking this one's turn. */
  private async waitOutHold(runtime: AdapterRuntime, session: SessionState): Promise<void> {
    this.holdingWorkers++;
    try {
      if (this.sessionWorkers - this.holdingWorkers < runtime.concurrency && !this.halt.signal.aborted)
        this.loops.push(this.sessionLoop(runtime));
      await session.hold;
    } finally {
      this.holdingWorkers--;
      session.hold = undefined;
    }
  }

  /**
   * The session an accept returns, or undefined as soon as stop() begins. An idle worker's
   * accept-next-session is held open by the service for the client's whole wait (about
   * 60 s), and the SDK's abortSignal does not cancel an attach already sent: stop() must
   * not wait for it. A receiver that still arrives after the halt is closed at once, which
   * gives its session back.
   */
  private unlessHalted(
    accepting: Promise<ServiceBusSessionReceiver>,
  ): Promise<ServiceBusSessionReceiver | undefined> {
    const halt = this.halt.signal;
    return new Promise((resolve, reject) => {
      const onHalt = () => {
        resolve(undefined);
        accepting.then((late) => late.close()).catch(() => {});
      };
      if (halt.aborted) return onHalt();
      halt.addEventListener('abort', onHalt, { once: true });
      accepting.then(
        (receiver) => {
          halt.removeEventListener('abort', onHalt);
          resolve(receiver);
        },
        (error: unknown) => {
          halt.removeEventListener('abort', onHalt);
          reject(error);
        },
      );
    });
  }

  private accept(
    runtime: AdapterRuntime,
    message: ServiceBusReceivedMessage,
    host: DeliveryHost,
    sessionLockedUntil?: number,
  ): Promise<void> {
    this.stats.received++;
    if (sessionLockedUntil === undefined && message.lockedUntilUtc) {
      this.learn(message.lockedUntilUtc.getTime());
    }
    const delivery = new ServiceBusDelivery(
      message,
      toEnvelope(message, this.settings.entityPath),
      host,
      Date.now(),
      sessionLockedUntil,
    );
    if (this.halt.signal.aborted) {
      // Received by a call that was running when stop() began: give it back now rather
      // than let its lock run out.
      return host.abandon(delivery).catch(() => {});
    }
    return runtime.dispatch(delivery);
  }

  private learnSessionLock(receiver: ServiceBusSessionReceiver): void {
    if (receiver.sessionLockedUntilUtc) this.learn(receiver.sessionLockedUntilUtc.getTime());
  }

  /**
   * What is left of a fresh lock is at most the LockDuration, so the largest seen is the
   * best lower bound of it (renewing early is safe, late is not).
   */
  private learn(lockedUntil: number): void {
    const left = lockedUntil - Date.now();
    if (left <= 0) return;
    this.learnedMs = Math.max(this.learnedMs ?? 0, left);
    const configured = this.settings.lockDurationMs;
    this.lockDurationMs = Math.min(configured ?? Number.POSITIVE_INFINITY, this.learnedMs);
    // A second of slack: a fresh lock shows the LockDuration less the trip to us.
    if (configured !== undefined && configured > this.learnedMs + 1000 && !this.warnedLockDuration) {
      this.warnedLockDuration = true;
      this.log.warn(
        `servicebus: broker.lockDurationMs (${configured} ms) is longer than the lock ${this.settings.entityPath} gives (${Math.round(this.learnedMs)} ms left on a fresh lock); ignored, renewing at the entity's pace`,
      );
    }
  }

  // ------------------------------------------------------------------------------------
  // Settlement
  // ------------------------------------------------------------------------------------

  private hostFor(
    receiver: ServiceBusReceiver | ServiceBusSessionReceiver,
    session?: SessionState,
  ): DeliveryHost {
    const gate = new DispositionGate();
    // A session whose lock is lost has its receiver closed (SessionKeeper): a settlement
    // through it would fail as "receiver closed"; it is a lost lock, and said as one (the
    // core then counts a release as done: the service has the message back).
    const onSession = (call: () => Promise<void>): Promise<void> =>
      session?.keeper.lost ? Promise.reject(session.keeper.lostBecause) : call();
    const complete = (message: ServiceBusReceivedMessage) =>
      onSession(() => gate.run('shared', () => onLiveLink(message, (m) => receiver.completeMessage(m))));
    const abandon = (message: ServiceBusReceivedMessage) =>
      onSession(() => gate.run('exclusive', () => onLiveLink(message, (m) => receiver.abandonMessage(m))));
    return {
      complete: (d) => this.settle('completeMessage', () => complete(d.message)),
      abandon: (d) => this.settle('abandonMessage', () => abandon(d.message)),
      deadLetter: (d, reason, detail) =>
        this.deadLetter(reason, detail, (options) =>
          onSession(() =>
            gate.run('exclusive', () => onLiveLink(d.message, (m) => receiver.deadLetterMessage(m, options))),
          ),
        ),
      retry: (d, delayMs, info) =>
        this.retry(d, delayMs, info, session, complete, abandon, () =>
          this.settle('renewLock', () => receiver.renewMessageLock(d.message)).then((until) =>
            until.getTime(),
          ),
        ),
      // A session message's lock is its session's, which the SessionKeeper renews.
      renew: async (d) => {
        if (session) {
          if (session.keeper.lost) {
            this.stats.lockLost++;
            throw session.keeper.lostBecause;
          }
          return session.keeper.lockedUntil;
        }
        const until = await this.settle('renewLock', () => receiver.renewMessageLock(d.message));
        return until.getTime();
      },
    };
  }

  /** Runs a settlement or renewal, mapping a lost lock to `LeaseLostError` and counting it. */
  private async settle<T>(operation: string, call: () => Promise<T>): Promise<T> {
    try {
      return await call();
    } catch (error) {
      const mapped = toSettlementError(operation, error);
      if (isOncelyError(mapped, 'LEASE_LOST')) {
        this.stats.lockLost++;
        this.log.warn(`servicebus: ${operation}: the lock is lost (expired, or its link is gone)`, { error });
      }
      throw mapped;
    }
  }

  private async deadLetter(
    reason: DeadLetterReason,
    detail: string,
    send: (options: { deadLetterReason: string; deadLetterErrorDescription: string }) => Promise<void>,
  ): Promise<void> {
    const description =
      detail.length > MAX_DETAIL_LENGTH ? `${detail.slice(0, MAX_DETAIL_LENGTH - 1)}…` : detail;
    await this.settle('deadLetterMessage', () =>
      send({ deadLetterReason: reason, deadLetterErrorDescription: description }),
    );
    this.stats.deadLettered++;
  }

  /**
   * A delayed retry. Abandon is immediate on Service Bus, so a delay needs either a
   * scheduled copy (queues, `retryStrategy: 'schedule'`) or the lock held for the delay
   * and then an abandon (subscriptions, sessions, `'hold'`).
   */
  private async retry(
    delivery: ServiceBusDelivery,
    delayMs: number,
    info: SettlementInfo | undefined,
    session: SessionState | undefined,
    completeMessage: (message: ServiceBusReceivedMessage) => Promise<void>,
    abandonMessage: (message: ServiceBusReceivedMessage) => Promise<void>,
    renewLock: () => Promise<number>,
  ): Promise<void> {
    const abandon = () => this.settle('abandonMessage', () => abandonMessage(delivery.message));
    if (delayMs <= 0) return abandon();
    if (!this.sender || session) {
      // Held outside the handler slot: this settlement is over at once (the core frees
      // the slot), and the hold renews the lock itself until the delay is over.
      const hold = holdThenAbandon({
        delayMs,
        lockedUntil: delivery.leaseExpiresAt ?? Date.now(),
        renew: session ? undefined : renewLock,
        abandon,
        halt: this.halt.signal,
        log: this.log,
      });
      this.holds.add(hold);
      void hold.finally(() => this.holds.delete(hold));
      if (session) session.hold = hold;
      return;
    }
    const attempts = info?.attempt ?? delivery.envelope.deliveryCount ?? 1;
    const copy = retryCopy(delivery, attempts);
    try {
      await this.sender.scheduleMessages(copy, new Date(Date.now() + delayMs));
    } catch (error) {
      // No copy exists: give the original back, so it is retried without the delay
      // rather than waiting for its lock to run out.
      await abandon().catch(() => {});
      throw toSettlementError('scheduleMessages', error);
    }
    this.stats.retryCopies++;
    // If this complete fails the original comes back too: its redelivery is absorbed
    // by the store's marker once either copy has been processed.
    await this.settle('completeMessage', () => completeMessage(delivery.message));
  }
}

/** A session a worker holds: its lock's keeper, and a delayed retry it waits out. */
interface SessionState {
  keeper: SessionKeeper;
  hold: Promise<void> | undefined;
}

/** Waits for every promise in `set`, also those added while waiting. */
async function settled(set: Iterable<Promise<unknown>>): Promise<void> {
  for (;;) {
    const pending = [...set];
    await Promise.all(pending.map((p) => p.catch(() => {})));
    if ([...set].every((p) => pending.includes(p))) return;
  }
}
