import { PubSub } from '@google-cloud/pubsub';
import {
  type PubSubEmulator,
  type PubSubEmulatorOptions,
  startPubSubEmulator,
} from '@oncely/emulators/pubsub';
import { requireService } from '@oncely/testkit';
import pg from 'pg';

export const DATABASE_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
export const PROJECT = 'oncely-test';

/** True when PostgreSQL answers; with CI=true a missing server throws (the suite fails). */
export async function postgresAvailable(): Promise<boolean> {
  return requireService('PostgreSQL', async () => {
    const client = new pg.Client({ connectionString: DATABASE_URL });
    await client.connect();
    await client.end();
  });
}

/**
 * The emulator in this process, with the service's 10 s minimum ack deadline unless the
 * caller lowers it (`minAckDeadlineSeconds`) and says why: a lower minimum hid a consumer
 * whose stream the service would refuse (an `ackDeadlineSeconds` below 10).
 */
export function startEmulator(options: PubSubEmulatorOptions = {}): Promise<PubSubEmulator> {
  return startPubSubEmulator({ port: 0, ...options });
}

/** A real client on the emulator, configured per instance (no global environment). */
export function adminClient(emulator: PubSubEmulator): PubSub {
  return new PubSub({ projectId: PROJECT, apiEndpoint: emulator.address });
}
