/**
 * The outbox across a chain of services (lib/outboxChaos.mjs): orders on RabbitMQ →
 * consumer A writes a payment and publishes "payment made" through the outbox → the relay
 * sends it to SQS (fauxqs) → consumer B writes a receipt. Two processes of each role run;
 * 24 SIGKILLs at random hit consumers and relays over 10,000 orders. Counted from rows:
 * exactly one payment and one receipt per order.
 *
 * And the proof that the check can fail: consumer A sending the event to SQS from its
 * handler (the dual write, a fresh ID per send) doubles receipts under the same kills.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { runOutboxChaos } from './lib/outboxChaos.mjs';
import { hasPostgres, hasRabbit } from './support.js';

type OutboxChaosResult = Awaited<ReturnType<typeof runOutboxChaos>>;

async function outboxChaos(options: Parameters<typeof runOutboxChaos>[0]): Promise<OutboxChaosResult> {
  const logDir = mkdtempSync(join(tmpdir(), 'oncely-outbox-chaos-test-'));
  onTestFinished(({ task }) => {
    if (task.result?.state === 'pass') rmSync(logDir, { recursive: true, force: true });
    else console.log(`process logs kept in ${logDir}`);
  });
  const result = await runOutboxChaos({ ...options, logDir });
  const { timeline, ...summary } = result;
  console.log(JSON.stringify(summary, null, 2));
  return result;
}

describe.skipIf(!hasPostgres || !hasRabbit)(
  'chaos: the outbox carries exactly-once across two services',
  () => {
    it('10,000 orders, 24 SIGKILLs of consumers and relays: one payment and one receipt per order', async () => {
      const result = await outboxChaos({ orders: 10_000, kills: 24, seed: 17 });
      expect({
        lost: result.lost,
        doubled: result.doubled,
        lostIds: result.lostIds,
        doubledIds: result.doubledIds,
      }).toEqual({
        lost: 0,
        doubled: 0,
        lostIds: [],
        doubledIds: [],
      });
      expect(result.paymentRows).toBe(10_000);
      expect(result.receiptRows).toBe(10_000);
      expect(result.drained).toBe(true);
      expect(result.outbox).toEqual({ sent: 10_000 });
      expect(result.unexpectedExits, 'processes that died without being killed').toBe(0);
      expect(result.kills).toBe(24);
      // Every role was killed, or the run proves nothing about that role's crash.
      expect(result.killsBy.payments, 'kills of consumer A').toBeGreaterThan(0);
      expect(result.killsBy.relay, 'kills of the relay').toBeGreaterThan(0);
      expect(result.killsBy.receipts, 'kills of consumer B').toBeGreaterThan(0);
    });

    it('defect: publishing to the broker from the handler (no outbox) fails the same check', async () => {
      const result = await outboxChaos({
        orders: 1000,
        kills: 6,
        seed: 17,
        defect: 'direct-publish',
        killRoles: ['payments'],
      });
      expect(result.ok).toBe(false);
      // A kill after the send and before the commit: the redelivery sends the event again
      // under a new ID, and consumer B cannot tell it from a new payment.
      expect(result.doubled, 'orders with two receipts').toBeGreaterThan(0);
    });
  },
);
