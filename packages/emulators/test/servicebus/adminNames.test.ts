// Entity names through the HTTP administration API, with the real ServiceBusAdministrationClient
// (SDK 7.10, alias @azure/service-bus-710). The service allows queue and topic names of at
// most 260 letters, digits, periods, hyphens, underscores and slashes, and subscription and
// rule names of at most 50; anything else is a 400, and nothing is created.
import { RestError } from '@azure/core-rest-pipeline';
import { ServiceBusAdministrationClient } from '@azure/service-bus-710';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ServiceBusEmulator, startServiceBusEmulator } from '../../dist/servicebus/index.js';
import { uniqueName } from './support.js';

let emulator: ServiceBusEmulator;
let admin: ServiceBusAdministrationClient;

beforeAll(async () => {
  emulator = await startServiceBusEmulator({ port: 0, adminPort: 0 });
  admin = new ServiceBusAdministrationClient(emulator.adminConnectionString!);
});

afterAll(async () => {
  await emulator?.stop();
});

/** The status and message of a refused call. */
async function refusal(call: Promise<unknown>): Promise<{ status?: number; message: string }> {
  const error = await call.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error, 'the call should have been refused').toBeInstanceOf(RestError);
  return { status: (error as RestError).statusCode, message: (error as RestError).message };
}

describe('queue and topic names', () => {
  it('a 261-character queue name is a 400 and creates nothing; 260 is accepted', async () => {
    const tooLong = 'q'.repeat(261);
    const refused = await refusal(admin.createQueue(tooLong));
    expect(refused.status).toBe(400);
    expect(refused.message).toContain('260');
    expect(await admin.queueExists(tooLong)).toBe(false);
    const longest = `${uniqueName('q')}`.padEnd(260, 'q');
    await admin.createQueue(longest);
    expect(await admin.queueExists(longest)).toBe(true);
  });

  it('a queue name with a space or "!" is a 400 naming the allowed characters', async () => {
    const refused = await refusal(admin.createQueue('bad name!'));
    expect(refused.status).toBe(400);
    expect(refused.message).toMatch(/letters, digits, periods, hyphens, underscores/);
    expect(await admin.queueExists('bad name!')).toBe(false);
  });

  it('a topic name with "!" is a 400; periods, hyphens and underscores are accepted', async () => {
    const refused = await refusal(admin.createTopic('bad!topic'));
    expect(refused.status).toBe(400);
    expect(await admin.topicExists('bad!topic')).toBe(false);
    const fine = uniqueName('ok.topic-name_1');
    await admin.createTopic(fine);
    expect(await admin.topicExists(fine)).toBe(true);
  });
});

describe('subscription and rule names', () => {
  it('a 51-character subscription name is a 400; 50 is accepted', async () => {
    const topic = uniqueName('names-topic');
    await admin.createTopic(topic);
    const refused = await refusal(admin.createSubscription(topic, 's'.repeat(51)));
    expect(refused.status).toBe(400);
    expect(refused.message).toContain('50');
    expect(await admin.subscriptionExists(topic, 's'.repeat(51))).toBe(false);
    await admin.createSubscription(topic, 's'.repeat(50));
    expect(await admin.subscriptionExists(topic, 's'.repeat(50))).toBe(true);
  });

  it('a subscription name with a slash or a space is a 400', async () => {
    const topic = uniqueName('names-topic');
    await admin.createTopic(topic);
    expect((await refusal(admin.createSubscription(topic, 'bad name'))).status).toBe(400);
  });

  it('a 51-character rule name is a 400 (also as a default rule); $Default can be re-created', async () => {
    const topic = uniqueName('names-rules');
    await admin.createTopic(topic);
    await admin.createSubscription(topic, 'sub');
    const refused = await refusal(admin.createRule(topic, 'sub', 'r'.repeat(51), { sqlExpression: '1=1' }));
    expect(refused.status).toBe(400);
    expect(await admin.ruleExists(topic, 'sub', 'r'.repeat(51))).toBe(false);
    const viaDefault = await refusal(
      admin.createSubscription(topic, 'other', {
        defaultRuleOptions: { name: 'bad rule!', filter: { sqlExpression: '1=1' } },
      }),
    );
    expect(viaDefault.status).toBe(400);
    expect(await admin.subscriptionExists(topic, 'other')).toBe(false);
    await admin.deleteRule(topic, 'sub', '$Default');
    await admin.createRule(topic, 'sub', '$Default', { sqlExpression: '1=1' });
    expect(await admin.ruleExists(topic, 'sub', '$Default')).toBe(true);
  });
});
