/**
 * The adapter conformance suite (shared/CONFORMANCE.md) against the real Kafka broker.
 * Consumers reach the broker through a proxy in this process (the broker's PROXIED
 * listener advertises it), so scenario 13 can cut their connections server-side.
 *
 * Not checkable here: `brokerRestart` (the suite has no scenario for it; restart.test.ts
 * restarts a broker of its own), `nativeDeadLetter` and `deliveryCount` (Kafka has
 * neither; the adapter produces dead letters itself and the core counts attempts).
 */
import { runAdapterConformance } from '@oncely/testkit';
import { afterAll, beforeAll, describe, inject, it } from 'vitest';
import { kafkaFeatures, kafkaHarness } from './support/harness.js';
import { kafkaProxy, testBrokers } from './support/kafka.js';

const brokers = testBrokers();
const proxyPort = Number(inject('kafkaProxyPort'));
const proxiedPort = Number(inject('kafkaProxiedPort'));
const proxy = proxyPort && proxiedPort ? kafkaProxy(proxyPort, proxiedPort) : undefined;

if (brokers) {
  beforeAll(async () => {
    await proxy?.start();
  });
  afterAll(async () => {
    await proxy?.close();
  });
  runAdapterConformance({
    name: 'kafka adapter conformance',
    features: kafkaFeatures(proxy !== undefined),
    createHarness: () => kafkaHarness({ brokers, ...(proxy ? { proxy } : {}) }),
  });
} else {
  describe('kafka adapter conformance', () => {
    it.skip(`needs a Kafka broker: ${inject('kafkaUnavailable')}`, () => {});
  });
}
