/**
 * The relay's backlog gauges, read through the OpenTelemetry SDK's in-memory exporter
 * (DELTA temporality: a collection shows only what its callbacks observed):
 * `oncely.outbox.pending` and `oncely.outbox.failed` (rows) and `oncely.outbox.lag` (the
 * oldest pending row's age, ms), on a real PostgreSQL server. A stats query that fails
 * observes nothing; before, the lag gauge observed a made-up 0 then. The batch callback
 * is on the meter only while the relay runs: before, it stayed registered after stop()
 * (the meter kept the stopped relay alive, idle behind a flag).
 */
import type { Logger, OutboxMessage, OutboxProducer, OutboxSendResult } from '@oncely/core';
import { publishInTransaction, silentLogger } from '@oncely/core';
import { waitFor } from '@oncely/testkit';
import type { MeterProvider as ApiMeterProvider } from '@opentelemetry/api';
import { metrics } from '@opentelemetry/api';
import {
  AggregationTemporality,
  InMemoryMetricExporter,
  MeterProvider,
  PeriodicExportingMetricReader,
} from '@opentelemetry/sdk-metrics';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRelay, PostgresStore } from '../src/index.js';
import { admin, cleanupAfterFile, connectionString, hasPostgres, uniqueSchema } from './serverEnv.js';

const { schemas, stores } = cleanupAfterFile();

const exporter = new InMemoryMetricExporter(AggregationTemporality.DELTA);
const reader = new PeriodicExportingMetricReader({ exporter, exportIntervalMillis: 3_600_000 });
const meterProvider = new MeterProvider({ readers: [reader] });

/**
 * The SDK's meter provider, recording which batch callbacks were added and removed: a
 * callback left registered but idle observes nothing either, so only this shows a missing
 * `removeBatchObservableCallback`.
 */
function recordingMeterProvider(inner: ApiMeterProvider) {
  /** Per callback, how many times it is registered now (an add counts, a remove undoes one). */
  const live = new Map<unknown, number>();
  const provider: ApiMeterProvider = {
    getMeter(name, version, options) {
      const meter = inner.getMeter(name, version, options);
      return new Proxy(meter, {
        get(target, property) {
          if (property === 'addBatchObservableCallback')
            return (callback: unknown, observables: unknown) => {
              live.set(callback, (live.get(callback) ?? 0) + 1);
              return target.addBatchObservableCallback(callback as never, observables as never);
            };
          if (property === 'removeBatchObservableCallback')
            return (callback: unknown, observables: unknown) => {
              const count = live.get(callback) ?? 0;
              if (count > 1) live.set(callback, count - 1);
              else live.delete(callback);
              return target.removeBatchObservableCallback(callback as never, observables as never);
            };
          const value = Reflect.get(target, property, target);
          return typeof value === 'function' ? value.bind(target) : value;
        },
      });
    },
  };
  return {
    provider,
    /** Batch callbacks on the meter now, a callback added twice counted twice. */
    registered: () => [...live.values()].reduce((sum, count) => sum + count, 0),
  };
}
const recording = recordingMeterProvider(meterProvider);

// The relay takes the global meter provider (it has no telemetry option).
beforeAll(() => {
  metrics.setGlobalMeterProvider(recording.provider);
});
afterAll(async () => {
  await meterProvider.shutdown();
  metrics.disable();
});

/** The relay's gauge values of this collection, by name (absent: nothing observed). */
async function relayGauges(relay: string): Promise<Record<string, number>> {
  exporter.reset();
  await reader.forceFlush();
  const values: Record<string, number> = {};
  for (const resource of exporter.getMetrics())
    for (const scope of resource.scopeMetrics)
      for (const metric of scope.metrics)
        for (const point of metric.dataPoints)
          if (point.attributes.relay === relay && metric.descriptor.name !== 'oncely.outbox.messages')
            values[metric.descriptor.name] = point.value as number;
  return values;
}

/** Sends to `ok`; refuses `gone` for good (dead-lettered at once) and `flaky` for now (retried). */
class SplitProducer implements OutboxProducer {
  async send(messages: readonly OutboxMessage[]): Promise<OutboxSendResult[]> {
    return messages.map((m) =>
      m.destination === 'gone'
        ? { ok: false, permanent: true, error: new Error('no such queue') }
        : m.destination === 'flaky'
          ? { ok: false, error: new Error('broker busy') }
          : { ok: true },
    );
  }
}

/** A logger keeping the lines about the relay's gauges, by level. */
function gaugeLogger() {
  const lines: Array<{ level: keyof Logger; message: string; fields?: Record<string, unknown> }> = [];
  const at =
    (level: keyof Logger) =>
    (message: string, fields?: Record<string, unknown>): void => {
      if (message.startsWith('outbox relay gauges')) lines.push({ level, message, fields });
    };
  const logger: Logger = { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') };
  return { logger, of: (level: keyof Logger) => lines.filter((line) => line.level === level) };
}

/** A migrated schema with one pending row, and a relay on it, not started. */
async function relayWithRow(prefix: string, logger: Logger = silentLogger, lockTimeoutMs?: number) {
  const schema = uniqueSchema(prefix);
  schemas.push(schema);
  const store = new PostgresStore({ connectionString, schema, logger: silentLogger, lockTimeoutMs });
  stores.push(store);
  await store.migrate();
  const name = `gauges-${schema}`;
  const relay = createRelay({
    store,
    name,
    producers: new SplitProducer(),
    pollIntervalMs: 100,
    backoff: { initialMs: 600_000, maxMs: 600_000 },
    logger,
  });
  await store.transaction((tx) => publishInTransaction(store, tx, 'flaky', { i: 0 }, { id: 'flaky-0' }));
  return { schema, store, name, relay };
}

/** {@link relayWithRow}, started (stop it after the test). */
async function runningRelay(prefix: string, logger: Logger = silentLogger, lockTimeoutMs?: number) {
  const setup = await relayWithRow(prefix, logger, lockTimeoutMs);
  await setup.relay.start();
  return setup;
}

describe.skipIf(!hasPostgres)('relay backlog gauges', () => {
  it('report pending and failed rows and the lag; nothing when the stats query fails', async () => {
    const schema = uniqueSchema('relay_gauges');
    schemas.push(schema);
    const store = new PostgresStore({ connectionString, schema, logger: silentLogger });
    stores.push(store);
    await store.migrate();
    const name = `gauges-${schema}`;
    const relay = createRelay({
      store,
      name,
      producers: new SplitProducer(),
      pollIntervalMs: 100,
      // The flaky rows wait out a long backoff: pending, with a growing lag.
      backoff: { initialMs: 600_000, maxMs: 600_000 },
      logger: silentLogger,
    });
    const errors: unknown[] = [];
    relay.on('error', (error) => errors.push(error));
    const written = Date.now();
    // Each row under a key of its own. An unkeyed row is claimed only once it is below the
    // cluster-wide snapshot xmin, so any other session's open transaction on this shared
    // server held all six back: a session another suite cut off mid-transaction stays open
    // up to the server's idle_in_transaction_session_timeout (60 s), and this wait ran out
    // at 30 s with six pending rows (Node 22 rerun, runs C and of stop 41). A keyed row
    // takes its order from its key's number instead: this test is about the gauges, not
    // about that rule.
    await store.transaction(async (tx) => {
      for (let i = 0; i < 3; i++)
        await publishInTransaction(store, tx, 'gone', { i }, { id: `gone-${i}`, key: `gone-${i}` });
      for (let i = 0; i < 2; i++)
        await publishInTransaction(store, tx, 'flaky', { i }, { id: `flaky-${i}`, key: `flaky-${i}` });
      await publishInTransaction(store, tx, 'ok', { i: 0 }, { id: 'ok-0', key: 'ok-0' });
    });
    await relay.start();
    try {
      // The last collection and the rows, named if the wait runs out.
      let last: Record<string, number> = {};
      const values = await waitFor(
        async () => {
          last = await relayGauges(name);
          return last['oncely.outbox.failed'] === 3 && last['oncely.outbox.lag']! >= 20 ? last : undefined;
        },
        { timeoutMs: 30_000, description: '3 failed rows and a lag of 20 ms or more' },
      ).catch(async (error: unknown) => {
        const { rows } = await admin.query(
          `SELECT status, count(*)::int AS n FROM "${schema}".outbox GROUP BY status ORDER BY status`,
        );
        throw new Error(
          `${String(error)}; last collection: ${JSON.stringify(last)}; rows by status: ${JSON.stringify(rows)}; ` +
            `relay errors: ${errors.map(String).join(' | ') || 'none'}`,
        );
      });
      expect(values['oncely.outbox.pending']).toBe(2);
      expect(values['oncely.outbox.lag']).toBeLessThanOrEqual(Date.now() - written + 1000); // clocks of one host

      await store.outbox.discard({ all: true }, { by: 'gauge-test' });
      expect((await relayGauges(name))['oncely.outbox.failed']).toBe(0);

      // The table is gone under the relay: its rounds fail, and so does the gauges' query.
      await admin.query(`ALTER TABLE "${schema}".outbox RENAME TO outbox_gone`);
      await waitFor(() => errors.length > 0, { timeoutMs: 30_000, description: 'a failed round' });
      expect(await relayGauges(name)).toEqual({});
      await admin.query(`ALTER TABLE "${schema}".outbox_gone RENAME TO outbox`);
    } finally {
      await relay.stop();
    }
    // Stopped: nothing observed.
    expect(await relayGauges(name)).toEqual({});
  });

  it('warn once when the stats query starts failing, not at every collection, and log the recovery once', async () => {
    const logs = gaugeLogger();
    const { schema, name, relay } = await runningRelay('relay_gauge_logs', logs.logger);
    try {
      await waitFor(async () => (await relayGauges(name))['oncely.outbox.pending'] === 1, {
        timeoutMs: 30_000,
        description: 'a pending row',
      });
      await admin.query(`ALTER TABLE "${schema}".outbox RENAME TO outbox_gone`);
      for (let i = 0; i < 3; i++) expect(await relayGauges(name)).toEqual({});
      expect(logs.of('warn')).toHaveLength(1);
      expect(logs.of('warn')[0]!.fields).toMatchObject({ relay: name });
      expect(String(logs.of('warn')[0]!.fields?.error)).toContain('outbox');
      expect(logs.of('info')).toHaveLength(0);
      await admin.query(`ALTER TABLE "${schema}".outbox_gone RENAME TO outbox`);
      expect((await relayGauges(name))['oncely.outbox.pending']).toBe(1);
      expect((await relayGauges(name))['oncely.outbox.pending']).toBe(1);
      expect(logs.of('info')).toHaveLength(1);
      expect(logs.of('warn')).toHaveLength(1);
    } finally {
      await relay.stop();
    }
  });

  it('give up on a locked table within the bound, the server cutting the query off, and report again once it is free', async () => {
    // A lock_timeout (the store's, 5 s by default) longer than the gauges' statement
    // timeout: only the statement timeout can end the query's wait here.
    const { schema, name, relay } = await runningRelay('relay_gauge_lock', silentLogger, 30_000);
    const holder = await admin.connect();
    try {
      await waitFor(async () => (await relayGauges(name))['oncely.outbox.pending'] === 1, {
        timeoutMs: 30_000,
        description: 'a pending row',
      });
      await holder.query('BEGIN');
      await holder.query(`LOCK TABLE "${schema}".outbox IN ACCESS EXCLUSIVE MODE`);
      // The lock is held until after this read: an unbounded collection would never come
      // back (the test's own timeout fails it), so no wall-clock check is needed here, and
      // none that a busy machine could overrun.
      expect(await relayGauges(name)).toEqual({});
      // And it was the server that ended the query: none of it waits on the lock now (the
      // collection's own timer alone would have left it queued behind the lock).
      const { rows } = await admin.query<{ waiting: number }>(
        `SELECT count(*)::integer AS waiting FROM pg_stat_activity
         WHERE pid <> pg_backend_pid() AND wait_event_type = 'Lock'
           AND query LIKE '%oldest_pending_ms%' AND query LIKE $1`,
        [`%"${schema}"%`],
      );
      expect(rows[0]!.waiting).toBe(0);
      await holder.query('COMMIT');
      const values = await waitFor(
        async () => {
          const now = await relayGauges(name);
          return now['oncely.outbox.pending'] === 1 ? now : undefined;
        },
        { timeoutMs: 30_000, description: 'the gauges again once the lock is released' },
      );
      expect(values['oncely.outbox.failed']).toBe(0);
    } finally {
      await holder.query('ROLLBACK').catch(() => {});
      holder.release();
      await relay.stop();
    }
  }, 60_000);

  it('are on the meter only while the relay runs: removed at stop(), added once again at a restart', async () => {
    // Callbacks an earlier test of this file may have left (counted, not assumed absent).
    const before = recording.registered();
    const { name, relay } = await runningRelay('relay_gauge_cycle');
    try {
      expect(recording.registered()).toBe(before + 1);
      await waitFor(async () => (await relayGauges(name))['oncely.outbox.pending'] === 1, {
        timeoutMs: 30_000,
        description: 'a pending row',
      });
      await relay.stop();
      expect(recording.registered(), 'callbacks on the meter after stop()').toBe(before);
      await relay.start();
      expect(recording.registered(), 'callbacks on the meter after a restart').toBe(before + 1);
      expect((await relayGauges(name))['oncely.outbox.pending']).toBe(1);
    } finally {
      await relay.stop();
    }
    expect(recording.registered(), 'callbacks on the meter after the second stop()').toBe(before);
  });

  it('are not added by a start() that a stop() overtook', async () => {
    const before = recording.registered();
    const { name, relay } = await relayWithRow('relay_gauge_overtaken');
    const starting = relay.start();
    await relay.stop();
    await starting;
    expect(recording.registered()).toBe(before);
    expect(await relayGauges(name)).toEqual({});
  });

  it('are removed when store.close() ends the relay', async () => {
    const before = recording.registered();
    const { store, relay } = await runningRelay('relay_gauge_closed');
    const ended = new Promise<unknown>((resolve) => relay.once('error', resolve));
    expect(recording.registered()).toBe(before + 1);
    await store.close();
    expect(String(await ended)).toMatch(/store was closed while the relay was running/);
    expect(recording.registered()).toBe(before);
    await relay.stop();
  });
});
