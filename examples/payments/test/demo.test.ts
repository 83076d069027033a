import { silentLogger } from '@oncely/core';
import { describe, expect, it } from 'vitest';
import { runDemo } from '../src/runDemo.js';

describe('payments demo', () => {
  it('Oncely charges each order exactly once while the naive consumer overcharges', async () => {
    const result = await runDemo({ messages: 150, seed: 7, visibilityTimeoutMs: 300, logger: silentLogger });

    expect(result.drained).toBe(true);
    // The fault pattern really produced redeliveries and duplicates on both sides...
    expect(result.producerDuplicates).toBeGreaterThan(0);
    expect(result.oncely.deliveries).toBeGreaterThan(result.published);
    expect(result.naive.deliveries).toBeGreaterThan(result.published);
    // ...which the naive consumer paid for again, and Oncely skipped.
    expect(result.naive.totalChargedCents).toBeGreaterThan(result.expectedTotalCents);
    expect(result.oncely.duplicatesSkipped).toBe(result.oncely.deliveries - result.orders);
    expect(result.oncely.totalChargedCents).toBe(result.expectedTotalCents);
    expect(result.oncely.charges).toBe(150);
    expect(result.oncely.paymentRows).toBe(150);
    expect(result.oncely.distinctPaymentOrders).toBe(150);
    expect(result.ok).toBe(true);
  });
});
