import { randomUUID } from 'node:crypto';
import { type AdapterLease, Consumer, isOncelyError, silentLogger } from '@oncely/core';
import { MemoryAdapter, resolveMemoryConfig } from '@oncely/memory';
import { PostgresStore } from '@oncely/postgres';
import { afterEach, describe, expect, it } from 'vitest';
import { type Cleanups, newBroker } from './support.js';

// The lease keeper stops renewing at the broker's cap on the total lease (SQS 12 h,
// Pub/Sub maxExtensionTime: AdapterLease.maxTotalMs). The handler's signal must abort
// then, while the last lease still holds — not at the keeper's next tick, up to half a
// lease after the broker had handed the message to someone else.

const DATABASE_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

/** PostgreSQL answers at DATABASE_URL; with CI=true a missing server fails the file instead of skipping it. */
async function serverAnswers(): Promise<boolean> {
  // A schema of its own that is never migrated: the answer 'not migrated' comes from the
  // server, so it answers. (The default schema was probed before; whether another suite had
  // migrated it yet decided this file's fate: CI of 5e3adf7, SchemaVersionError.)
  const schema = `oncely_memory_probe_${randomUUID().replaceAll('-', '').slice(0, 10)}`;
  const probe = new PostgresStore({ connectionString: DATABASE_URL, schema, logger: silentLogger });
  try {
    await probe.ping();
    return true;
  } catch (error) {
    if (isOncelyError(error, 'SCHEMA_NOT_MIGRATED')) return true;
    if (process.env.CI === 'true') throw error;
    return false;
  } finally {
    await probe.close().catch(() => {});
  }
}
const hasServer = await serverAnswers();

const cleanups: Cleanups = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/**
 * A migrated store in a schema of its own on the PostgreSQL server: the test is about
 * timing, and the embedded store took 40 s to start on a loaded machine.
 */
async function serverStore(): Promise<PostgresStore> {
  const schema = `oncely_memory_cap_${randomUUID().replaceAll('-', '').slice(0, 10)}`;
  const store = new PostgresStore({
    connectionString: DATABASE_URL,
    schema,
    logger: silentLogger,
  });
  cleanups.push(async () => {
    await store.transaction((tx) => tx.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`));
    await store.close();
  });
  await store.migrate();
  return store;
}

/** The memory adapter with a cap on the total lease, as SQS and Pub/Sub adapters declare one. */
class CappedMemoryAdapter extends MemoryAdapter {
  override readonly lease: AdapterLease;

  constructor(config: ConstructorParameters<typeof MemoryAdapter>[0], lease: AdapterLease) {
    super(config, silentLogger);
    this.lease = lease;
  }
}

describe.skipIf(!hasServer)('the lease cap on the memory broker', () => {
  it("aborts the handler's signal with a lost lease when renewal stops at the cap, before the broker hands the message out again", async () => {
    const broker = newBroker(cleanups);
    const store = await serverStore();
    // A 1000 ms lease renewed every 500 ms; the cap, 1100 ms from receipt, cuts the
    // renewal at 500 ms to 600 ms (the lease then ends at the cap), and 50 ms before the
    // cap the keeper gives the lease up. The old keeper noticed only at its tick at 1.5 s.
    const brokerConfig = { type: 'memory', broker, queue: 'capped', visibilityTimeoutMs: 1000 } as const;
    const adapter = new CappedMemoryAdapter(resolveMemoryConfig(brokerConfig), {
      extendByMs: 1000,
      maxTotalMs: 1100,
    });
    let received = 0;
    let receivedWhenAborted: number | undefined;
    let abortReason: unknown;
    let aborted!: () => void;
    const abortSeen = new Promise<void>((resolve) => {
      aborted = resolve;
    });
    const consumer = new Consumer(
      {
        name: 'lease-cap',
        broker: brokerConfig,
        store,
        logger: silentLogger,
        // Two slots: a redelivery of the message is received while the first run still waits.
        concurrency: 2,
        handler: async (_message, ctx) => {
          if (ctx.signal.aborted) return;
          await new Promise<void>((resolve) => {
            // Never aborted: the test fails on receivedWhenAborted, not on its timeout.
            const timer = setTimeout(() => {
              aborted();
              resolve();
            }, 10_000);
            ctx.signal.addEventListener(
              'abort',
              () => {
                clearTimeout(timer);
                receivedWhenAborted ??= received;
                abortReason ??= ctx.signal.reason;
                aborted();
                resolve();
              },
              { once: true },
            );
          });
        },
      },
      adapter,
    );
    consumer.on('received', () => received++);
    cleanups.push(() => consumer.stop());
    await consumer.start();
    await broker.send('capped', { id: 'long', body: {} });
    await abortSeen;
    expect(isOncelyError(abortReason, 'LEASE_LOST')).toBe(true);
    // Aborted while this run still held the message: the broker had not handed it out again.
    expect(receivedWhenAborted).toBe(1);
  });

  it('releases a run that stops when its lease is given up at the cap: not a failed attempt', async () => {
    const broker = newBroker(cleanups);
    const store = await serverStore();
    const brokerConfig = { type: 'memory', broker, queue: 'capped-stop', visibilityTimeoutMs: 400 } as const;
    const adapter = new CappedMemoryAdapter(resolveMemoryConfig(brokerConfig), {
      extendByMs: 400,
      maxTotalMs: 500,
    });
    const attempts: number[] = [];
    const events: string[] = [];
    const consumer = new Consumer(
      {
        name: 'lease-cap-stop',
        broker: brokerConfig,
        store,
        logger: silentLogger,
        handler: async (_message, ctx) => {
          attempts.push(ctx.attempt);
          if (attempts.length > 1) return;
          // Stops as a handler should when its signal aborts: by throwing the reason.
          await new Promise<void>((resolve) => {
            const timer = setTimeout(resolve, 10_000);
            ctx.signal.addEventListener(
              'abort',
              () => {
                clearTimeout(timer);
                resolve();
              },
              { once: true },
            );
          });
          ctx.signal.throwIfAborted();
          throw new Error('the lease was never given up');
        },
      },
      adapter,
    );
    for (const name of ['leaseLost', 'released', 'failed', 'retried', 'ackFailed', 'processed'] as const)
      consumer.on(name, () => events.push(name));
    cleanups.push(() => consumer.stop());
    await consumer.start();
    await broker.send('capped-stop', { id: 'stops', body: {} });
    expect(await broker.waitForIdle('capped-stop', { timeoutMs: 60_000 })).toBe(true);
    // Attempts count failures, not lost leases: the redelivery is attempt 1 again.
    expect(attempts).toEqual([1, 1]);
    expect(events).toEqual(['leaseLost', 'released', 'processed']);
  });
});
