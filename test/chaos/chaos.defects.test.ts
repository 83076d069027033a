/** The proof that the chaos check can fail: broken consumers; see chaos.test.ts. */
import { describe, expect, it } from 'vitest';
import { chaos, hasPostgres } from './support.js';

describe.skipIf(!hasPostgres)('chaos: the check fails for a broken consumer', () => {
  it('acking before the commit loses orders (memory broker)', async () => {
    const result = await chaos('memory', { messages: 300, kills: 3, defect: 'ack-before-commit' });
    expect(result.ok).toBe(false);
    expect(result.lost, 'orders lost (acked, killed before the commit)').toBeGreaterThan(0);
  });

  it('charging without the idempotency key doubles charges (memory broker)', async () => {
    const result = await chaos('memory', { messages: 300, kills: 3, defect: 'no-idempotency-key' });
    expect(result.ok).toBe(false);
    // A run redone after a kill or a lost lease charges again: the provider's ledger has
    // two charges for the order, the database still one row.
    expect(result.doubled, 'orders charged twice').toBeGreaterThan(0);
    expect(result.lost, 'orders lost').toBe(0);
  });

  it('committing the marker separately loses orders (SQS, real processes)', async () => {
    const result = await chaos('sqs', {
      messages: 300,
      kills: 3,
      defect: 'marker-separate-commit',
      brokerRestart: false,
    });
    expect(result.ok).toBe(false);
    expect(result.lost, 'orders lost (marker committed, work killed before its commit)').toBeGreaterThan(0);
  });
});
