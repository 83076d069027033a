/**
 * How a batch waits for the core: a free slot of the consumer's concurrency (reserved here,
 * synchronously, since every partition's batch asks at once) or the stored offsets, with a
 * heartbeat every `heartbeatInterval` meanwhile so the group keeps the member; and how
 * close() abandons those waits when handlers outlive it.
 */
import type { AdapterRuntime } from '@oncely/core';
import type { KafkaRecord as KafkaMessage } from './clientApi.js';

/**
 * Already fulfilled: raced after a promise, it wins only when that promise is still
 * pending (fulfilled promises' reactions run in the order they were raced).
 */
const NOT_YET = Promise.resolve('not-yet' as const);

/** The slots the Kafka adapter has taken from the core, and the waits close() may abandon. */
export class DispatchSlots {
  /** Records this adapter has dispatched (or reserved a slot for) that are not settled yet. */
  inFlight = 0;
  /** Wakes batches waiting for a slot when a dispatched record settles. */
  private slotWaiters: Array<() => void> = [];
  /** Set when close() gives up waiting for handlers: running batches return without them. */
  private abandoned = false;
  /** Ends each wait of `unlessAbandoned` at once; a wait removes its own entry when its work settles. */
  private readonly abandonWaiters = new Set<() => void>();

  /** @param heartbeatIntervalMs How often a wait heartbeats (the config's `heartbeatInterval`). */
  constructor(private readonly heartbeatIntervalMs: number) {}

  /**
   * Waits for `work`, heartbeating every `heartbeatInterval` so the group keeps this
   * member (a slow store must not get it evicted). Undefined when the batch must end
   * first, or close() gave up waiting.
   */
  async heartbeatWhile<T>(
    work: Promise<T>,
    heartbeat: () => Promise<void>,
    mustLeave: () => boolean,
  ): Promise<T | undefined> {
    const done = this.unlessAbandoned(work.then((value) => ({ value })));
    for (;;) {
      let timer: NodeJS.Timeout | undefined;
      const tick = new Promise<'tick'>((resolve) => {
        timer = setTimeout(() => resolve('tick'), this.heartbeatIntervalMs);
      });
      const result = await Promise.race([done, tick]);
      clearTimeout(timer);
      if (result === undefined) return undefined;
      if (result !== 'tick') return result.value;
      if (mustLeave()) return undefined;
      await heartbeat();
      if (mustLeave()) return undefined;
    }
  }

  /**
   * Waits until the core takes work (it holds new work back while the store is down, and
   * while every slot is busy), heartbeating meanwhile so the group keeps this member.
   * False once the batch must end: stopping, or a heartbeat saw a rebalance or the loss
   * of the membership. kafkajs rejoins only after every eachBatch returned, so a batch
   * that kept waiting here would hold the whole group's rebalance until this member is
   * evicted (rebalanceTimeout).
   */
  async waitForSlot(
    runtime: AdapterRuntime,
    heartbeat: () => Promise<void>,
    mustLeave: () => boolean,
  ): Promise<boolean> {
    let ready: Promise<number | 'freed'> = this.nextSlot(runtime);
    for (;;) {
      // Usually a slot is free and the answer already there: no heartbeat timer for that
      // (a timer per record was a fifth of the adapter's CPU per record).
      let result: number | 'freed' | 'tick' | 'not-yet' = await Promise.race([ready, NOT_YET]);
      if (result === 'not-yet') {
        let timer: NodeJS.Timeout | undefined;
        const tick = new Promise<'tick'>((resolve) => {
          timer = setTimeout(() => resolve('tick'), this.heartbeatIntervalMs);
        });
        result = await Promise.race([ready, tick]);
        clearTimeout(timer);
      }
      if (result === 'freed') {
        ready = this.nextSlot(runtime);
        continue;
      }
      if (result !== 'tick') {
        if (result <= 0) return false;
        // The core's whenReady() reserves nothing, and every partition's batch asks it:
        // reserve here, synchronously, so concurrent batches never exceed concurrency.
        if (this.inFlight < runtime.concurrency) {
          this.inFlight++;
          return true;
        }
        ready = this.nextSlot(runtime);
        continue;
      }
      if (mustLeave()) return false;
      await heartbeat();
      if (mustLeave()) return false;
    }
  }

  /** The core's answer, or 'freed' when one of our records settled while every slot was ours. */
  private nextSlot(runtime: AdapterRuntime): Promise<number | 'freed'> {
    if (this.inFlight < runtime.concurrency) return runtime.whenReady();
    return new Promise((resolve) => this.slotWaiters.push(() => resolve('freed')));
  }

  /**
   * With the consumer's `batch` option: slots for up to `batchSize - 1` more records of
   * the partition after `from`, taken only while free (never waited for), so a partition's
   * records run in one transaction. Stops at a record `offsets` mode would skip.
   */
  reserveMore(
    runtime: AdapterRuntime,
    messages: KafkaMessage[],
    from: number,
    storedNext: bigint | undefined,
  ): KafkaMessage[] {
    const more: KafkaMessage[] = [];
    if (runtime.batchSize === undefined) return more;
    for (let i = from; i < messages.length && more.length < runtime.batchSize - 1; i++) {
      if (this.inFlight >= runtime.concurrency) break;
      const message = messages[i]!;
      if (storedNext !== undefined && BigInt(message.offset) < storedNext) break;
      this.inFlight++;
      more.push(message);
    }
    return more;
  }

  freeSlots(count: number): void {
    this.inFlight -= count;
    this.wakeSlotWaiters();
  }

  /**
   * `work`'s result, or undefined as soon as close() abandons the handlers still running.
   * Not `Promise.race([work, abandoned])` with one promise that lives as long as the
   * adapter: every race leaves a reaction on that promise until it settles, two live
   * promises per record for the consumer's whole life (conformance scenario 18).
   */
  unlessAbandoned<T>(work: Promise<T>): Promise<T | undefined> {
    if (this.abandoned) {
      // Nobody waits for it any more: its failure must not become an unhandled rejection.
      work.catch(() => {});
      return Promise.resolve(undefined);
    }
    return new Promise<T | undefined>((resolve, reject) => {
      const giveUp = () => resolve(undefined);
      this.abandonWaiters.add(giveUp);
      work.then(
        (value) => {
          this.abandonWaiters.delete(giveUp);
          resolve(value);
        },
        (error: unknown) => {
          this.abandonWaiters.delete(giveUp);
          reject(error);
        },
      );
    });
  }

  /** close() gave up waiting: every running wait of `unlessAbandoned` ends now. */
  abandon(): void {
    this.abandoned = true;
    for (const giveUp of this.abandonWaiters) giveUp();
    this.abandonWaiters.clear();
  }

  wakeSlotWaiters(): void {
    for (const wake of this.slotWaiters.splice(0)) wake();
  }
}
