// Hostile use of the HTTP administration API with the real ServiceBusAdministrationClient
// (SDK 7.10, alias @azure/service-bus-710): concurrent creates of one name, and what the
// client's typed errors become.
import http from 'node:http';
import { ServiceBusAdministrationClient, ServiceBusClient } from '@azure/service-bus-710';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ServiceBusEmulator, startServiceBusEmulator } from '../../dist/servicebus/index.js';
import { uniqueName, waitUntil } from './support.js';

let emulator: ServiceBusEmulator;
let admin: ServiceBusAdministrationClient;

beforeAll(async () => {
  emulator = await startServiceBusEmulator({ port: 0, adminPort: 0 });
  admin = new ServiceBusAdministrationClient(emulator.adminConnectionString!);
});

afterAll(async () => {
  await emulator?.stop();
});

/** Settles all, then the outcome of each: 'ok' or the error's code. */
async function outcomes(promises: Array<Promise<unknown>>): Promise<string[]> {
  const settled = await Promise.allSettled(promises);
  return settled
    .map((s) =>
      s.status === 'fulfilled' ? 'ok' : ((s.reason as { code?: string }).code ?? String(s.reason)),
    )
    .sort();
}

describe('concurrent creates of one name', () => {
  it('queue: one is created, the others get MessageEntityAlreadyExistsError (409)', async () => {
    const name = uniqueName('race-queue');
    const results = await outcomes([
      admin.createQueue(name),
      admin.createQueue(name),
      admin.createQueue(name),
    ]);
    expect(results).toEqual(['MessageEntityAlreadyExistsError', 'MessageEntityAlreadyExistsError', 'ok']);
  });

  it('topic and queue of one name: one wins, the other gets MessageEntityAlreadyExistsError', async () => {
    const name = uniqueName('race-entity');
    const results = await outcomes([admin.createTopic(name), admin.createQueue(name)]);
    expect(results).toEqual(['MessageEntityAlreadyExistsError', 'ok']);
  });

  it('subscription: one is created, the other gets MessageEntityAlreadyExistsError', async () => {
    const topic = uniqueName('race-topic');
    await admin.createTopic(topic);
    const results = await outcomes([
      admin.createSubscription(topic, 's'),
      admin.createSubscription(topic, 's'),
    ]);
    expect(results).toEqual(['MessageEntityAlreadyExistsError', 'ok']);
  });

  it('rule: one is created, the other gets MessageEntityAlreadyExistsError; the subscription has it once', async () => {
    const topic = uniqueName('race-rules');
    await admin.createTopic(topic);
    await admin.createSubscription(topic, 's');
    const results = await outcomes([
      admin.createRule(topic, 's', 'r', { sqlExpression: 'a = 1' }),
      admin.createRule(topic, 's', 'r', { sqlExpression: 'a = 2' }),
    ]);
    expect(results).toEqual(['MessageEntityAlreadyExistsError', 'ok']);
    const names: string[] = [];
    for await (const rule of admin.listRules(topic, 's')) names.push(rule.name);
    expect(names.sort()).toEqual(['$Default', 'r']);
  });
});

describe('a create whose body arrives after another create of the same name', () => {
  /** Starts a PUT and sends its headers and half the body; `finish` sends the rest and returns the status. */
  function slowPut(path: string, body: string): { finish(): Promise<number> } {
    const port = /^Endpoint=sb:\/\/[^:]+:(\d+)/.exec(emulator.adminConnectionString!)![1];
    const url = new URL(path, `http://127.0.0.1:${port}`);
    const request = http.request(url, {
      method: 'PUT',
      headers: { 'content-type': 'application/atom+xml', 'content-length': Buffer.byteLength(body) },
    });
    const status = new Promise<number>((resolve, reject) => {
      request.once('response', (response) => {
        response.resume();
        resolve(response.statusCode ?? 0);
      });
      request.once('error', reject);
    });
    const half = Math.floor(body.length / 2);
    request.write(body.slice(0, half));
    return {
      async finish() {
        request.end(body.slice(half));
        return status;
      },
    };
  }

  /**
   * Gives the emulator time to take the slow request's headers. Not a race against the
   * outcome: had the headers not arrived yet, the late create would simply find the first
   * one and get its 409 anyway; the pause is what lets the test catch a stale check.
   */
  async function headersArrived(): Promise<void> {
    await new Promise((resolve) => setTimeout(resolve, 200));
  }

  it('rule: the late one gets 409 and the subscription keeps one rule of that name', async () => {
    const topic = uniqueName('slow-rules');
    await admin.createTopic(topic);
    await admin.createSubscription(topic, 's');
    const late = slowPut(
      `/${topic}/Subscriptions/s/Rules/r`,
      '<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml"><RuleDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect" xmlns:i="http://www.w3.org/2001/XMLSchema-instance"><Filter i:type="SqlFilter"><SqlExpression>a = 2</SqlExpression></Filter></RuleDescription></content></entry>',
    );
    await headersArrived();
    await admin.createRule(topic, 's', 'r', { sqlExpression: 'a = 1' });
    expect(await late.finish()).toBe(409);
    const rules: string[] = [];
    for await (const rule of admin.listRules(topic, 's'))
      rules.push(`${rule.name}:${(rule.filter as { sqlExpression?: string }).sqlExpression}`);
    expect(rules.sort()).toEqual(['$Default:1=1', 'r:a = 1']);
  });

  it('queue: the late one gets 409 (MessageEntityAlreadyExists), not 400', async () => {
    const name = uniqueName('slow-queue');
    const late = slowPut(
      `/${name}`,
      '<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml"><QueueDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"></QueueDescription></content></entry>',
    );
    await headersArrived();
    await admin.createQueue(name);
    expect(await late.finish()).toBe(409);
  });
});

describe('paging (byPage with maxPageSize, and continuation tokens)', () => {
  /** Every page's names, from the client's own paging. */
  async function pagesOf<T extends { name?: string; subscriptionName?: string }>(
    pages: AsyncIterableIterator<T[]>,
  ): Promise<string[][]> {
    const out: string[][] = [];
    for await (const page of pages) out.push(page.map((item) => item.subscriptionName ?? item.name ?? ''));
    return out;
  }

  it('queues: every queue once, in pages of at most maxPageSize; a continuation token resumes', async () => {
    const prefix = uniqueName('page');
    const created = Array.from({ length: 7 }, (_, i) => `${prefix}-${i}`);
    for (const name of created) await admin.createQueue(name);
    const pages = await pagesOf(admin.listQueues().byPage({ maxPageSize: 3 }));
    const listed = pages.flat();
    expect(pages.every((page) => page.length <= 3)).toBe(true);
    expect(new Set(listed).size).toBe(listed.length);
    expect(listed).toEqual(expect.arrayContaining(created));

    const firstPage = await admin.listQueues().byPage({ maxPageSize: 3 }).next();
    const token = (firstPage.value as { continuationToken?: string }).continuationToken;
    expect(token).toBeDefined();
    const resumed = await pagesOf(admin.listQueues().byPage({ maxPageSize: 3, continuationToken: token }));
    expect([...(firstPage.value as Array<{ name: string }>).map((q) => q.name), ...resumed.flat()]).toEqual(
      listed,
    );

    const runtime: string[] = [];
    for await (const page of admin.listQueuesRuntimeProperties().byPage({ maxPageSize: 2 })) {
      runtime.push(...page.map((q) => q.name));
    }
    expect(runtime).toEqual(listed);
  });

  it('topics, subscriptions and rules: every one, in small pages', async () => {
    const topic = uniqueName('page-topic');
    await admin.createTopic(topic);
    const subs = ['a', 'b', 'c', 'd', 'e'];
    for (const sub of subs) await admin.createSubscription(topic, sub);
    expect((await pagesOf(admin.listSubscriptions(topic).byPage({ maxPageSize: 2 }))).flat()).toEqual(subs);
    const rules = ['$Default', 'r1', 'r2', 'r3', 'r4'];
    for (const rule of rules.slice(1)) await admin.createRule(topic, 'a', rule, { sqlExpression: '1 = 1' });
    expect((await pagesOf(admin.listRules(topic, 'a').byPage({ maxPageSize: 2 }))).flat()).toEqual(rules);
    const topics = (await pagesOf(admin.listTopics().byPage({ maxPageSize: 1 }))).flat();
    expect(topics).toContain(topic);
  });

  it('the default listing goes past 100 entities', async () => {
    const prefix = uniqueName('many');
    for (let i = 0; i < 105; i++) emulator.createQueue(`${prefix}-${String(i).padStart(3, '0')}`);
    const listed: string[] = [];
    for await (const queue of admin.listQueues()) listed.push(queue.name);
    expect(listed.filter((name) => name.startsWith(prefix))).toHaveLength(105);
  });
});

it('a path with a malformed %-escape is a 400 naming it, not a 500', async () => {
  const port = /^Endpoint=sb:\/\/[^:]+:(\d+)/.exec(emulator.adminConnectionString!)![1];
  const response = await fetch(`http://127.0.0.1:${port}/%E0%A4%A`);
  expect(response.status).toBe(400);
  expect(await response.text()).toMatch(/URI malformed/);
});

describe('createSubscription with defaultRuleOptions', () => {
  it('the subscription starts with that rule instead of $Default, and routes by it', async () => {
    const topic = uniqueName('default-rule');
    await admin.createTopic(topic);
    await admin.createSubscription(topic, 'reds', {
      defaultRuleOptions: {
        name: 'only-red',
        filter: { sqlExpression: "color = 'red'" },
        action: { sqlExpression: 'SET seen = 1' },
      },
    });
    const rules: string[] = [];
    for await (const rule of admin.listRules(topic, 'reds')) rules.push(rule.name);
    expect(rules).toEqual(['only-red']);

    const client = new ServiceBusClient(emulator.connectionString);
    try {
      await client.createSender(topic).sendMessages([
        { body: 'b', messageId: 'blue', applicationProperties: { color: 'blue' } },
        { body: 'r', messageId: 'red', applicationProperties: { color: 'red' } },
      ]);
      const receiver = client.createReceiver(topic, 'reds', { receiveMode: 'receiveAndDelete' });
      const [message] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 5_000 });
      expect(message?.messageId).toBe('red');
      expect(message?.applicationProperties).toMatchObject({ color: 'red', seen: 1, RuleName: 'only-red' });
      expect(emulator.inspect(`${topic}/Subscriptions/reds`).total).toBe(0);
    } finally {
      await client.close();
    }
  });

  it('a default rule whose filter does not parse: 400, and no subscription is created', async () => {
    const topic = uniqueName('default-rule-bad');
    await admin.createTopic(topic);
    const failure = await admin
      .createSubscription(topic, 'bad', {
        defaultRuleOptions: { name: 'r', filter: { sqlExpression: 'color = = 1' } },
      })
      .then(
        () => undefined,
        (error: { statusCode?: number; message: string }) => error,
      );
    expect(failure?.statusCode).toBe(400);
    expect(failure?.message).toMatch(/expected a value/);
    expect(await admin.subscriptionExists(topic, 'bad')).toBe(false);
  });
});

describe('settings that would change where messages go', () => {
  it('forwardTo and forwardDeadLetteredMessagesTo are refused with a 400 (auto-forwarding is not emulated)', async () => {
    await admin.createQueue(uniqueName('fwd-target')).catch(() => undefined);
    const refusal = (promise: Promise<unknown>) =>
      promise.then(
        () => 'accepted',
        (error: { statusCode?: number; message: string }) => `${error.statusCode} ${error.message}`,
      );
    const topic = uniqueName('fwd-topic');
    await admin.createTopic(topic);
    const outcomes = [
      await refusal(admin.createQueue(uniqueName('fwd'), { forwardTo: 'elsewhere' })),
      await refusal(admin.createQueue(uniqueName('fwd-dlq'), { forwardDeadLetteredMessagesTo: 'elsewhere' })),
      await refusal(admin.createSubscription(topic, 'fwd', { forwardTo: 'elsewhere' })),
    ];
    // Accepted, messages would stay where they are while the test waits for them elsewhere.
    for (const outcome of outcomes) expect(outcome).toMatch(/^400 .*forwarding.*not emulated/);
    const queue = uniqueName('fwd-update');
    const created = await admin.createQueue(queue);
    expect(await refusal(admin.updateQueue({ ...created, forwardTo: 'elsewhere' }))).toMatch(
      /^400 .*not emulated/,
    );
  });
});

describe('deleting an entity under an active receiver', () => {
  it("the receiver's first error is MessagingEntityNotFound (not a retryable communication problem)", async () => {
    const queue = uniqueName('doomed');
    await admin.createQueue(queue);
    const client = new ServiceBusClient(emulator.connectionString);
    const errors: string[] = [];
    const received: unknown[] = [];
    try {
      const receiver = client.createReceiver(queue);
      receiver.subscribe({
        processMessage: async (message) => {
          received.push(message.body);
        },
        processError: async (args) => {
          errors.push((args.error as { code?: string }).code ?? String(args.error));
        },
      });
      // A message through it: the receiving link is attached.
      await client.createSender(queue).sendMessages({ body: 'first' });
      await waitUntil(() => received.length > 0, 'the receiver to get a message');
      await admin.deleteQueue(queue);
      const [first] = await waitUntil(() => errors.length > 0 && errors, 'an error from the receiver');
      expect(first).toBe('MessagingEntityNotFound');
      await receiver.close();
    } finally {
      await client.close();
    }
  });
});
