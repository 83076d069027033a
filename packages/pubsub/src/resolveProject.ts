import type { ClientConfig, PubSub } from '@google-cloud/pubsub';
import { BrokerMisconfiguredError } from '@oncely/core';

/** What the client puts in names until it knows the project. */
const PROJECT_PLACEHOLDER = '{{projectId}}';

/** Where the project comes from, first found wins (README, "Where the project comes from"). */
const PROJECT_SOURCES =
  'broker.projectId (or the projectId of broker.client), PUBSUB_PROJECT_ID, GCLOUD_PROJECT, GOOGLE_CLOUD_PROJECT, the credentials file (GOOGLE_APPLICATION_CREDENTIALS), the gcloud configuration, the metadata server';

/**
 * Resolves the client's project (asking the environment and the credentials when the
 * config names none) and returns the client options, project included, for the
 * generated `v1` clients. Call it before building any resource name: until the project is
 * known, `pubsub.subscription(id).name` is `projects/{{projectId}}/subscriptions/id`,
 * which the client fills in only for its own requests; a name the adapter sends itself
 * (acks, the dead-letter copy's source) would name no subscription.
 *
 * @throws BrokerMisconfiguredError when no project can be found (the client then leaves an
 *   empty one with an emulator, or the placeholder).
 *
 * @example
 * ```ts
 * const options = await resolveProject(pubsub);
 * const name = pubsub.subscription('payments').name; // projects/shop-prod/subscriptions/payments
 * ```
 */
export async function resolveProject(pubsub: PubSub): Promise<ClientConfig> {
  let options: ClientConfig;
  try {
    options = await pubsub.getClientConfig();
  } catch (error) {
    throw noProject(`: ${(error as Error).message.split('\n')[0]}`, error);
  }
  if (!pubsub.projectId || pubsub.projectId.includes(PROJECT_PLACEHOLDER)) throw noProject('');
  return options;
}

function noProject(detail: string, cause?: unknown): BrokerMisconfiguredError {
  return new BrokerMisconfiguredError(
    `no Google Cloud project found for Pub/Sub (looked at ${PROJECT_SOURCES})${detail}`,
    cause === undefined ? undefined : { cause },
  );
}
