import { StoreReentrancyError, StoreUnavailableError } from '@oncely/core';
import { describe, expect, it } from 'vitest';
import { classifyPostgresError, SchemaVersionError } from '../src/index.js';

/** An error shaped like the ones pg and Node raise: a message plus a code. */
function coded(code: string, message = 'irrelevant text'): Error {
  return Object.assign(new Error(message), { code });
}

describe('classifyPostgresError', () => {
  it.each(['40001', '40P01', '55P03'])('%s is transient', (code) => {
    expect(classifyPostgresError(coded(code))).toBe('transient');
  });

  it.each([
    '08000',
    '08003',
    '08006',
    '08001',
    '08P01',
    '57P01',
    '57P02',
    '57P03',
    '53300',
    'ECONNREFUSED',
    'ECONNRESET',
    'EPIPE',
    'ETIMEDOUT',
    'EHOSTUNREACH',
    'ENOTFOUND',
  ])('%s is unavailable', (code) => {
    expect(classifyPostgresError(coded(code))).toBe('unavailable');
  });

  it.each(['23505', '23503', '42P01', '42601', '57014', '25P02', '22P02', 'ERR_SOMETHING'])(
    '%s is other',
    (code) => {
      expect(classifyPostgresError(coded(code))).toBe('other');
    },
  );

  it('never reads message text', () => {
    expect(classifyPostgresError(new Error('Connection terminated unexpectedly'))).toBe('other');
    expect(classifyPostgresError(new Error('deadlock detected'))).toBe('other');
    expect(classifyPostgresError(coded('23505', 'could not serialize access due to concurrent update'))).toBe(
      'other',
    );
    expect(classifyPostgresError('ECONNREFUSED')).toBe('other');
    expect(classifyPostgresError(undefined)).toBe('other');
  });

  it("treats core's StoreUnavailableError and a schema at the wrong version as unavailable", () => {
    expect(classifyPostgresError(new StoreUnavailableError('down'))).toBe('unavailable');
    expect(classifyPostgresError(new SchemaVersionError('oncely', 2, 1))).toBe('unavailable');
    expect(classifyPostgresError(new StoreReentrancyError('nested'))).toBe('other');
  });

  it('follows cause chains and AggregateErrors, outermost first', () => {
    expect(classifyPostgresError(new Error('wrapped', { cause: coded('40P01') }))).toBe('transient');
    expect(classifyPostgresError(new Error('a', { cause: new Error('b', { cause: coded('08006') }) }))).toBe(
      'unavailable',
    );
    const refused = Object.assign(new AggregateError([coded('ECONNREFUSED'), coded('ECONNREFUSED')], ''), {});
    expect(classifyPostgresError(refused)).toBe('unavailable');
    const cyclic = new Error('loop') as Error & { cause?: unknown };
    cyclic.cause = cyclic;
    expect(classifyPostgresError(cyclic)).toBe('other');
  });
});
