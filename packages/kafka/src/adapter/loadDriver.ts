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
