import { randomUUID } from 'node:crypto';
import { type Message, PubSub, type Subscription, v1 } from '@google-cloud/pubsub';
import { credentials } from '@grpc/grpc-js';
import {
  type PubSubEmulator,
  type PubSubEmulatorOptions,
  startPubSubEmulator,
} from '@oncely/emulators/pubsub';

export const PROJECT = 'oncely-test';

/** A unique resource ID per test, so tests never share a topic or a subscription. */
export function uniqueName(label: string): string {
  return `${label}-${randomUUID().slice(0, 8)}`;
}

/**
 * The emulator in this process, with the service's 10 s minimum ack deadline unless a
 * test lowers it (`minAckDeadlineSeconds`) and says why: a lower minimum hides consumers
 * that would be refused by the service.
 */
export async function startEmulator(options: PubSubEmulatorOptions = {}): Promise<PubSubEmulator> {
  return startPubSubEmulator({ port: 0, ...options });
}

/** A real client pointed at the emulator through its per-instance options (no global env). */
export function clientFor(emulator: PubSubEmulator): PubSub {
  return new PubSub({ projectId: PROJECT, apiEndpoint: emulator.address });
}

/**
 * Resolves when `predicate` holds, polling every 10 ms; rejects after `timeoutMs`, 20 s
 * unless given: a bound for a hang on a loaded machine, not a speed target (the emulators'
 * test timeout is 60 s, so this error, naming `what`, comes first).
 */
export async function waitFor(
  predicate: () => boolean,
  timeoutMs = 20_000,
  what = 'condition',
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!predicate()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** Collects the messages a subscription's `message` event hands out. */
export function collect(subscription: Subscription, onMessage?: (message: Message) => void): Message[] {
  const received: Message[] = [];
  subscription.on('message', (message: Message) => {
    received.push(message);
    onMessage?.(message);
  });
  subscription.on('error', (error) => {
    throw error;
  });
  return received;
}

/**
 * The generated v1 client (what the synchronous-pull samples use), pointed at the
 * emulator without TLS.
 */
export function subscriberClientFor(emulator: PubSubEmulator): v1.SubscriberClient {
  return new v1.SubscriberClient({
    servicePath: emulator.host,
    port: emulator.port,
    sslCreds: credentials.createInsecure(),
    projectId: PROJECT,
  });
}

/** `projects/{PROJECT}/subscriptions/{id}`. */
export const subscriptionPath = (id: string) => `projects/${PROJECT}/subscriptions/${id}`;
export const topicPath = (id: string) => `projects/${PROJECT}/topics/${id}`;

/** The gRPC status code of a rejected call. */
export async function codeOf(promise: Promise<unknown>): Promise<number | undefined> {
  try {
    await promise;
    return undefined;
  } catch (error) {
    return (error as { code?: number }).code;
  }
}
