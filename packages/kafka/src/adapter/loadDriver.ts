import { silentLogger } from '@oncely/core';
import type { ResolvedKafkaConfig } from '../config.js';
import type { ClientContext, KafkaClientDriver } from './clientApi.js';
import { kafkajsDriver } from './kafkajsClient.js';

/** The driver of `broker.client`: the adapter's, the outbox producer's and the tools'. */
export async function loadDriver(context: ClientContext): Promise<KafkaClientDriver> {
  if (context.config.client !== 'platformatic') return kafkajsDriver(context);
  return (await loadPlatformatic()).platformaticDriver(context);
}

/**
 * The @platformatic/kafka driver, loaded only when chosen: it is an optional peer
 * dependency, and needs Node >= 22.22 or >= 24.6.
 */
async function loadPlatformatic(): Promise<typeof import('./platformaticClient.js')> {
  try {
    return await import('./platformaticClient.js');
  } catch (error) {
    throw new Error(
      `broker.client 'platformatic' needs the @platformatic/kafka package (npm install @platformatic/kafka) and Node >= 22.22 or >= 24.6 (this is ${process.version})`,
      { cause: error },
    );
  }
}

/**
 * The driver a tool (`diagnose`, `findDeadLetters`) talks to the cluster with, on
 * `broker.client`: your own `broker.kafka` when you gave one, else clients built from the
 * options under a client ID of their own, silent, retrying once so that an unreachable
 * cluster fails fast.
 */
export function toolDriver(config: ResolvedKafkaConfig, tool: string): Promise<KafkaClientDriver> {
  return loadDriver({
    config: { ...config, clientId: `${config.clientId}-${tool}`, logLevel: 'nothing', retry: { retries: 1 } },
    log: silentLogger,
    concurrency: 1,
  });
}
