/**
 * Entry point of the crash-test child process (conformance scenarios 5 and 6), run as
 * `node dist/childConsumer.js` by `runCrashingChild`. It builds a consumer from the
 * {@link ChildPlan} in its environment, applies the planned work, reports the crash
 * point to the parent over IPC and waits there to be SIGKILLed.
 *
 * Not exported: importing it runs it.
 */
import { pathToFileURL } from 'node:url';
import { Consumer, type Logger, loadAdapterModule } from '@oncely/core';
import { CHILD_PLAN_ENV, type ChildPlan, type ChildReport } from './childProtocol.js';
import { FaultInjector } from './FaultInjector.js';
import type { ChildModuleFactory } from './harness.js';

function report(message: ChildReport): void {
  process.send?.(message);
}

const log: Logger = {
  debug: () => {},
  info: () => {},
  warn: (message, fields) => console.error(`[child warn] ${message}`, fields ?? ''),
  error: (message, fields) => console.error(`[child error] ${message}`, fields ?? ''),
};

async function main(): Promise<void> {
  const raw = process.env[CHILD_PLAN_ENV];
  if (!raw) throw new Error(`${CHILD_PLAN_ENV} is not set: this script is started by runCrashingChild`);
  const plan = JSON.parse(raw) as ChildPlan;
  // Never outlive the test: a parent that dies closes the IPC channel, and the lifetime
  // timer (which also keeps the event loop alive while we wait to be killed) ends us.
  process.on('disconnect', () => process.exit(2));
  setTimeout(() => {
    report({
      type: 'error',
      message: `child lived longer than ${plan.maxLifetimeMs} ms without being killed`,
    });
    process.exit(3);
  }, plan.maxLifetimeMs);

  const moduleUrl = /^[a-z]+:/i.test(plan.childModule)
    ? plan.childModule
    : pathToFileURL(plan.childModule).href;
  const factory = (await import(moduleUrl)).default as ChildModuleFactory;
  if (typeof factory !== 'function')
    throw new Error(`${plan.childModule} has no default-exported factory function`);
  const resources = await factory({ brokerConfig: plan.brokerConfig, storeConfig: plan.storeConfig });
  const brokerConfig = resources.brokerConfig ?? plan.brokerConfig;
  const adapterModule = resources.adapterModule ?? (await loadAdapterModule(brokerConfig.type as never));
  const { name } = plan.consumer;
  const idStrategy = resources.idStrategy ?? plan.consumer.idStrategy;
  const { messageId: target, point } = plan.crash;

  const faults = new FaultInjector();
  if (point === 'after-commit') {
    // The core acks only after the commit: holding the ack forever freezes the process
    // exactly between commit and ack, where the parent kills it.
    faults.hold('ack', target, () => report({ type: 'crash-point', point, messageId: target }));
  }
  const adapterOptions = { consumerName: name, log, idStrategy, maxAttempts: plan.consumer.maxAttempts };
  const adapter = faults.wrap(adapterModule.createAdapter(brokerConfig, adapterOptions), {
    label: 'child',
    idStrategy,
  });
  const consumer = new Consumer(
    {
      name,
      broker: brokerConfig,
      store: resources.store,
      concurrency: plan.consumer.concurrency,
      maxAttempts: plan.consumer.maxAttempts,
      backoff: plan.consumer.backoff,
      handlerTimeoutMs: plan.consumer.handlerTimeoutMs,
      logger: log,
      ...(idStrategy === undefined ? {} : { idStrategy }),
      handler: async (message, ctx) => {
        await ctx.tx.query(
          plan.insertEffect ??
            `INSERT INTO ${plan.effectsTable} (message_id, attempt, consumer, ordering_key, seq) VALUES ($1, $2, $3, $4, $5)`,
          [message.id, ctx.attempt, 'child', message.orderingKey ?? null, null],
        );
        if (point === 'before-commit' && message.id === target) {
          // The business row is written inside the open transaction, not committed:
          // freeze here and let the parent kill us.
          report({ type: 'crash-point', point, messageId: target });
          await new Promise<never>(() => {});
        }
      },
    },
    adapter,
  );
  consumer.on('received', (event) => report({ type: 'received', messageId: event.messageId }));
  await consumer.start();
  report({ type: 'ready' });
}

main().catch((error: unknown) => {
  const message = error instanceof Error ? (error.stack ?? error.message) : String(error);
  report({ type: 'error', message });
  console.error(message);
  // Let the IPC message flush before exiting.
  setTimeout(() => process.exit(1), 100);
});
