import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { ConsumerConfig, IdempotencyStore } from '../src/index.js';
import { ConfigError, loadConfig, validateConsumerConfig } from '../src/index.js';

// One check of field names for every way a config arrives: code (createConsumer calls
// validateConsumerConfig), a JSON file and the environment (loadConfig; `oncely doctor`
// calls loadConfig). A misspelt field must fail the same way everywhere, with the nearest
// known name and where the value came from; silently ignored, it runs at its default.
const store = { transaction: async () => {}, claim: async () => new Set() } as unknown as IdempotencyStore;
const dir = mkdtempSync(join(tmpdir(), 'oncely-config-names-'));

function configFile(content: Record<string, unknown>): string {
  const file = join(dir, `c${Math.random().toString(36).slice(2)}.json`);
  writeFileSync(file, JSON.stringify(content));
  return file;
}

function errorOf(fn: () => unknown): ConfigError {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigError);
    return error as ConfigError;
  }
  throw new Error('expected a ConfigError');
}

describe('a misspelt field', () => {
  it('in code: names it and the nearest field', () => {
    const error = errorOf(() =>
      validateConsumerConfig({
        name: 'p',
        broker: { type: 'memory' },
        store,
        handler: async () => {},
        concurency: 4,
      } as unknown as ConsumerConfig),
    );
    expect(error.field).toBe('concurency');
    expect(error.problem).toBe('is not a consumer option; did you mean concurrency?');
  });

  it('in a file: the same error, naming the file', () => {
    const file = configFile({ name: 'p', concurency: 4, broker: { type: 'memory' } });
    const error = errorOf(() => loadConfig({ env: {}, file }));
    expect(error.field).toBe(`concurency (from ${file})`);
    expect(error.problem).toBe('is not a consumer option; did you mean concurrency?');
  });

  it('nested in backoff or batch, in code and in a file', () => {
    const code = errorOf(() =>
      validateConsumerConfig({
        name: 'p',
        broker: { type: 'memory' },
        store,
        handler: async () => {},
        backoff: { initialMs: 10, maxMS: 100 },
      } as unknown as ConsumerConfig),
    );
    expect(code.field).toBe('backoff.maxMS');
    expect(code.problem).toBe('is not a backoff option; did you mean maxMs?');
    const file = configFile({
      name: 'p',
      concurrency: 2,
      batch: { size: 2, maxWait: 5 },
      broker: { type: 'memory' },
    });
    const fromFile = errorOf(() => loadConfig({ env: {}, file }));
    expect(fromFile.field).toBe(`batch.maxWait (from ${file})`);
    expect(fromFile.problem).toBe('is not a batch option; did you mean maxWaitMs?');
  });

  it('in the environment: the variable, with the nearest variable', () => {
    const error = errorOf(() =>
      loadConfig({ env: { ONCELY_NAME: 'p', ONCELY_BROKER_TYPE: 'memory', ONCELY_CONCURENCY: '4' } }),
    );
    expect(error.field).toBe('ONCELY_CONCURENCY');
    expect(error.problem).toBe('is not an Oncely variable; did you mean ONCELY_CONCURRENCY?');
  });

  it('far from every field: lists the known ones instead of guessing', () => {
    const file = configFile({ name: 'p', broker: { type: 'memory' }, somethingElseEntirely: 1 });
    const error = errorOf(() => loadConfig({ env: {}, file }));
    expect(error.problem).toMatch(/^is not a consumer option \(known: name, broker, .*concurrency/);
  });
});
