/**
 * Group behaviour of the adapter itself (a stand-in for the core decides when slots are
 * free), against the real broker: a member waiting for a slot must still let the group
 * rebalance, and close() must not wait forever for a handler.
 */
import { silentLogger } from '@oncely/core';
import { KafkaAdapter, type KafkaBrokerOptions } from '@oncely/kafka';
import type { Admin, Kafka, Producer } from 'kafkajs';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createTopic, kafkaClient, publish, testBrokers, uniqueName } from './support/kafka.js';
import { type ControlledRuntime, controlledRuntime } from './support/runtime.js';
import { until } from './support/store.js';

const brokers = testBrokers();

describe.skipIf(!brokers)('kafka adapter: group membership (real broker)', () => {
  let kafka: Kafka;
  let admin: Admin;
  let producer: Producer;
  const cleanups: Array<() => Promise<unknown>> = [];

  beforeAll(async () => {
    kafka = kafkaClient(brokers!, 'oncely-group-test');
    admin = kafka.admin();
    producer = kafka.producer({ allowAutoTopicCreation: false });
    await Promise.all([admin.connect(), producer.connect()]);
  });
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => {});
  });
  afterAll(async () => {
    await Promise.allSettled([admin?.disconnect(), producer?.disconnect()]);
  });

  function member(
    name: string,
    broker: Omit<KafkaBrokerOptions, 'brokers' | 'topic'> & { topic: string },
    runtime: ControlledRuntime,
  ): KafkaAdapter {
    const adapter = new KafkaAdapter(
      {
        type: 'kafka',
        brokers: brokers!,
        fromBeginning: true,
        maxWaitTimeInMs: 200,
        sessionTimeout: 6000,
        heartbeatInterval: 500,
        ...broker,
      },
      { consumerName: name, log: silentLogger },
    );
    cleanups.push(async () => {
      runtime.stop();
      runtime.outage = false;
      await adapter.stop();
      await adapter.close();
    });
    return adapter;
  }

  async function stableMembers(groupId: string): Promise<number> {
    const { groups } = await admin.describeGroups([groupId]);
    const group = groups[0];
    return group?.state === 'Stable' ? group.members.length : -1;
  }

  // Issue 11, Kafka 1: during a store outage the core's whenReady() waits, and the
  // batch waiting for a slot only checked stopRequested. Its heartbeats saw
  // REBALANCE_IN_PROGRESS but eachBatch never returned, so kafkajs could not rejoin and
  // a new member's join waited the whole rebalanceTimeout (until the waiting members
  // were evicted).
  it('members waiting out a store outage let a new member join within a few heartbeats', async () => {
    const topic = uniqueName('outage-join');
    const groupId = uniqueName('outage-join-group');
    await createTopic(admin, topic, 4);
    cleanups.push(() => admin.deleteTopics({ topics: [topic, `${topic}.dlq`] }));
    const rebalanceTimeout = 30_000;
    const runtimes = [controlledRuntime(2), controlledRuntime(2)];
    for (const runtime of runtimes) runtime.outage = true;
    const adapters = runtimes.map((runtime, n) =>
      member(`m${n}`, { topic, groupId, rebalanceTimeout }, runtime),
    );
    for (const [n, adapter] of adapters.entries()) await adapter.start(runtimes[n]!);
    await until('both members in the group', async () => (await stableMembers(groupId)) === 2);
    await publish(
      producer,
      topic,
      Array.from({ length: 8 }, (_, n) => ({ id: `r${n}`, body: { n }, partition: n % 4 })),
    );
    await until('both members waiting for a slot', () => runtimes.every((r) => r.readyCalls > 0));

    const third = kafka.consumer({
      groupId,
      sessionTimeout: 6000,
      heartbeatInterval: 500,
      rebalanceTimeout,
      maxWaitTimeInMs: 200,
    });
    cleanups.push(() => third.disconnect());
    let joinedAfterMs: number | undefined;
    const startedAt = Date.now();
    third.on(third.events.GROUP_JOIN, () => {
      joinedAfterMs ??= Date.now() - startedAt;
    });
    await third.connect();
    await third.subscribe({ topics: [topic], fromBeginning: true });
    // It only joins; records it gets are not looked at.
    await third.run({ autoCommit: false, eachMessage: async () => {} });
    await until('the third member to join', () => joinedAfterMs !== undefined, rebalanceTimeout + 15_000);
    expect(joinedAfterMs!, 'join time of the third member during the outage').toBeLessThan(10_000);
    // The waiting members rejoined rather than being evicted: three members.
    await until('three members in the group', async () => (await stableMembers(groupId)) === 3, 15_000);

    // After the outage, the records of the members' partitions are delivered.
    for (const runtime of runtimes) runtime.outage = false;
    await until('deliveries after the outage', () =>
      runtimes.some((runtime) => runtime.deliveries.length > 0),
    );
  });
});
