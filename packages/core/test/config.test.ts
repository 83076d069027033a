import { spawnSync } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { ConsumerConfig, IdempotencyStore } from '../src/index.js';
import {
  ADAPTER_PACKAGES,
  brokerOptionSource,
  ConfigError,
  labelBrokerError,
  loadConfig,
  validateConsumerConfig,
} from '../src/index.js';

const store = { transaction: async () => {}, claim: async () => new Set() } as unknown as IdempotencyStore;
const valid = (): ConsumerConfig => ({
  name: 'payments',
  broker: { type: 'memory' },
  store,
  handler: async () => {},
});

function fieldOf(fn: () => unknown): string {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigError);
    return (error as ConfigError).field;
  }
  throw new Error('expected a ConfigError');
}

describe('validateConsumerConfig', () => {
  it('accepts a minimal config', () => {
    expect(() => validateConsumerConfig(valid())).not.toThrow();
  });

  it.each([
    [{ name: '' }, 'name'],
    [{ concurrency: 0 }, 'concurrency'],
    [{ concurrency: 2.5 }, 'concurrency'],
    [{ maxAttempts: -1 }, 'maxAttempts'],
    [{ mode: 'exactly-once' }, 'mode'],
    [{ handlerTimeoutMs: '30s' }, 'handlerTimeoutMs'],
    [{ stopGraceMs: -1 }, 'stopGraceMs'],
    [{ stopGraceMs: 1.5 }, 'stopGraceMs'],
    [{ backoff: { initialMs: 5000, maxMs: 10 } }, 'backoff.maxMs'],
    [{ backoff: { jitter: 3 } }, 'backoff.jitter'],
    [{ idStrategy: { attribute: '' } }, 'idStrategy'],
    [{ idStrategy: 'magic' }, 'idStrategy'],
    [{ bodyFormat: 'xml' }, 'bodyFormat'],
    [{ handler: 'nope' }, 'handler'],
    [{ store: {} }, 'store'],
    [{ concurency: 3 }, 'concurency'],
    [{ broker: undefined }, 'broker'],
  ])('names the offending field for %j', (patch, field) => {
    expect(fieldOf(() => validateConsumerConfig({ ...valid(), ...patch } as ConsumerConfig))).toBe(field);
  });

  it('names every valid broker type when the type is unknown', () => {
    try {
      validateConsumerConfig({ ...valid(), broker: { type: 'nats' } });
      expect.unreachable();
    } catch (error) {
      expect((error as ConfigError).field).toBe('broker.type');
      for (const type of Object.keys(ADAPTER_PACKAGES)) expect((error as Error).message).toContain(type);
      expect((error as Error).message).toContain('got "nats"');
    }
  });
});

describe('loadConfig', () => {
  it('builds a config from environment variables', () => {
    const config = loadConfig({
      env: {
        ONCELY_NAME: 'orders',
        ONCELY_CONCURRENCY: '8',
        ONCELY_ID_ATTRIBUTE: 'x-id',
        ONCELY_BROKER_TYPE: 'sqs',
        ONCELY_BROKER_QUEUE_URL: 'http://localhost/q',
        ONCELY_BROKER_WAIT_TIME_SECONDS: '5',
        ONCELY_BACKOFF_INITIAL_MS: '200',
        ONCELY_STOP_GRACE_MS: '15000',
      },
    });
    expect(config).toEqual({
      name: 'orders',
      concurrency: 8,
      stopGraceMs: 15_000,
      idStrategy: { attribute: 'x-id' },
      broker: { type: 'sqs', queueUrl: 'http://localhost/q', waitTimeSeconds: 5 },
      backoff: { initialMs: 200 },
    });
  });

  it('reads the payload fingerprint options and names the variable of a bad value', () => {
    const base = { ONCELY_NAME: 'x', ONCELY_BROKER_TYPE: 'memory' };
    expect(
      loadConfig({
        env: { ...base, ONCELY_PAYLOAD_FINGERPRINT: 'true', ONCELY_ON_PAYLOAD_MISMATCH: 'dead-letter' },
      }),
    ).toMatchObject({ payloadFingerprint: true, onPayloadMismatch: 'dead-letter' });
    expect(() => loadConfig({ env: { ...base, ONCELY_PAYLOAD_FINGERPRINT: 'yes' } })).toThrow(
      /ONCELY_PAYLOAD_FINGERPRINT must be true or false, got "yes"/,
    );
    expect(() => loadConfig({ env: { ...base, ONCELY_ON_PAYLOAD_MISMATCH: 'drop' } })).toThrow(
      /onPayloadMismatch \(from ONCELY_ON_PAYLOAD_MISMATCH\) must be one of skip, dead-letter; got "drop"/,
    );
  });

  it('lets the environment swap the broker of a file config', () => {
    const dir = mkdtempSync(join(tmpdir(), 'oncely-config-'));
    const file = join(dir, 'oncely.json');
    writeFileSync(
      file,
      JSON.stringify({ name: 'orders', broker: { type: 'sqs', queueUrl: 'http://q' }, maxAttempts: 3 }),
    );
    expect(loadConfig({ env: { ONCELY_CONFIG_FILE: file } }).broker).toEqual({
      type: 'sqs',
      queueUrl: 'http://q',
    });
    const swapped = loadConfig({
      env: { ONCELY_CONFIG_FILE: file, ONCELY_BROKER_TYPE: 'rabbitmq', ONCELY_BROKER_QUEUE: 'orders' },
    });
    expect(swapped.broker).toEqual({ type: 'rabbitmq', queue: 'orders' });
    expect(swapped.maxAttempts).toBe(3);
  });

  it('names the environment variable behind a bad value', () => {
    expect(() =>
      loadConfig({ env: { ONCELY_NAME: 'x', ONCELY_BROKER_TYPE: 'memory', ONCELY_CONCURRENCY: 'ten' } }),
    ).toThrow(/ONCELY_CONCURRENCY must be a number, got "ten"/);
    expect(() =>
      loadConfig({ env: { ONCELY_NAME: 'x', ONCELY_BROKER_TYPE: 'memory', ONCELY_CONCURRENCY: '0' } }),
    ).toThrow(/concurrency \(from ONCELY_CONCURRENCY\) must be an integer from 1/);
    expect(() => loadConfig({ env: { ONCELY_NAME: 'x', ONCELY_BROKER_TYPE: 'kafak' } })).toThrow(
      /broker\.type \(from ONCELY_BROKER_TYPE\) must be one of memory, sqs, servicebus, pubsub, rabbitmq, kafka; got "kafak"/,
    );
  });

  it('refuses an unknown ONCELY_ variable, naming it and the nearest known one', () => {
    const base = { ONCELY_NAME: 'x', ONCELY_BROKER_TYPE: 'memory' };
    expect(fieldOf(() => loadConfig({ env: { ...base, ONCELY_CONCURENCY: '8' } }))).toBe('ONCELY_CONCURENCY');
    expect(() => loadConfig({ env: { ...base, ONCELY_CONCURENCY: '8' } })).toThrow(
      /ONCELY_CONCURENCY is not an Oncely variable; did you mean ONCELY_CONCURRENCY\?/,
    );
    expect(() => loadConfig({ env: { ...base, ONCELY_BROKR_TYPE: 'sqs' } })).toThrow(
      /did you mean ONCELY_BROKER_TYPE\?/,
    );
    expect(() => loadConfig({ env: { ...base, ONCELY_FLUX_CAPACITOR: '1' } })).toThrow(
      /ONCELY_FLUX_CAPACITOR is not an Oncely variable \(known: ONCELY_NAME, .*ONCELY_BROKER_<OPTION>\)/,
    );
    // Variables of other programs, the store's schema and broker options are fine.
    expect(
      loadConfig({ env: { ...base, ONCELY_SCHEMA: 'billing', ONCELY_BROKER_QUEUE: 'q', PATH: '/bin' } }),
    ).toEqual({ name: 'x', broker: { type: 'memory', queue: 'q' } });
  });

  it('accepts the memory broker from the environment', () => {
    expect(loadConfig({ env: { ONCELY_NAME: 'x', ONCELY_BROKER_TYPE: 'memory' } }).broker).toEqual({
      type: 'memory',
    });
  });

  it('remembers where each broker option came from, for the adapter to name', () => {
    const dir = mkdtempSync(join(tmpdir(), 'oncely-config-'));
    const file = join(dir, 'oncely.json');
    writeFileSync(file, JSON.stringify({ name: 'orders', broker: { type: 'sqs', queueUrl: 'http://q' } }));
    const { broker } = loadConfig({
      env: { ONCELY_CONFIG_FILE: file, ONCELY_BROKER_WAIT_TIME_SECONDS: '99' },
    });
    expect(brokerOptionSource(broker, 'broker.waitTimeSeconds')).toBe('ONCELY_BROKER_WAIT_TIME_SECONDS');
    expect(brokerOptionSource(broker, 'broker.queueUrl')).toBe(file);
    const labelled = labelBrokerError(new ConfigError('broker.waitTimeSeconds', 'must be 0 to 20'), broker);
    expect((labelled as Error).message).toBe(
      'Invalid Oncely config: broker.waitTimeSeconds (from ONCELY_BROKER_WAIT_TIME_SECONDS) must be 0 to 20',
    );
  });

  it('rejects a file that is not JSON, and code-only fields in a file', () => {
    const dir = mkdtempSync(join(tmpdir(), 'oncely-config-'));
    const bad = join(dir, 'bad.json');
    writeFileSync(bad, '{ name: ');
    expect(() => loadConfig({ env: {}, file: bad })).toThrow(/ONCELY_CONFIG_FILE is not valid JSON/);
    const withStore = join(dir, 'store.json');
    writeFileSync(withStore, JSON.stringify({ name: 'x', broker: { type: 'memory' }, store: {} }));
    expect(() => loadConfig({ env: {}, file: withStore })).toThrow(/store cannot come from a file/);
  });
});

describe('createConsumer', () => {
  it('names the package to install when the adapter is missing', () => {
    // Every adapter is installed in this repository, so the check runs in an application
    // of its own: a folder with nothing but @oncely/core (this build) in node_modules.
    const app = mkdtempSync(join(tmpdir(), 'oncely-app-'));
    const core = join(app, 'node_modules', '@oncely', 'core');
    mkdirSync(core, { recursive: true });
    cpSync(join(import.meta.dirname, '..', 'dist'), join(core, 'dist'), { recursive: true });
    cpSync(join(import.meta.dirname, '..', 'package.json'), join(core, 'package.json'));
    // Its one dependency, as npm would install it beside it.
    const api = join('node_modules', '@opentelemetry', 'api');
    cpSync(join(import.meta.dirname, '..', '..', '..', api), join(app, api), { recursive: true });
    writeFileSync(join(app, 'package.json'), '{ "type": "module" }');
    const script = `
      import { createConsumer, isOncelyError } from '@oncely/core';
      const store = { transaction() {}, claim() {}, ping() {}, classifyError() {} };
      const error = await createConsumer({ name: 'x', broker: { type: 'servicebus' }, store, handler: async () => {} }).catch((e) => e);
      console.log(JSON.stringify({ name: error.constructor.name, code: isOncelyError(error) ? error.code : null, message: error.message }));`;
    const run = spawnSync(process.execPath, ['--input-type=module', '-e', script], {
      cwd: app,
      encoding: 'utf8',
    });
    expect(run.stderr).toBe('');
    const error = JSON.parse(run.stdout) as { name: string; code: string; message: string };
    expect(error.name).toBe('AdapterNotInstalledError');
    expect(error.code).toBe('ADAPTER_NOT_INSTALLED');
    expect(error.message).toContain('npm install @oncely/servicebus');
  });
});

describe('batch config', () => {
  it('needs a size within concurrency, in transactional mode', () => {
    expect(() => validateConsumerConfig({ ...valid(), concurrency: 10, batch: { size: 10 } })).not.toThrow();
    expect(fieldOf(() => validateConsumerConfig({ ...valid(), concurrency: 4, batch: { size: 10 } }))).toBe(
      'batch.size',
    );
    expect(fieldOf(() => validateConsumerConfig({ ...valid(), batch: {} as { size: number } }))).toBe(
      'batch.size',
    );
    expect(
      fieldOf(() =>
        validateConsumerConfig({ ...valid(), concurrency: 4, mode: 'leased', batch: { size: 2 } }),
      ),
    ).toBe('batch');
  });
});
