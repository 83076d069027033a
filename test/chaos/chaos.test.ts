/**
 * The chaos harness (run.mjs, see README.md) in CI: a small run per landed broker —
 * 1,000 orders with producer duplicates and poison messages, 3 consumers, SIGKILLs at
 * random moments and at both crash points, lost acks, handler stalls past the lease, a
 * database cut through the TCP proxy, broker connection drops and (Kafka, fauxqs) a
 * broker restart — must end with every order applied exactly once: lost = 0 and
 * doubled = 0, counted from the database and the payment provider's ledger.
 *
 * And the proof that the check can fail: the same harness against deliberately broken
 * consumers must report lost or doubled effects.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { requireService } from '@oncely/testkit';
import amqp from 'amqplib';
import pg from 'pg';
import { afterAll, describe, expect, it, onTestFinished } from 'vitest';
import { kafkaBuilt } from './lib/options.mjs';
import { formatDetails, formatTable } from './lib/report.mjs';
import { runChaos } from './lib/runChaos.mjs';

type ChaosResult = Awaited<ReturnType<typeof runChaos>>;

const DATABASE_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const RABBITMQ_URL = process.env.RABBITMQ_URL ?? 'amqp://guest:guest@127.0.0.1:5672';

const hasPostgres = await requireService('PostgreSQL', async () => {
  const client = new pg.Client({ connectionString: DATABASE_URL, connectionTimeoutMillis: 3000 });
  await client.connect();
  await client.end();
});
const hasRabbit = await requireService('RabbitMQ', async () => {
  const connection = await amqp.connect(RABBITMQ_URL);
  await connection.close();
});
// The Kafka run starts a broker of its own (test/emulators/kafka/start.sh), which needs Java.
const hasKafka =
  kafkaBuilt() &&
  (await requireService('Java (for the Kafka test broker)', () => {
    const java = spawnSync('java', ['-version'], { encoding: 'utf8' });
    if (java.status !== 0) throw new Error(`java -version failed: ${java.error?.message ?? java.stderr}`);
  }));

/** The small CI load. */
const SMALL = { messages: 1000, consumers: 3, kills: 4, concurrency: 6, seed: 7 };

const results: ChaosResult[] = [];

afterAll(() => {
  if (results.length > 0) console.log(`\n${formatTable(results)}\n`);
});

async function chaos(broker: string, extra: Record<string, unknown> = {}): Promise<ChaosResult> {
  // Consumer logs are kept as evidence when the test fails (the harness keeps them only
  // when its own check fails).
  const logDir = mkdtempSync(join(tmpdir(), `oncely-chaos-test-${broker}-`));
  onTestFinished(({ task }) => {
    if (task.result?.state === 'pass') rmSync(logDir, { recursive: true, force: true });
    else console.log(`consumer logs kept in ${logDir}`);
  });
  const result = await runChaos({ ...SMALL, broker, logDir, ...extra });
  results.push(result);
  console.log(formatDetails(result));
  return result;
}

function expectExactlyOnce(result: ChaosResult, options: { brokerRestart?: boolean } = {}): void {
  // Every order has exactly one payment row and one charge; nothing was left behind.
  expect({
    lost: result.lost,
    doubled: result.doubled,
    lostIds: result.lostIds,
    doubledIds: result.doubledIds,
  }).toEqual({
    lost: 0,
    doubled: 0,
    lostIds: [],
    doubledIds: [],
  });
  expect(result.paymentRows).toBe(result.messages);
  expect(result.charges).toBe(result.messages);
  expect(result.chargedCents).toBe(result.expectedCents);
  expect(result.mismatched).toBe(0);
  expect(result.drained).toBe(true);
  expect(result.poisonAccounted).toBe(true);
  expect(result.ordersDeadLettered).toEqual([]);
  // The faults really happened: the run proves nothing otherwise.
  expect(result.kills).toBe(SMALL.kills);
  expect(result.killsBy.beforeCommit + result.killsBy.afterCommit).toBeGreaterThanOrEqual(1);
  expect(result.duplicatesSkipped).toBeGreaterThan(0);
  expect(result.timeline.some((t) => t.what.startsWith('database cut'))).toBe(true);
  if (options.brokerRestart)
    expect(result.timeline.some((t) => t.what.startsWith('broker restart done'))).toBe(true);
  expect(result.unexpectedExits).toBe(0);
}

describe.skipIf(!hasPostgres)('chaos: every order applied exactly once under kills and outages', () => {
  it('memory broker (in-process virtual processes)', async () => {
    expectExactlyOnce(await chaos('memory'));
  });

  it.skipIf(!hasRabbit)('RabbitMQ', async () => {
    const result = await chaos('rabbitmq');
    expectExactlyOnce(result);
    expect(result.timeline.some((t) => t.what.startsWith('broker connections dropped'))).toBe(true);
  });

  it('SQS on fauxqs', async () => {
    const result = await chaos('sqs');
    expectExactlyOnce(result, { brokerRestart: true });
    expect(result.timeline.some((t) => t.what.startsWith('broker connections dropped'))).toBe(true);
  });

  it.skipIf(!hasKafka)('Kafka (a broker of its own, restarted mid-run)', async () => {
    const result = await chaos('kafka', { kills: 3 });
    expect(result.lost).toBe(0);
    expect(result.doubled).toBe(0);
    expect(result.drained).toBe(true);
    expect(result.poisonAccounted).toBe(true);
    expect(result.kills).toBe(3);
    expect(result.timeline.some((t) => t.what.startsWith('database cut'))).toBe(true);
    expect(result.timeline.some((t) => t.what.startsWith('broker restart done'))).toBe(true);
  });
});

describe.skipIf(!hasPostgres)('chaos: the check fails for a broken consumer', () => {
  it('acking before the commit loses orders (memory broker)', async () => {
    const result = await chaos('memory', { messages: 300, kills: 3, defect: 'ack-before-commit' });
    expect(result.ok).toBe(false);
    expect(result.lost + result.doubled).toBeGreaterThan(0);
  });

  it('committing the marker separately loses orders (SQS, real processes)', async () => {
    const result = await chaos('sqs', {
      messages: 300,
      kills: 3,
      defect: 'marker-separate-commit',
      brokerRestart: false,
    });
    expect(result.ok).toBe(false);
    expect(result.lost + result.doubled).toBeGreaterThan(0);
  });
});
