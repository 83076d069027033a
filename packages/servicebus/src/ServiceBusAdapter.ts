import { createHash } from 'node:crypto';
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

/** The SDK's raw AMQP message type (from @azure/core-amqp, which it does not re-export). */
type AmqpAnnotatedMessage = ServiceBusReceivedMessage['_rawAmqpMessage'];

import { type DeliveryHost, ServiceBusDelivery } from './ServiceBusDelivery.js';
import { parseServiceBusConfig, type ServiceBusSettings } from './serviceBusConfig.js';
import { COPY_PROPERTIES, toEnvelope } from './toEnvelope.js';

/** Lock duration assumed until the first delivery shows the real one (the service default). */
const DEFAULT_LOCK_DURATION_MS = 60_000;
/** Service Bus caps a dead-letter description; longer details are cut. */
const MAX_DETAIL_LENGTH = 1024;
/** Service Bus caps a MessageId at 128 characters. */
const MAX_MESSAGE_ID_LENGTH = 128;
/** How long a session worker waits for the next message before giving the session up. */
const SESSION_IDLE_MS = 1000;
/**
 * How long a receive asking for more messages right after some arrived waits for them.
 * `receiveMessages(n)` returns once n messages arrived, or once this wait and a drain of
 * the link's leftover credit are over (the drain still delivers what the entity holds).
 */
export const FOLLOW_UP_WAIT_MS = 20;
/** Codes with which accept-next-session says that no session is free right now. */
const NO_SESSION_CODES = new Set(['ServiceTimeout', 'SessionCannotBeLocked']);

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
  private readonly learnLockDuration: boolean;
  /** True once a delivery showed the lock duration. */
  private learned = false;
  private sender: ServiceBusSender | undefined;
  private receiver: ServiceBusReceiver | undefined;
  private readonly sessionReceivers = new Set<ServiceBusSessionReceiver>();
  private readonly loops: Array<Promise<void>> = [];
  private readonly halt = new AbortController();

  constructor(
    broker: Record<string, unknown>,
    private readonly options: ServiceBusAdapterOptions,
  ) {
    this.settings = parseServiceBusConfig(broker);
    this.log = options.log;
    this.ownsClient = this.settings.client === undefined;
    this.client =
      this.settings.client ??
      new ServiceBusClient(this.settings.connectionString!, this.settings.clientOptions);
    this.learnLockDuration = this.settings.lockDurationMs === undefined;
    this.lockDurationMs = this.settings.lockDurationMs ?? DEFAULT_LOCK_DURATION_MS;
  }

  /**
   * Each renewal extends the lock by the entity's LockDuration (the service decides the
   * length); the keeper renews at half of it. Learned from deliveries when not configured.
   */
  get lease(): AdapterLease {
    return { extendByMs: this.lockDurationMs };
  }

  async start(runtime: AdapterRuntime): Promise<void> {
    const { maxDeliveryCount } = this.settings;
    const { maxAttempts } = this.options;
    if (maxDeliveryCount !== undefined && maxAttempts !== undefined && maxDeliveryCount <= maxAttempts) {
      throw new BrokerMisconfiguredError(
        `${this.settings.entityPath}: MaxDeliveryCount (${maxDeliveryCount}) must be above maxAttempts (${maxAttempts}); otherwise Service Bus dead-letters messages (MaxDeliveryCountExceeded, without Oncely's reason) before Oncely does, and releases during a store outage count towards it`,
      );
    }
    const { queueName, topicName, subscriptionName, retryStrategy, sessions } = this.settings;
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
    await this.checkEntity(this.receiver);
    this.loops.push(this.receiveLoop(runtime));
  }

  /**
   * Fails fast on an entity that does not exist (a peek, which locks nothing), rather
   * than start a receive loop that can only report errors. Other failures (the namespace
   * not reachable yet) are left to the loop, which retries.
   */
  private async checkEntity(receiver: ServiceBusReceiver): Promise<void> {
    try {
      await receiver.peekMessages(1);
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
    }
  }

  /**
   * Stops fetching: the receive loop ends after its current receive call (at most
   * `maxWaitTimeMs`); whatever that call returns after stop is abandoned at once.
   * Receivers stay open until `close()` so in-flight messages can still be completed.
   */
  async stop(): Promise<void> {
    this.halt.abort();
    if (!this.settings.sessions) await Promise.all(this.loops);
  }

  async close(): Promise<void> {
    this.halt.abort();
    await Promise.all(this.loops);
    await this.receiver?.close().catch(() => {});
    for (const receiver of this.sessionReceivers) await receiver.close().catch(() => {});
    await this.sender?.close().catch(() => {});
    if (this.ownsClient) await this.client.close().catch(() => {});
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

  /** One session at a time per worker; its messages one by one, in order. */
  private async sessionLoop(runtime: AdapterRuntime): Promise<void> {
    const { queueName, topicName, subscriptionName } = this.settings;
    let failures = 0;
    while (!this.halt.signal.aborted) {
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
      try {
        this.learnSessionLock(receiver);
        const host = this.hostFor(receiver);
        while (!this.halt.signal.aborted) {
          if ((await runtime.whenReady()) <= 0) break;
          const [message] = await receiver.receiveMessages(1, {
            maxWaitTimeInMs: Math.min(this.settings.maxWaitTimeMs, SESSION_IDLE_MS),
          });
          if (!message) break;
          // Awaited: one message of a session at a time keeps the session's order.
          await this.accept(runtime, message, host, receiver.sessionLockedUntilUtc?.getTime());
        }
      } catch (error) {
        if (!this.halt.signal.aborted)
          runtime.reportError(error, `session ${receiver.sessionId} ended with an error`);
      } finally {
        this.sessionReceivers.delete(receiver);
        await receiver.close().catch(() => {});
      }
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
    if (this.learnLockDuration && sessionLockedUntil === undefined && message.lockedUntilUtc) {
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
    if (this.learnLockDuration && receiver.sessionLockedUntilUtc)
      this.learn(receiver.sessionLockedUntilUtc.getTime());
  }

  /**
   * What is left of a fresh lock is at most the LockDuration, so the largest seen is the
   * best lower bound of it (renewing early is safe, late is not).
   */
  private learn(lockedUntil: number): void {
    const left = lockedUntil - Date.now();
    if (left <= 0) return;
    this.lockDurationMs = this.learned ? Math.max(this.lockDurationMs, left) : left;
    this.learned = true;
  }

  // ------------------------------------------------------------------------------------
  // Settlement
  // ------------------------------------------------------------------------------------

  private hostFor(receiver: ServiceBusReceiver | ServiceBusSessionReceiver): DeliveryHost {
    const isSession = 'sessionId' in receiver && receiver.sessionId !== undefined;
    const gate = new DispositionGate();
    const complete = (message: ServiceBusReceivedMessage) =>
      gate.run('shared', () => onLiveLink(message, (m) => receiver.completeMessage(m)));
    const abandon = (message: ServiceBusReceivedMessage) =>
      gate.run('exclusive', () => onLiveLink(message, (m) => receiver.abandonMessage(m)));
    return {
      complete: (d) => this.settle('completeMessage', () => complete(d.message)),
      abandon: (d) => this.settle('abandonMessage', () => abandon(d.message)),
      deadLetter: (d, reason, detail) =>
        this.deadLetter(reason, detail, (options) =>
          gate.run('exclusive', () => onLiveLink(d.message, (m) => receiver.deadLetterMessage(m, options))),
        ),
      retry: (d, delayMs, info) => this.retry(d, delayMs, info, isSession, complete, abandon),
      renew: async (d) => {
        const until = await this.settle('renewLock', () =>
          isSession
            ? (receiver as ServiceBusSessionReceiver).renewSessionLock()
            : receiver.renewMessageLock(d.message),
        );
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
    isSession: boolean,
    completeMessage: (message: ServiceBusReceivedMessage) => Promise<void>,
    abandonMessage: (message: ServiceBusReceivedMessage) => Promise<void>,
  ): Promise<void> {
    const abandon = () => this.settle('abandonMessage', () => abandonMessage(delivery.message));
    if (delayMs <= 0) return abandon();
    if (!this.sender || isSession) {
      // The lease keeper renews the lock while we wait (the settlement is not done yet).
      await pauseUnlessAborted(delayMs, this.halt.signal);
      return abandon();
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

/** How often a pending settlement checks whether its link died under it. */
const LINK_CHECK_MS = 250;

/**
 * Settles on the message's link while it lives. When the link dies before the answer
 * comes (the disposition was lost with the connection, and the SDK would wait a minute
 * for it), settles again through `$management` by lock token. If the first disposition
 * did arrive, the second finds the lock gone (`MessageLockLost`): counted, never a
 * second effect.
 */
function onLiveLink(
  message: ServiceBusReceivedMessage,
  settle: (message: ServiceBusReceivedMessage) => Promise<void>,
): Promise<void> {
  const first = settle(viaLiveLink(message));
  if (message.sessionId !== undefined) return first;
  return new Promise<void>((resolve, reject) => {
    let done = false;
    const timer = setInterval(() => {
      if (done || !linkIsGone(message)) return;
      done = true;
      clearInterval(timer);
      first.catch(() => {});
      settle(viaLiveLink(message)).then(resolve, reject);
    }, LINK_CHECK_MS);
    timer.unref();
    first.then(
      () => {
        if (done) return;
        done = true;
        clearInterval(timer);
        resolve();
      },
      (error) => {
        if (done) return;
        done = true;
        clearInterval(timer);
        reject(error);
      },
    );
  });
}

function linkIsGone(message: ServiceBusReceivedMessage): boolean {
  const link = (message as unknown as { delivery?: { link?: { is_open?: () => boolean } } }).delivery?.link;
  return link !== undefined && typeof link.is_open === 'function' && !link.is_open();
}

/**
 * After a connection loss the SDK re-creates its receiver link under the same name, and
 * its settle path finds that new link by name and settles the old delivery on the old,
 * dead link: the call never gets an answer (it times out after a minute and is
 * retried). For a message whose link is gone the SDK itself settles through
 * `$management` by lock token when it finds no open receiver; this makes it take that
 * path. Session messages are left alone: their lock dies with their link
 * (`SessionLockLost`).
 */
function viaLiveLink(message: ServiceBusReceivedMessage): ServiceBusReceivedMessage {
  const holder = message as unknown as { delivery?: { remote_settled?: boolean } };
  if (message.sessionId === undefined && linkIsGone(message)) {
    holder.delivery = { remote_settled: holder.delivery?.remote_settled ?? false };
  }
  return message;
}

/**
 * The scheduled copy of a failed message: the same body, properties and session, a
 * MessageId of its own (deterministic per attempt: duplicate detection would silently
 * drop a copy reusing the original's inside the window, and drops a re-sent copy of
 * the same attempt), the Oncely ID in `oncely-message-id` and the attempts so far in
 * `oncely-attempts`.
 */
export function retryCopy(delivery: ServiceBusDelivery, attempts: number): AmqpAnnotatedMessage {
  const raw = delivery.message._rawAmqpMessage;
  const originalId = delivery.envelope.producerMessageId ?? delivery.envelope.brokerMessageId ?? 'unknown';
  let copyId = `${originalId}|oncely-retry-${attempts}`;
  if (copyId.length > MAX_MESSAGE_ID_LENGTH) {
    copyId = `oncely-retry-${attempts}-${createHash('sha256').update(originalId).digest('hex')}`;
  }
  const annotations: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(raw.messageAnnotations ?? {})) {
    // Broker-set annotations (sequence number, lock, enqueue time...) belong to the original.
    if (!key.startsWith('x-opt-') || key === 'x-opt-partition-key') annotations[key] = value;
  }
  const properties = { ...(raw.applicationProperties ?? {}) };
  if (delivery.envelope.producerMessageId !== undefined) {
    properties[COPY_PROPERTIES.messageId] = delivery.envelope.producerMessageId;
  }
  properties[COPY_PROPERTIES.attempts] = attempts;
  return {
    body: raw.body,
    bodyType: raw.bodyType,
    header: raw.header ? { ...raw.header, deliveryCount: undefined } : undefined,
    properties: { ...(raw.properties ?? {}), messageId: copyId },
    applicationProperties: properties,
    messageAnnotations: annotations,
  };
}
