// Subscription rules with the real @azure/service-bus client: SQL filters and SQL actions
// from Config.json and from the rule manager (`client.createRuleManager`, which speaks
// com.microsoft:add-rule / remove-rule / enumerate-rules on $management), correlation
// filters beside them, and the errors a bad expression gets. Nothing here is mocked.
import {
  type RuleProperties,
  ServiceBusClient,
  type ServiceBusError,
  type ServiceBusMessage,
  type ServiceBusReceivedMessage,
  type ServiceBusRuleManager,
} from '@azure/service-bus';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RuleConfig } from '../../dist/servicebus/index.js';
import { type ServiceBusEmulator, startServiceBusEmulator } from '../../dist/servicebus/index.js';
import { uniqueName } from './support.js';

/** Subscription name → its SQL filter, and the IDs of the four messages below it must get. */
const ROUTES: Array<{ name: string; sql: string; expected: string[] }> = [
  // The official samples' filters (topicFilters / ruleManager samples).
  { name: 'blue', sql: "color = 'blue'", expected: ['m1'] },
  { name: 'big-high', sql: "quantity > 10 AND priority = 'high'", expected: ['m1', 'm3'] },
  { name: 'label', sql: "sys.Label = 'important'", expected: ['m2'] },
  // A missing property is unknown: <> does not match it.
  { name: 'not-red', sql: "color <> 'red'", expected: ['m1', 'm4'] },
  { name: 'in-list', sql: "color IN ('red', 'green')", expected: ['m2', 'm4'] },
  { name: 'like', sql: "region LIKE 'eu-%'", expected: ['m1'] },
  { name: 'like-escape', sql: "code LIKE 'A\\_%' ESCAPE '\\'", expected: ['m2'] },
  { name: 'is-null', sql: 'color IS NULL', expected: ['m3'] },
  { name: 'exists', sql: 'EXISTS(user.vip)', expected: ['m3'] },
  { name: 'arithmetic', sql: 'quantity * price >= 100', expected: ['m1', 'm4'] },
  // m4: NOT(true) OR unknown is unknown, so no match.
  {
    name: 'not-or',
    sql: "NOT (priority = 'low') OR sys.CorrelationId = 'c-1'",
    expected: ['m1', 'm2', 'm3'],
  },
  { name: 'user-and-sys', sql: "user.color = 'blue' AND sys.To = 'warehouse'", expected: ['m1'] },
  { name: 'modulo', sql: 'quantity % 2 = 0', expected: ['m1', 'm3'] },
  { name: 'delimited', sql: "[order-type] = 'retail'", expected: ['m3'] },
  { name: 'boolean', sql: 'express = TRUE', expected: ['m4'] },
  {
    name: 'message-id',
    sql: "sys.MessageId LIKE 'm_' AND sys.MessageId NOT IN ('m1', 'm2')",
    expected: ['m3', 'm4'],
  },
  {
    name: 'content-type',
    sql: "sys.ContentType = 'application/json' AND (quantity - 5) / 3 = 5",
    expected: ['m3'],
  },
  { name: 'false', sql: '1=0', expected: [] },
  { name: 'true', sql: '1=1', expected: ['m1', 'm2', 'm3', 'm4'] },
];

const MESSAGES: ServiceBusMessage[] = [
  {
    messageId: 'm1',
    to: 'warehouse',
    body: 1,
    applicationProperties: { color: 'blue', quantity: 12, priority: 'high', price: 10, region: 'eu-west' },
  },
  {
    messageId: 'm2',
    subject: 'important',
    correlationId: 'c-1',
    body: 2,
    applicationProperties: { color: 'red', quantity: 5, priority: 'low', price: 2, code: 'A_1' },
  },
  {
    messageId: 'm3',
    contentType: 'application/json',
    body: 3,
    applicationProperties: {
      quantity: 20,
      priority: 'high',
      price: 1,
      vip: true,
      'order-type': 'retail',
      region: 'us-east',
      code: 'AB',
    },
  },
  {
    messageId: 'm4',
    body: 4,
    applicationProperties: { color: 'green', quantity: 3, priority: 'low', price: 50, express: true },
  },
];

let emulator: ServiceBusEmulator;
let client: ServiceBusClient;

beforeAll(async () => {
  const sqlSubscriptions = ROUTES.map((route) => ({
    Name: route.name,
    Rules: [{ Name: 'only', Properties: { FilterType: 'Sql', SqlFilter: { SqlExpression: route.sql } } }],
  }));
  emulator = await startServiceBusEmulator({
    port: 0,
    config: {
      UserConfig: {
        Namespaces: [
          {
            Name: 'sbemulatorns',
            Topics: [
              {
                Name: 'routed',
                Subscriptions: [
                  { Name: 'all' },
                  {
                    Name: 'red-correlation',
                    Rules: [
                      {
                        Name: 'red',
                        Properties: {
                          FilterType: 'Correlation',
                          CorrelationFilter: { Properties: { color: 'red' } },
                        },
                      },
                    ],
                  },
                  {
                    Name: 'configured-action',
                    Rules: [
                      {
                        Name: 'tag-bulk',
                        Properties: {
                          FilterType: 'Sql',
                          SqlFilter: { SqlExpression: 'quantity >= 12' },
                          Action: { SqlExpression: "SET priority = 'bulk'; SET sys.Label = 'bulk-order'" },
                        },
                      },
                    ],
                  },
                  ...(sqlSubscriptions as Array<{ Name: string; Rules: RuleConfig[] }>),
                ],
              },
            ],
          },
        ],
      },
    },
  });
  client = new ServiceBusClient(emulator.connectionString);
  const sender = client.createSender('routed');
  await sender.sendMessages(MESSAGES);
  await sender.close();
});

afterAll(async () => {
  await client?.close();
  await emulator?.stop();
});

async function peekAll(topic: string, subscription: string): Promise<ServiceBusReceivedMessage[]> {
  const receiver = client.createReceiver(topic, subscription);
  const messages = await receiver.peekMessages(100);
  await receiver.close();
  return messages;
}

/** Every rule, through the rule manager's pager (enumerate-rules with top/skip). */
async function listRules(rules: ServiceBusRuleManager): Promise<RuleProperties[]> {
  const all: RuleProperties[] = [];
  for await (const rule of rules.listRules()) all.push(rule);
  return all;
}

async function errorOf(promise: Promise<unknown>): Promise<ServiceBusError> {
  try {
    await promise;
  } catch (error) {
    return error as ServiceBusError;
  }
  throw new Error('expected an error');
}

describe('SQL filters from Config.json', () => {
  it.each(ROUTES)('$name: $sql', async ({ name, expected }) => {
    const messages = await peekAll('routed', name);
    expect(messages.map((m) => m.messageId)).toEqual(expected);
  });

  it('correlation filters and the $Default rule keep working beside them', async () => {
    expect((await peekAll('routed', 'red-correlation')).map((m) => m.messageId)).toEqual(['m2']);
    expect((await peekAll('routed', 'all')).map((m) => m.messageId)).toEqual(['m1', 'm2', 'm3', 'm4']);
  });

  it("a configured action changes the subscription's copy only", async () => {
    const tagged = await peekAll('routed', 'configured-action');
    expect(tagged.map((m) => m.messageId)).toEqual(['m1', 'm3']);
    for (const message of tagged) {
      expect(message.applicationProperties).toMatchObject({ priority: 'bulk', RuleName: 'tag-bulk' });
      expect(message.subject).toBe('bulk-order');
    }
    // (Peeked once above; the client's peek cursor would start after it, so read the store.)
    const original = emulator.messages('routed/Subscriptions/all').find((m) => m.message_id === 'm1')!;
    expect(original.application_properties?.priority).toBe('high');
    expect(original.subject).toBeUndefined();
  });

  it('a rule that does not parse stops the emulator from starting, naming the rule', async () => {
    await expect(
      startServiceBusEmulator({
        port: 0,
        config: {
          Namespaces: [
            {
              Name: 'ns',
              Topics: [
                {
                  Name: 't',
                  Subscriptions: [
                    {
                      Name: 's',
                      Rules: [
                        {
                          Name: 'broken',
                          Properties: { FilterType: 'Sql', SqlFilter: { SqlExpression: 'color = ' } },
                        },
                      ],
                    },
                  ],
                },
              ],
            },
          ],
        },
      }),
    ).rejects.toThrow(/rule broken: expected a value, found the end of the expression/);
  });
});

describe('the rule manager (add-rule, remove-rule, enumerate-rules)', () => {
  it('lists $Default, replaces it with SQL and correlation rules, and routes by them', async () => {
    const topic = uniqueName('rules');
    emulator.createTopic(topic);
    emulator.createSubscription(topic, 'picky');
    const rules = client.createRuleManager(topic, 'picky');
    expect(await listRules(rules)).toEqual([
      { name: '$Default', filter: { sqlExpression: '1=1' }, action: {} },
    ]);

    await rules.deleteRule('$Default');
    const sender = client.createSender(topic);
    await sender.sendMessages({ messageId: 'dropped', body: 0, applicationProperties: { color: 'blue' } });
    expect(await peekAll(topic, 'picky')).toEqual([]);

    await rules.createRule('blue', { sqlExpression: "color = 'blue' AND quantity > 10" });
    await rules.createRule('order-7', {
      correlationId: 'order-7',
      applicationProperties: { kind: 'refund' },
    });
    const listed = await listRules(rules);
    expect(listed.map((r) => r.name)).toEqual(['blue', 'order-7']);
    expect(listed[0]!.filter).toEqual({ sqlExpression: "color = 'blue' AND quantity > 10" });
    expect(listed[1]!.filter).toMatchObject({
      correlationId: 'order-7',
      applicationProperties: { kind: 'refund' },
    });

    await sender.sendMessages([
      { messageId: 'big-blue', body: 1, applicationProperties: { color: 'blue', quantity: 11 } },
      { messageId: 'small-blue', body: 2, applicationProperties: { color: 'blue', quantity: 1 } },
      { messageId: 'refund', body: 3, correlationId: 'order-7', applicationProperties: { kind: 'refund' } },
      { messageId: 'other', body: 4, correlationId: 'order-7', applicationProperties: { kind: 'sale' } },
    ]);
    expect((await peekAll(topic, 'picky')).map((m) => m.messageId)).toEqual(['big-blue', 'refund']);

    await rules.deleteRule('order-7');
    expect((await listRules(rules)).map((r) => r.name)).toEqual(['blue']);
    await sender.close();
  });

  it('rule actions SET and REMOVE change the delivered copy; each action rule yields its own copy', async () => {
    const topic = uniqueName('actions');
    emulator.createTopic(topic);
    emulator.createSubscription(topic, 'annotated');
    const rules = client.createRuleManager(topic, 'annotated');
    await rules.deleteRule('$Default');
    await rules.createRule(
      'enrich',
      { sqlExpression: 'quantity > 10' },
      {
        sqlExpression:
          "SET total = quantity * price; SET tier = 'bulk'; REMOVE internal; SET sys.Label = 'big'",
      },
    );
    await rules.createRule('all-plain', { sqlExpression: '1=1' });
    expect((await listRules(rules)).find((r) => r.name === 'enrich')!.action).toEqual({
      sqlExpression:
        "SET total = quantity * price; SET tier = 'bulk'; REMOVE internal; SET sys.Label = 'big'",
    });

    const sender = client.createSender(topic);
    await sender.sendMessages({
      messageId: 'order',
      body: { id: 1 },
      applicationProperties: { quantity: 12, price: 2.5, internal: 'secret' },
    });
    await sender.close();
    const receiver = client.createReceiver(topic, 'annotated', { receiveMode: 'receiveAndDelete' });
    const received = await receiver.receiveMessages(2, { maxWaitTimeInMs: 5000 });
    if (received.length < 2) received.push(...(await receiver.receiveMessages(1, { maxWaitTimeInMs: 5000 })));
    await receiver.close();
    expect(received).toHaveLength(2);
    const [plain, enriched] = received;
    // The plain rule's copy is the message as sent.
    expect(plain!.applicationProperties).toEqual({ quantity: 12, price: 2.5, internal: 'secret' });
    expect(enriched!.applicationProperties).toEqual({
      quantity: 12,
      price: 2.5,
      total: 30,
      tier: 'bulk',
      RuleName: 'enrich',
    });
    expect(enriched!.subject).toBe('big');
    expect(enriched!.body).toEqual({ id: 1 });
  });

  it('a bad expression is refused on add-rule with a 400-class error that says what is wrong', async () => {
    const topic = uniqueName('bad-rules');
    emulator.createTopic(topic);
    emulator.createSubscription(topic, 's');
    const rules = client.createRuleManager(topic, 's');
    const syntax = await errorOf(rules.createRule('syntax', { sqlExpression: "color = = 'blue'" }));
    expect(syntax.message).toMatch(/Rule 'syntax': expected a value, found '=' \(at character 9\)/);
    const unknown = await errorOf(rules.createRule('sys', { sqlExpression: 'sys.Colour = 1' }));
    expect(unknown.message).toMatch(/sys\.Colour is not a system property/);
    const action = await errorOf(
      rules.createRule('action', { sqlExpression: '1=1' }, { sqlExpression: 'SET x = 1 REMOVE y' }),
    );
    expect(action.message).toMatch(/expected ';', found 'REMOVE'/);
    const notCondition = await errorOf(rules.createRule('value', { sqlExpression: 'quantity + 1' }));
    expect(notCondition.message).toMatch(/not a condition/);
    expect((await listRules(rules)).map((r) => r.name)).toEqual(['$Default']);

    const duplicate = await errorOf(rules.createRule('$Default', { sqlExpression: '1=1' }));
    expect(duplicate.code).toBe('MessagingEntityAlreadyExists');
    const missing = await errorOf(rules.deleteRule('nope'));
    expect(missing.code).toBe('MessagingEntityNotFound');
  });
});
