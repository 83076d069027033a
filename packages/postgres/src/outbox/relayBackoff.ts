import type { BackoffConfig } from '@oncely/core';
import { ConfigError } from '@oncely/core';

const DAY_MS = 24 * 3600_000;

/**
 * The relay's `backoff` option, checked as the consumer's is (integers of ms up to a day,
 * `maxMs >= initialMs`, `multiplier >= 1`, `jitter` from 0 to 1), a field left undefined
 * taking its default. Unchecked, a NaN or a string gave a NaN delay: marking a failed send
 * then threw ("interval out of range"), the round rolled back and its rows, already sent,
 * were sent again on every round, never dead-lettered.
 */
export function relayBackoff(backoff: unknown): BackoffConfig {
  if (backoff === undefined) return { initialMs: 1000, maxMs: 60_000 };
  if (typeof backoff !== 'object' || backoff === null || Array.isArray(backoff))
    throw new ConfigError('backoff', `must be an object; got ${String(backoff)}`);
  const given = backoff as Record<string, unknown>;
  const initialMs = milliseconds('backoff.initialMs', given.initialMs, 1000);
  const maxMs = milliseconds('backoff.maxMs', given.maxMs, Math.max(60_000, initialMs));
  if (maxMs < initialMs)
    throw new ConfigError('backoff.maxMs', `must be >= backoff.initialMs (${initialMs}); got ${maxMs}`);
  const config: BackoffConfig = { initialMs, maxMs };
  if (given.multiplier !== undefined) {
    if (
      typeof given.multiplier !== 'number' ||
      !(given.multiplier >= 1) ||
      !Number.isFinite(given.multiplier)
    )
      throw new ConfigError('backoff.multiplier', `must be a number >= 1; got ${String(given.multiplier)}`);
    config.multiplier = given.multiplier;
  }
  if (given.jitter !== undefined) {
    if (typeof given.jitter !== 'number' || !(given.jitter >= 0 && given.jitter <= 1))
      throw new ConfigError('backoff.jitter', `must be a number from 0 to 1; got ${String(given.jitter)}`);
    config.jitter = given.jitter;
  }
  return config;
}

function milliseconds(field: string, value: unknown, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 0 || value > DAY_MS)
    throw new ConfigError(field, `must be an integer of ms from 0 to ${DAY_MS}; got ${String(value)}`);
  return value;
}
