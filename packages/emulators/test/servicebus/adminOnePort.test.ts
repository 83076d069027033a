// One connection string for both clients: with the administration API on, the AMQP port
// also answers its HTTP requests, so a ServiceBusAdministrationClient given the same
// connection string as the ServiceBusClient works (as the official samples
// topicSubscriptionWithRuleOperationsSample and ruleManager expect; the official emulator
// needs a second connection string for port 5300). Real clients, SDK 7.10.0-beta.2.
import { ServiceBusAdministrationClient, ServiceBusClient } from '@azure/service-bus-710';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ServiceBusEmulator, startServiceBusEmulator } from '../../dist/servicebus/index.js';
import { uniqueName } from './support.js';

let emulator: ServiceBusEmulator;
let client: ServiceBusClient;

beforeAll(async () => {
  emulator = await startServiceBusEmulator({ port: 0, adminPort: 0 });
  client = new ServiceBusClient(emulator.connectionString);
});

afterAll(async () => {
  await client?.close();
  await emulator?.stop();
});

describe('the administration API on the AMQP port', () => {
  it('creates a topic, a filtered subscription and a rule with the AMQP connection string; messages route', async () => {
    const admin = new ServiceBusAdministrationClient(emulator.connectionString);
    const topic = uniqueName('one-port');
    await admin.createTopic(topic);
    await admin.createSubscription(topic, 'important', {
      defaultRuleOptions: { name: 'ImportantOnly', filter: { correlationId: 'important' } },
    });
    const rules = [];
    for await (const rule of admin.listRules(topic, 'important')) rules.push(rule.name);
    expect(rules).toEqual(['ImportantOnly']);

    // The AMQP side still works on the same port, with connections of both kinds open.
    await client
      .createSender(topic)
      .sendMessages([{ body: 'plain' }, { body: 'flagged', correlationId: 'important' }]);
    const receiver = client.createReceiver(topic, 'important', { receiveMode: 'receiveAndDelete' });
    const received = await receiver.receiveMessages(10, { maxWaitTimeInMs: 2000 });
    await receiver.close();
    expect(received.map((m) => m.body)).toEqual(['flagged']);
    expect((await admin.getTopicRuntimeProperties(topic)).subscriptionCount).toBe(1);
    await admin.deleteTopic(topic);
    expect(await admin.topicExists(topic)).toBe(false);
  });
});
