/**
 * The relay's options are checked when it is created (#26 review). `backoff` was not: a
 * NaN, a missing or a non-numeric delay (`Number(process.env.UNSET)`) was accepted, and
 * then every round with a failed send threw "interval out of range" while marking it and
 * rolled back, so the round's rows, sent already, were sent again on every round (forever,
 * never dead-lettered).
 */
import { isOncelyError } from '@oncely/core';
import { describe, expect, it } from 'vitest';
import { createRelay, PostgresStore } from '../src/index.js';
import { connectionString } from './serverEnv.js';

// Never connected: the checks run before any SQL.
const store = new PostgresStore({ connectionString, schema: 'relay_options_never_used' });
const producers = { send: async () => [] };

function refusal(options: Record<string, unknown>): string {
  try {
    createRelay({ store, producers, listen: false, ...options });
  } catch (error) {
    return isOncelyError(error, 'CONFIG_INVALID') ? 'CONFIG_INVALID' : String(error);
  }
  return 'accepted';
}

describe('relay options', () => {
  it('refuses a backoff the relay could not compute a retry time from', () => {
    const cases: Array<[string, unknown]> = [
      ['NaN initialMs', { initialMs: Number.NaN }],
      ['string maxMs', { maxMs: 'x' }],
      ['negative initialMs', { initialMs: -1000 }],
      ['maxMs below initialMs', { initialMs: 5000, maxMs: 1000 }],
      ['multiplier below 1', { multiplier: -1 }],
      ['jitter above 1', { jitter: 1e12 }],
      ['not an object', 5],
    ];
    expect(cases.map(([what, backoff]) => `${what}: ${refusal({ backoff })}`)).toEqual(
      cases.map(([what]) => `${what}: CONFIG_INVALID`),
    );
  });

  it('takes the defaults for fields left undefined, and valid values as given', () => {
    expect(refusal({ backoff: { initialMs: undefined, maxMs: undefined } })).toBe('accepted');
    expect(refusal({ backoff: { initialMs: 0, maxMs: 0 } })).toBe('accepted');
    expect(refusal({ backoff: { initialMs: 200, maxMs: 5000, multiplier: 3, jitter: 0 } })).toBe('accepted');
  });

  it('refuses a non-integer batchSize, pollIntervalMs or maxAttempts', () => {
    for (const options of [
      { batchSize: 0 },
      { pollIntervalMs: Number.POSITIVE_INFINITY },
      { maxAttempts: 1.5 },
    ]) {
      expect(refusal(options), JSON.stringify(options)).toBe('CONFIG_INVALID');
    }
  });
});
