import { seededRandom } from '@oncely/memory';

/** The message body: one order to charge. */
export interface Order {
  orderId: string;
  amountCents: number;
}

/** The orders and the stream a producer publishes for them. */
export interface OrderStream {
  orders: Order[];
  /** Every publish in order; an order retried by the producer appears 2–3 times. */
  publishes: Order[];
  /** What charging each order exactly once comes to. */
  expectedTotalCents: number;
}

/**
 * Builds `count` orders with amounts from $5 to $500, and a publish stream in which
 * `duplicateShare` of the orders are published two or three times (a producer that
 * retried after a timeout), spread through the stream. Deterministic for a seed.
 *
 * @example
 * ```ts
 * const { publishes, expectedTotalCents } = orderStream(1000, { seed: 42, duplicateShare: 0.1 });
 * ```
 */
export function orderStream(count: number, options: { seed: number; duplicateShare: number }): OrderStream {
  const random = seededRandom(options.seed);
  const orders: Order[] = [];
  const publishes: Order[] = [];
  for (let i = 1; i <= count; i++) {
    const order = {
      orderId: `order-${String(i).padStart(6, '0')}`,
      amountCents: 500 + Math.floor(random() * 49_501),
    };
    orders.push(order);
    publishes.push(order);
    if (random() < options.duplicateShare) {
      const copies = random() < 0.5 ? 1 : 2;
      for (let c = 0; c < copies; c++) publishes.push(order);
    }
  }
  // Fisher–Yates: the retries arrive later in the stream, mixed with other orders.
  for (let i = publishes.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [publishes[i], publishes[j]] = [publishes[j]!, publishes[i]!];
  }
  const expectedTotalCents = orders.reduce((sum, order) => sum + order.amountCents, 0);
  return { orders, publishes, expectedTotalCents };
}
