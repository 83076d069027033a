/**
 * Scenarios 5, 6 and 17: a consumer in a child process killed with SIGKILL after or
 * before its commit, and a message that crashes every process that runs it. The child is
 * started by {@link startScenarioChild}.
 */
import { expect } from 'vitest';
import type { CrashPoint } from '../childProtocol.js';
import { type CrashingChild, startCrashingChild } from '../crashingChild.js';
import { HarnessIncompleteError } from '../errors.js';
import { waitFor } from '../spies.js';
import { needs, recordEffect, type Scenario, type ScenarioContext } from './scenario.js';

/** Scenarios 5 and 6: a consumer child process SIGKILLed after / before the commit. */
export function crashScenario(n: 5 | 6, point: CrashPoint): Scenario {
  const after = point === 'after-commit';
  return {
    n,
    slug: after ? 'crash-after-commit' : 'crash-before-commit',
    title: after
      ? 'crash between commit and ack: the consumer process is SIGKILLed right after the commit'
      : 'crash before commit: SIGKILL after the business insert, before the commit',
    // after-commit catches an ack sent before the commit (the message would be gone: no
    // redelivery, no duplicate event) and a lost marker (the redelivery would be
    // processed again: 2 rows). before-commit catches a marker saved first in its own
    // commit (the redelivery would be skipped as a duplicate: 0 rows).
    missing: (f) => needs(f, 'crossProcess'),
    setup: () => ({ leaseMs: 2_000 }),
    timeoutMs: 120_000,
    async body(context) {
      const { run, t } = context;
      const id = `crash-${point}`;
      const child = await startScenarioChild(context, { point, messageId: id }, 5);
      await run.publish([{ id, body: {} }]);
      const crashed = await child.crashed(t(30_000));
      expect(crashed).toEqual({ point, messageId: id });
      expect(child.received, 'what the child received').toEqual([id]);
      // What the killed process left behind.
      expect(await run.effectsOf(id), `rows after SIGKILL ${point}`).toBe(after ? 1 : 0);
      expect(await run.markerExists(id), `processed marker after SIGKILL ${point}`).toBe(after);

      await run.startConsumer({
        label: 'successor',
        concurrency: 1,
        handler: recordEffect(run, 'successor'),
      });
      // The broker hands the unacked message out again once it notices the dead consumer
      // (closed connection, or a lapsed lease).
      const concluded = after ? 'duplicate' : 'processed';
      await waitFor(() => run.spy.countFor(concluded, id) > 0, {
        timeoutMs: t(
          run.leaseMs * 3 + 30_000,
          `the successor to receive ${id} again and conclude it as ${concluded}`,
        ),
        description: `the successor to receive ${id} again and conclude it as ${concluded} (${run.spy.summary()})`,
      });
      await run.waitForBacklogZero(t(20_000));
      expect(run.spy.countFor('duplicate', id), 'duplicate events of the successor').toBe(after ? 1 : 0);
      expect(run.spy.countFor('processed', id), 'processed events of the successor').toBe(after ? 0 : 1);
      expect(await run.effectsOf(id), 'effect rows').toBe(1);
    },
  };
}

export const crashLoop: Scenario = {
  n: 17,
  slug: 'crash-loop',
  title: 'a message that crashes the process every time is dead-lettered with max-attempts',
  // Catches attempts counted only when a run ends (a crash never ends: the message would
  // crash every consumer forever) and a crash loop that is dead-lettered without a reason.
  missing: (f) => needs(f, 'crossProcess'),
  setup: () => ({ leaseMs: 2_000 }),
  timeoutMs: 240_000,
  async body(context) {
    const { run, t } = context;
    const id = 'crashes-every-time';
    const crashes = 3;
    const maxAttempts = 2;
    await run.publish([{ id, body: {} }]);
    for (let crash = 1; crash <= crashes; crash++) {
      const child = await startScenarioChild(context, { point: 'before-commit', messageId: id }, 10);
      expect(await child.crashed(t(run.leaseMs * 3 + 40_000)), `crash ${crash}`).toEqual({
        point: 'before-commit',
        messageId: id,
      });
    }
    let runs = 0;
    await run.startConsumer({
      label: 'survivor',
      concurrency: 1,
      maxAttempts,
      handler: async () => {
        runs++;
      },
    });
    const deadLetter = await waitFor(async () => (await run.setup.deadLetters()).find((d) => d.id === id), {
      timeoutMs: t(run.leaseMs * 3 + 40_000, `dead letter of ${id}`),
      description: `dead letter of ${id} (${run.spy.summary()})`,
    });
    expect(deadLetter.reason, `dead-letter reason of ${id}`).toBe('max-attempts');
    // The first delivery's crash may go uncounted (a first delivery writes nothing up
    // front), so after 3 crashes at least 2 are on record: past maxAttempts 2.
    expect(runs, `runs of ${id} in the surviving consumer`).toBe(0);
    expect(await run.effectsOf(id), 'effect rows').toBe(0);
  },
};

/**
 * Starts the crash-test child consumer of a crossProcess scenario on the run's consumer
 * name, store and effects table, with its crash point, and waits until it consumes. It is
 * killed when the scenario ends.
 */
async function startScenarioChild(
  { run, state, t }: ScenarioContext,
  crash: { point: CrashPoint; messageId: string },
  maxAttempts: number,
): Promise<CrashingChild> {
  const { harness, storeHandle } = state;
  if (!harness.childModule)
    throw new HarnessIncompleteError(
      'childModule',
      'crossProcess scenarios run a consumer in a child process',
    );
  if (storeHandle.childConfig === undefined) {
    throw new HarnessIncompleteError(
      'createStore().childConfig',
      'the child process rebuilds the store from it',
    );
  }
  const idStrategy = typeof harness.idStrategy === 'function' ? undefined : harness.idStrategy;
  const child = startCrashingChild({
    childModule: harness.childModule,
    brokerConfig: JSON.parse(JSON.stringify(run.setup.brokerConfig())),
    storeConfig: storeHandle.childConfig,
    consumer: {
      name: run.consumerName,
      concurrency: 1,
      ...(idStrategy === undefined ? {} : { idStrategy }),
      maxAttempts,
      backoff: { initialMs: 100, maxMs: 2000 },
      handlerTimeoutMs: 60_000,
    },
    effectsTable: run.table,
    insertEffect: run.insertEffectSql,
    crash,
    maxLifetimeMs: t(120_000),
  });
  run.onEnd(() => child.kill());
  // A bound for a child that never starts, not a speed target: a Node process loading an
  // adapter took over 30 s to say ready on a 2-core machine at load 10+ (issue 25).
  await child.ready(t(90_000));
  return child;
}
