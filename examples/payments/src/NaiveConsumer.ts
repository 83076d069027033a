import type { MemoryBroker, MemoryDelivery } from '@oncely/memory';
import { requestCharge } from './chargeClient.js';
import type { Order } from './orders.js';

/**
 * The consumer most code bases start with: receive, charge over HTTP, ack. No record of
 * what was processed and no idempotency key, so every redelivery (a lost ack, a duplicate
 * delivery) and every producer retry charges the card again.
 *
 * @example
 * ```ts
 * const naive = new NaiveConsumer(broker, 'payments.naive', provider.url, 8);
 * naive.start();
 * await naive.stop();
 * ```
 */
export class NaiveConsumer {
  /** Deliveries received, redeliveries included. */
  deliveries = 0;
  private readonly stopping = new AbortController();
  private loop: Promise<void> | undefined;

  constructor(
    private readonly broker: MemoryBroker,
    private readonly queue: string,
    /** The payment provider's base URL. */
    private readonly providerUrl: string,
    private readonly concurrency: number,
  ) {}

  start(): void {
    this.loop ??= this.run();
  }

  async stop(): Promise<void> {
    this.stopping.abort();
    await this.loop;
  }

  private async run(): Promise<void> {
    const inFlight = new Set<Promise<void>>();
    while (!this.stopping.signal.aborted) {
      while (inFlight.size >= this.concurrency) await Promise.race(inFlight);
      let batch: MemoryDelivery[];
      try {
        batch = await this.broker.receive(this.queue, {
          max: this.concurrency - inFlight.size,
          waitMs: 5000,
          signal: this.stopping.signal,
        });
      } catch {
        break; // The broker was closed under us.
      }
      for (const delivery of batch) {
        this.deliveries++;
        const work: Promise<void> = this.handle(delivery).finally(() => inFlight.delete(work));
        inFlight.add(work);
      }
    }
    await Promise.allSettled(inFlight);
  }

  private async handle(delivery: MemoryDelivery): Promise<void> {
    const order = delivery.body as Order;
    try {
      await requestCharge(this.providerUrl, order, { account: NAIVE_ACCOUNT });
      await this.broker.ack(delivery.receipt);
    } catch {
      // Give it back for another try; a stale receipt means it is already back.
      await this.broker.nack(delivery.receipt).catch(() => {});
    }
  }
}

/** The provider account the naive consumer charges. */
export const NAIVE_ACCOUNT = 'naive';
