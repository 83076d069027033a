// The HTTP administration API with the real ServiceBusAdministrationClient of
// @azure/service-bus 7.10.0-beta.2 (the first that speaks plain http to an emulator, with
// UseDevelopmentEmulator=true), installed as the dev alias @azure/service-bus-710.
import { ServiceBusAdministrationClient, ServiceBusClient } from '@azure/service-bus-710';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ServiceBusEmulator, startServiceBusEmulator } from '../../dist/servicebus/index.js';
import { uniqueName } from './support.js';

let emulator: ServiceBusEmulator;
let admin: ServiceBusAdministrationClient;
let client: ServiceBusClient;

beforeAll(async () => {
  emulator = await startServiceBusEmulator({ port: 0, adminPort: 0 });
  admin = new ServiceBusAdministrationClient(emulator.adminConnectionString!);
  client = new ServiceBusClient(emulator.connectionString);
});

afterAll(async () => {
  await client?.close();
  await emulator?.stop();
});

async function codeOf(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
  } catch (error) {
    return (error as { code?: string }).code ?? String(error);
  }
  return 'no error';
}

describe('ServiceBusAdministrationClient against the emulator', () => {
  it('creates, gets, lists, updates and deletes a queue; runtime properties count its messages', async () => {
    const name = uniqueName('admin-queue');
    const created = await admin.createQueue(name, {
      lockDuration: 'PT30S',
      maxDeliveryCount: 4,
      requiresDuplicateDetection: true,
      duplicateDetectionHistoryTimeWindow: 'PT2M',
    });
    expect(created).toMatchObject({
      name,
      lockDuration: 'PT30S',
      maxDeliveryCount: 4,
      requiresDuplicateDetection: true,
      duplicateDetectionHistoryTimeWindow: 'PT2M',
      requiresSession: false,
    });
    expect(emulator.settingsOf(name)).toMatchObject({ lockDurationMs: 30_000, maxDeliveryCount: 4 });
    expect(await admin.queueExists(name)).toBe(true);
    expect((await admin.getQueue(name)).lockDuration).toBe('PT30S');

    const names: string[] = [];
    for await (const queue of admin.listQueues()) names.push(queue.name);
    expect(names).toContain(name);

    const queue = await admin.getQueue(name);
    queue.maxDeliveryCount = 7;
    await admin.updateQueue(queue);
    expect(emulator.settingsOf(name)?.maxDeliveryCount).toBe(7);

    const sender = client.createSender(name);
    await sender.sendMessages([{ body: 1 }, { body: 2 }, { body: 3 }]);
    await sender.scheduleMessages({ body: 'later' }, new Date(Date.now() + 60_000));
    await sender.close();
    const receiver = client.createReceiver(name);
    const [first] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 5000 });
    await receiver.deadLetterMessage(first!, {
      deadLetterReason: 'test',
      deadLetterErrorDescription: 'admin',
    });
    await receiver.close();
    const runtime = await admin.getQueueRuntimeProperties(name);
    expect(runtime).toMatchObject({
      name,
      activeMessageCount: 2,
      deadLetterMessageCount: 1,
      scheduledMessageCount: 1,
      totalMessageCount: 4,
    });

    await admin.deleteQueue(name);
    expect(await admin.queueExists(name)).toBe(false);
    expect(await codeOf(admin.getQueue(name))).toBe('MessageEntityNotFoundError');
    expect(await codeOf(admin.deleteQueue(name))).toBe('MessageEntityNotFoundError');
  });

  it('refuses to create an entity that exists', async () => {
    const name = uniqueName('admin-dup');
    await admin.createQueue(name);
    expect(await codeOf(admin.createQueue(name))).toBe('MessageEntityAlreadyExistsError');
    await admin.deleteQueue(name);
  });

  it('creates topics and subscriptions, lists them, counts subscription messages, deletes them', async () => {
    const topic = uniqueName('admin-topic');
    expect((await admin.createTopic(topic, { requiresDuplicateDetection: true })).name).toBe(topic);
    await admin.createSubscription(topic, 'audit', { maxDeliveryCount: 3, lockDuration: 'PT10S' });
    await admin.createSubscription(topic, 'billing');
    expect(await admin.topicExists(topic)).toBe(true);
    expect(await admin.subscriptionExists(topic, 'audit')).toBe(true);
    expect(await admin.getSubscription(topic, 'audit')).toMatchObject({
      topicName: topic,
      subscriptionName: 'audit',
      maxDeliveryCount: 3,
      lockDuration: 'PT10S',
    });
    const topics: string[] = [];
    for await (const t of admin.listTopics()) topics.push(t.name);
    expect(topics).toContain(topic);
    const subs: string[] = [];
    for await (const s of admin.listSubscriptions(topic)) subs.push(s.subscriptionName);
    expect(subs).toEqual(['audit', 'billing']);
    expect((await admin.getTopicRuntimeProperties(topic)).subscriptionCount).toBe(2);

    const sender = client.createSender(topic);
    await sender.sendMessages([{ body: 1 }, { body: 2 }]);
    await sender.close();
    expect(await admin.getSubscriptionRuntimeProperties(topic, 'billing')).toMatchObject({
      activeMessageCount: 2,
      totalMessageCount: 2,
    });

    await admin.deleteSubscription(topic, 'billing');
    expect(await admin.subscriptionExists(topic, 'billing')).toBe(false);
    await admin.deleteTopic(topic);
    expect(await admin.topicExists(topic)).toBe(false);
  });

  it('manages rules: $Default, SQL and correlation filters with actions, update, delete; they route', async () => {
    const topic = uniqueName('admin-rules');
    await admin.createTopic(topic);
    await admin.createSubscription(topic, 'picky');
    const listed = async () => {
      const rules: string[] = [];
      for await (const rule of admin.listRules(topic, 'picky')) rules.push(rule.name);
      return rules;
    };
    expect(await admin.getRule(topic, 'picky', '$Default')).toMatchObject({
      name: '$Default',
      filter: { sqlExpression: '1=1' },
    });
    await admin.deleteRule(topic, 'picky', '$Default');
    const sql = await admin.createRule(
      topic,
      'picky',
      'big',
      { sqlExpression: "quantity > 10 AND color = 'blue'" },
      { sqlExpression: "SET tier = 'bulk'" },
    );
    expect(sql).toMatchObject({
      name: 'big',
      filter: { sqlExpression: "quantity > 10 AND color = 'blue'" },
      action: { sqlExpression: "SET tier = 'bulk'" },
    });
    const correlation = await admin.createRule(topic, 'picky', 'refunds', {
      correlationId: 'order-7',
      subject: 'refund',
      applicationProperties: { region: 'eu', priority: 2, urgent: true },
    });
    expect(correlation.filter).toMatchObject({
      correlationId: 'order-7',
      subject: 'refund',
      applicationProperties: { region: 'eu', priority: 2, urgent: true },
    });
    expect(await listed()).toEqual(['big', 'refunds']);
    expect(await admin.ruleExists(topic, 'picky', 'big')).toBe(true);
    // A filter that does not parse: 400, with what is wrong in the message.
    await expect(
      admin.createRule(topic, 'picky', 'bad', { sqlExpression: 'quantity >' }),
    ).rejects.toMatchObject({
      statusCode: 400,
      message: expect.stringMatching(/Rule 'bad': expected a value, found the end of the expression/),
    });

    const sender = client.createSender(topic);
    await sender.sendMessages([
      { messageId: 'big-blue', body: 1, applicationProperties: { quantity: 20, color: 'blue' } },
      { messageId: 'small', body: 2, applicationProperties: { quantity: 1, color: 'blue' } },
      {
        messageId: 'refund',
        body: 3,
        correlationId: 'order-7',
        subject: 'refund',
        applicationProperties: { region: 'eu', priority: 2, urgent: true },
      },
    ]);
    const receiver = client.createReceiver(topic, 'picky');
    const peeked = await receiver.peekMessages(10);
    expect(peeked.map((m) => m.messageId)).toEqual(['big-blue', 'refund']);
    expect(peeked[0]!.applicationProperties).toMatchObject({ tier: 'bulk', RuleName: 'big' });

    const rule = await admin.getRule(topic, 'picky', 'big');
    rule.filter = { sqlExpression: 'quantity < 5' };
    await admin.updateRule(topic, 'picky', rule);
    expect((await admin.getRule(topic, 'picky', 'big')).filter).toEqual({
      sqlExpression: 'quantity < 5',
      sqlParameters: undefined,
    });
    await admin.deleteRule(topic, 'picky', 'refunds');
    expect(await listed()).toEqual(['big']);
    expect(await codeOf(admin.getRule(topic, 'picky', 'refunds'))).toBe('MessageEntityNotFoundError');
    await receiver.close();
    await sender.close();
  });
});
