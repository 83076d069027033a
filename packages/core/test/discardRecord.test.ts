import { describe, expect, it } from 'vitest';
import { toDiscardRecord } from '../src/index.js';

// The one mapping of a dead_letter_discards row to a DiscardRecord, shared by the
// PostgreSQL and MySQL stores (it was written out in each).
describe('toDiscardRecord', () => {
  const at = new Date('2026-03-01T10:00:00.000Z');

  it('maps the columns, keeping an error when the row has one', () => {
    expect(
      toDiscardRecord('payments', 'm-1', {
        reason: 'max-attempts',
        error: 'timeout',
        discarded_by: 'alice',
        discarded_at: at,
      }),
    ).toEqual({
      consumer: 'payments',
      messageId: 'm-1',
      reason: 'max-attempts',
      error: 'timeout',
      discardedBy: 'alice',
      discardedAt: at,
    });
  });

  it('leaves error out for a NULL column, and makes discarded_at a Date of its own', () => {
    const record = toDiscardRecord('payments', 'm-2', {
      reason: 'invalid-body',
      error: null,
      discarded_by: 'bob',
      discarded_at: at,
    });
    expect(record).not.toHaveProperty('error');
    expect(record.discardedAt).toEqual(at);
    expect(record.discardedAt).not.toBe(at);
  });
});
