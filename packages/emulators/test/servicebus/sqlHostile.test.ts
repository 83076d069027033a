// Hostile input to the SQL filter language, through the real @azure/service-bus client
// against the emulator running in a child process (the CLI), so that an emulator that
// blocks its thread fails the test by its hang guard instead of freezing the test runner.
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ServiceBusClient } from '@azure/service-bus';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ServiceBusEmulator, startServiceBusEmulator } from '../../dist/servicebus/index.js';
import { compileFilter, matchesFilter } from '../../dist/servicebus/sql/index.js';

const CLI = fileURLToPath(new URL('../../dist/cli.js', import.meta.url));

/** A LIKE with many `%`s: a backtracking RegExp tries every split of the value among them. */
const HOSTILE_LIKE = `payload LIKE '${'%a'.repeat(12)}b'`;

describe('a hostile LIKE pattern through the real client', () => {
  let child: ChildProcess;
  let client: ServiceBusClient;

  beforeAll(async () => {
    const dir = await mkdtemp(join(tmpdir(), 'sb-sql-hostile-'));
    const configPath = join(dir, 'Config.json');
    await writeFile(
      configPath,
      JSON.stringify({
        UserConfig: {
          Namespaces: [
            {
              Name: 'sbemulatorns',
              Topics: [
                {
                  Name: 'hostile',
                  Subscriptions: [
                    { Name: 'all' },
                    {
                      Name: 'like',
                      Rules: [
                        {
                          Name: 'like',
                          Properties: { FilterType: 'Sql', SqlFilter: { SqlExpression: HOSTILE_LIKE } },
                        },
                      ],
                    },
                  ],
                },
              ],
            },
          ],
          Logging: { Type: 'File' },
        },
      }),
    );
    child = spawn(process.execPath, [CLI, 'servicebus', '--config', configPath, '--port', '0'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const connectionString = await new Promise<string>((resolve, reject) => {
      let out = '';
      child.stdout!.on('data', (chunk: Buffer) => {
        out += chunk.toString();
        const match = /connection string: (\S+)/.exec(out);
        if (match) resolve(match[1]!);
      });
      child.once('exit', (code) => reject(new Error(`the CLI exited with ${code}: ${out}`)));
    });
    client = new ServiceBusClient(connectionString, { retryOptions: { maxRetries: 0, timeoutInMs: 20_000 } });
  });

  afterAll(async () => {
    // The emulator first: a blocked one would never answer the client's close.
    if (child && child.exitCode === null) {
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGKILL');
      await exited;
    }
    await client?.close().catch(() => undefined);
  });

  it('routes a long value past a many-% LIKE without blocking the emulator', async () => {
    const sender = client.createSender('hostile');
    // 'a' × 400 with no 'b': the filter does not match; a backtracking matcher needs ~C(400, 12) steps.
    await sender.sendMessages([
      { body: 'long', messageId: 'long', applicationProperties: { payload: 'a'.repeat(400) } },
      { body: 'short', messageId: 'short', applicationProperties: { payload: `${'a'.repeat(12)}b` } },
    ]);
    const receive = async (subscription: string, count: number) => {
      const receiver = client.createReceiver('hostile', subscription, { receiveMode: 'receiveAndDelete' });
      const got: string[] = [];
      while (got.length < count) {
        const batch = await receiver.receiveMessages(count - got.length, { maxWaitTimeInMs: 5_000 });
        if (batch.length === 0) break;
        got.push(...batch.map((m) => String(m.messageId)));
      }
      await receiver.close();
      return got.sort();
    };
    expect(await receive('all', 2)).toEqual(['long', 'short']);
    expect(await receive('like', 2)).toEqual(['short']);
  }, 60_000);
});

describe('LIKE semantics kept by the linear matcher', () => {
  const like = (value: string, pattern: string, escapeChar?: string) =>
    matchesFilter(
      compileFilter(
        `v LIKE '${pattern.replaceAll("'", "''")}'${escapeChar ? ` ESCAPE '${escapeChar}'` : ''}`,
      ),
      { application_properties: { v: value } },
    );

  it.each([
    ['abc', 'abc', undefined, true],
    ['abc', 'ab', undefined, false],
    ['abc', '%', undefined, true],
    ['', '%', undefined, true],
    ['', '_', undefined, false],
    ['abc', 'a%c', undefined, true],
    ['abcbc', '%bc', undefined, true],
    ['abcbd', '%bc', undefined, false],
    ['aXbXc', 'a%b%c', undefined, true],
    ['a%c', 'a!%c', '!', true],
    ['abc', 'a!%c', '!', false],
    ['a_c', 'a!_c', '!', true],
    ['a!c', 'a!!c', '!', true],
    // RegExp metacharacters are literal characters in a LIKE pattern.
    ['a.c', 'a.c', undefined, true],
    ['abc', 'a.c', undefined, false],
    ['(x)[y]{2}^$|\\+*?', '(x)[y]{2}^$|\\+*?', undefined, true],
    ["it's", "it's", undefined, true],
    // `_` is one character, astral ones included.
    ['😀', '_', undefined, true],
    ['line1\nline2', 'line1_line2', undefined, true],
    ['line1\nline2', '%2', undefined, true],
  ])('%j LIKE %j (escape %j) → %s', (value, pattern, escapeChar, expected) => {
    expect(like(value, pattern, escapeChar)).toBe(expected);
  });
});

describe('rules the service accepts, through the real client (emulator in process)', () => {
  let emulator: ServiceBusEmulator;
  let client: ServiceBusClient;

  beforeAll(async () => {
    emulator = await startServiceBusEmulator({
      port: 0,
      config: {
        UserConfig: {
          Namespaces: [
            {
              Name: 'sbemulatorns',
              Topics: [
                {
                  Name: 'failing-action',
                  Subscriptions: [
                    {
                      Name: 'half',
                      Rules: [
                        {
                          Name: 'half',
                          Properties: {
                            FilterType: 'Sql',
                            SqlFilter: { SqlExpression: '1 = 1' },
                            Action: { SqlExpression: 'SET a = 1; SET b = n / 0; SET c = 3' },
                          },
                        },
                      ],
                    },
                  ],
                },
              ],
            },
          ],
          Logging: { Type: 'File' },
        },
      },
    });
    client = new ServiceBusClient(emulator.connectionString);
  });

  afterAll(async () => {
    await client?.close();
    await emulator?.stop();
  });

  it('a filter on a property named with non-ASCII letters (regular identifiers are Unicode letters)', async () => {
    const topic = 'unicode';
    emulator.createTopic(topic);
    emulator.createSubscription(topic, 'letters');
    const rules = client.createRuleManager(topic, 'letters');
    await rules.deleteRule('$Default');
    await rules.createRule('letters', { sqlExpression: "café = 1 AND größe > 2 AND 数量 = 'x'" });
    await client.createSender(topic).sendMessages([
      { body: 'yes', messageId: 'yes', applicationProperties: { café: 1, größe: 3, 数量: 'x' } },
      { body: 'no', messageId: 'no', applicationProperties: { café: 2, größe: 3, 数量: 'x' } },
    ]);
    const receiver = client.createReceiver(topic, 'letters', { receiveMode: 'receiveAndDelete' });
    const [message] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 5_000 });
    expect(message?.messageId).toBe('yes');
    expect(emulator.inspect(`${topic}/Subscriptions/letters`).total).toBe(0);
    await receiver.close();
  });

  it('a filter or action naming an @parameter is refused (the client does not send parameters over AMQP)', async () => {
    emulator.createTopic('parameters');
    emulator.createSubscription('parameters', 's');
    const rules = client.createRuleManager('parameters', 's');
    const refusal = (promise: Promise<unknown>) =>
      promise.then(
        () => 'accepted',
        (error: Error) => error.message,
      );
    // Accepted, `a = @p` would never match and `SET b = @v` would set null: routing lost silently.
    expect(
      await refusal(rules.createRule('p', { sqlExpression: 'a = @p', sqlParameters: { '@p': 1 } })),
    ).toMatch(/@p is a SQL parameter.*not emulated/);
    expect(
      await refusal(
        rules.createRule(
          'v',
          { sqlExpression: 'a = 1' },
          { sqlExpression: 'SET b = @v', sqlParameters: { '@v': 2 } },
        ),
      ),
    ).toMatch(/@v is a SQL parameter.*not emulated/);
    expect(emulator.messages('parameters/Subscriptions/s')).toHaveLength(0);
    const names: string[] = [];
    for await (const rule of rules.listRules()) names.push(rule.name);
    expect(names).toEqual(['$Default']);
  });

  it('AND, OR and NOT take predicates, as the grammar says: a bare value under them is refused', async () => {
    emulator.createTopic('predicates');
    emulator.createSubscription('predicates', 's');
    const rules = client.createRuleManager('predicates', 's');
    for (const sqlExpression of [
      'a = 1 AND color',
      'color OR a = 1',
      'NOT quantity',
      'NOT (color) AND a = 1',
    ]) {
      const outcome = await rules.createRule('r', { sqlExpression }).then(
        () => 'accepted',
        (error: Error) => error.message,
      );
      // Accepted, each would be unknown for every message: a rule that silently never matches.
      expect(outcome, sqlExpression).toMatch(/is not a condition/);
    }
  });

  it('an action that fails part-way leaves the copy as sent (no statement before the failing one applied)', async () => {
    await client
      .createSender('failing-action')
      .sendMessages({ body: 'x', messageId: 'm', applicationProperties: { n: 4 } });
    const receiver = client.createReceiver('failing-action', 'half', { receiveMode: 'receiveAndDelete' });
    const [message] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 5_000 });
    expect(message?.applicationProperties).toEqual({ n: 4, RuleName: 'half' });
    await receiver.close();
  });
});
