import {
  type AdapterRuntime,
  type BrokerAdapter,
  type DeadLetterReason,
  type Delivery,
  type IdStrategy,
  resolveMessageId,
} from '@oncely/core';
import { Latch } from './Latch.js';
import { withSettlements } from './withSettlements.js';

/**
 * The settlement operations of a {@link Delivery}.
 *
 * @example
 * ```ts
 * const kind: SettlementKind = 'retryLater';
 * ```
 */
export type SettlementKind = 'ack' | 'retryLater' | 'deadLetter' | 'release';

/**
 * One settlement the core asked for, and what became of it.
 *
 * @example
 * ```ts
 * const lost: SettlementRecord[] = faults.list('ack', { dropped: true });
 * ```
 */
export interface SettlementRecord {
  kind: SettlementKind;
  /** The message ID under the consumer's ID strategy (undefined for messages without one). */
  messageId: string | undefined;
  /** Label of the wrapped adapter (one per consumer). */
  source: string;
  /** Epoch ms when the core asked for it. */
  at: number;
  /** True when the fault injector swallowed it: the core saw success, the broker saw nothing. */
  dropped: boolean;
  /** True when it reached the broker and the broker accepted it. */
  ok: boolean;
  error?: unknown;
  /** retryLater's delay. */
  delayMs?: number;
  /** deadLetter's reason. */
  reason?: DeadLetterReason;
}

/**
 * One delivery the adapter handed to the core.
 *
 * @example
 * ```ts
 * const fromA: DispatchRecord[] = faults.dispatches.filter((d) => d.source === 'a');
 * ```
 */
export interface DispatchRecord {
  messageId: string | undefined;
  source: string;
  at: number;
}

/**
 * A settlement held back until the test releases it.
 *
 * @example
 * ```ts
 * const held: HeldSettlement = faults.hold('ack', 'm-1');
 * await held.reached;
 * held.release();
 * ```
 */
export interface HeldSettlement {
  /** Resolves once the core has asked for the settlement (and it is being held). */
  readonly reached: Promise<void>;
  /** Lets the held settlement (and any later one it matches) through to the broker. */
  release(): void;
}

interface Hold {
  kind: SettlementKind;
  messageId: string;
  reached: Latch;
  released: Latch;
  onReached?: () => void;
}

/**
 * Broker-neutral fault injection: wraps a {@link BrokerAdapter} so that every delivery it
 * dispatches goes through hooks that can drop an ack (the core sees success, the broker
 * never hears of it: a lost ack), hold any settlement until the test releases it, and
 * record every dispatch and settlement. One injector serves every consumer of a test.
 *
 * @example
 * ```ts
 * const faults = new FaultInjector();
 * faults.dropAck(['order-1']);              // the first ack of order-1 is lost
 * const held = faults.hold('retryLater', 'order-2');
 * const adapter = faults.wrap(module.createAdapter(brokerConfig, { consumerName, log }), { label: 'a' });
 * const consumer = new Consumer(config, adapter);
 * await held.reached; // ... check the database ... ; held.release();
 * ```
 */
export class FaultInjector {
  readonly settlements: SettlementRecord[] = [];
  readonly dispatches: DispatchRecord[] = [];
  private readonly ackDrops = new Map<string, number>();
  private readonly holds: Hold[] = [];

  /** The next `times` acks of each of `messageIds` are dropped (resolve without reaching the broker). */
  dropAck(messageIds: Iterable<string>, times = 1): void {
    for (const id of messageIds) this.ackDrops.set(id, (this.ackDrops.get(id) ?? 0) + times);
  }

  /**
   * Holds the settlements of kind `kind` for `messageId` until `release()`. `onReached`
   * runs when the core first asks for one (a crash test reports its crash point there).
   */
  hold(kind: SettlementKind, messageId: string, onReached?: () => void): HeldSettlement {
    const hold: Hold = { kind, messageId, reached: new Latch(), released: new Latch(), onReached };
    this.holds.push(hold);
    return { reached: hold.reached.wait(), release: () => hold.released.open() };
  }

  /** Lets every held settlement through and drops no more acks (end of a scenario). */
  releaseAll(): void {
    this.ackDrops.clear();
    for (const hold of this.holds) hold.released.open();
  }

  /** Settlements of `kind`, optionally for one message ID and/or one source. */
  list(
    kind: SettlementKind,
    filter: { messageId?: string; source?: string; dropped?: boolean; ok?: boolean } = {},
  ) {
    return this.settlements.filter(
      (s) =>
        s.kind === kind &&
        (!('messageId' in filter) || s.messageId === filter.messageId) &&
        (filter.source === undefined || s.source === filter.source) &&
        (filter.dropped === undefined || s.dropped === filter.dropped) &&
        (filter.ok === undefined || s.ok === filter.ok),
    );
  }

  /** Acks that reached the broker and succeeded, for `messageId`. */
  confirmedAcks(messageId: string): number {
    return this.list('ack', { messageId, ok: true }).length;
  }

  /**
   * Wraps `adapter`. `idStrategy` must be the consumer's (default: the adapter's own) so
   * the hooks see the same message IDs as the core.
   */
  wrap(adapter: BrokerAdapter, options: { label: string; idStrategy?: IdStrategy }): BrokerAdapter {
    const injector = this;
    const strategy = options.idStrategy ?? adapter.defaultIdStrategy;
    const source = options.label;
    return {
      get type() {
        return adapter.type;
      },
      get lease() {
        return adapter.lease;
      },
      get defaultIdStrategy() {
        return adapter.defaultIdStrategy;
      },
      start(runtime: AdapterRuntime) {
        /** Records `delivery` as dispatched and routes its settlements through the hooks. */
        const intercept = (delivery: Delivery): Delivery => {
          const messageId = safeId(strategy, delivery);
          injector.dispatches.push({ messageId, source, at: Date.now() });
          return injector.wrapDelivery(delivery, messageId, source);
        };
        // Inherit every runtime member (getters included); only the two ways deliveries
        // reach the core are intercepted: one at a time, and as an ordered batch (Kafka
        // with `batch`), which the hooks must see just the same.
        const members: PropertyDescriptorMap = {
          dispatch: { value: (delivery: Delivery) => runtime.dispatch(intercept(delivery)) },
        };
        if (runtime.dispatchInOrder) {
          const dispatchInOrder = runtime.dispatchInOrder.bind(runtime);
          members.dispatchInOrder = {
            value: (deliveries: readonly Delivery[]) => dispatchInOrder(deliveries.map(intercept)),
          };
        }
        return adapter.start(Object.create(runtime, members) as AdapterRuntime);
      },
      pause: adapter.pause ? () => adapter.pause!() : undefined,
      resume: adapter.resume ? () => adapter.resume!() : undefined,
      stop: () => adapter.stop(),
      close: () => adapter.close(),
    };
  }

  private wrapDelivery(delivery: Delivery, messageId: string | undefined, source: string): Delivery {
    const settle = (kind: SettlementKind, call: () => Promise<void>, extra: Partial<SettlementRecord> = {}) =>
      this.settle(kind, messageId, source, call, extra);
    return withSettlements(delivery, {
      ack: () => settle('ack', () => delivery.ack()),
      retryLater: (delayMs, info) =>
        settle('retryLater', () => delivery.retryLater(delayMs, info), { delayMs }),
      deadLetter: (reason, detail, info) =>
        settle('deadLetter', () => delivery.deadLetter(reason, detail, info), { reason }),
      release: () => settle('release', () => delivery.release()),
    });
  }

  private async settle(
    kind: SettlementKind,
    messageId: string | undefined,
    source: string,
    call: () => Promise<void>,
    extra: Partial<SettlementRecord>,
  ): Promise<void> {
    const record: SettlementRecord = {
      kind,
      messageId,
      source,
      at: Date.now(),
      dropped: false,
      ok: false,
      ...extra,
    };
    this.settlements.push(record);
    const hold =
      messageId === undefined
        ? undefined
        : this.holds.find((h) => h.kind === kind && h.messageId === messageId);
    if (hold) {
      if (!hold.reached.isOpen) {
        hold.reached.open();
        hold.onReached?.();
      }
      await hold.released.wait();
    }
    const drops = messageId === undefined ? 0 : (this.ackDrops.get(messageId) ?? 0);
    if (kind === 'ack' && drops > 0) {
      this.ackDrops.set(messageId!, drops - 1);
      record.dropped = true;
      return;
    }
    try {
      await call();
      record.ok = true;
    } catch (error) {
      record.error = error;
      throw error;
    }
  }
}

function safeId(strategy: IdStrategy, delivery: Delivery): string | undefined {
  try {
    return resolveMessageId(strategy, delivery.envelope);
  } catch {
    return undefined;
  }
}
