import { parseArgs } from 'node:util';
import { type DemoProgress, type DemoResult, runDemo } from './runDemo.js';

/**
 * `npm run demo [-- --messages N --seed S --concurrency C --drop-ack R --duplicate-delivery R]`:
 * runs the payments scenario and prints one table. Exits 1 when Oncely's total is wrong.
 */
async function main(): Promise<number> {
  const { values } = parseArgs({
    options: {
      messages: { type: 'string', short: 'n' },
      seed: { type: 'string' },
      concurrency: { type: 'string' },
      'drop-ack': { type: 'string' },
      'duplicate-delivery': { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) {
    console.log(
      'usage: npm run demo -- [--messages N] [--seed S] [--concurrency C] [--drop-ack 0.2] [--duplicate-delivery 0.05]',
    );
    return 0;
  }
  const messages = intArg(values.messages, 'messages', 1500, 1);
  const seed = intArg(values.seed, 'seed', 42, 0);
  const concurrency = intArg(values.concurrency, 'concurrency', 8, 1);
  const dropAckRate = rateArg(values['drop-ack'], 'drop-ack', 0.2);
  const duplicateDeliveryRate = rateArg(values['duplicate-delivery'], 'duplicate-delivery', 0.05);

  console.log(
    `Oncely payments demo: ${messages} orders, seed ${seed}, concurrency ${concurrency}; the broker loses ` +
      `${percent(dropAckRate)} of acks and delivers ${percent(duplicateDeliveryRate)} twice.`,
  );
  const result = await runDemo({
    messages,
    seed,
    concurrency,
    dropAckRate,
    duplicateDeliveryRate,
    onProgress: (p) => console.log(progressLine(p)),
  });
  console.log(table(result));
  if (!result.drained) console.log('FAIL: the queues did not drain before the timeout.');
  if (result.ok) {
    const extra = result.naive.totalChargedCents - result.expectedTotalCents;
    console.log(`OK: Oncely charged each order once. The naive consumer overcharged by ${money(extra)}.`);
    return 0;
  }
  console.log(
    `FAIL: Oncely charged ${money(result.oncely.totalChargedCents)} in ${result.oncely.charges} charges ` +
      `(${result.oncely.paymentRows} payment rows) for ${result.orders} orders worth ${money(result.expectedTotalCents)}.`,
  );
  return 1;
}

function table(result: DemoResult): string {
  const rows: Array<[string, string, string]> = [
    ['messages sent', count(result.naive.sent), count(result.oncely.sent)],
    ['deliveries', count(result.naive.deliveries), count(result.oncely.deliveries)],
    ['duplicates skipped', count(result.naive.duplicatesSkipped), count(result.oncely.duplicatesSkipped)],
    ['charges made', count(result.naive.charges), count(result.oncely.charges)],
    ['total charged', money(result.naive.totalChargedCents), money(result.oncely.totalChargedCents)],
    ['expected total', money(result.expectedTotalCents), money(result.expectedTotalCents)],
    [
      'overcharge',
      money(result.naive.totalChargedCents - result.expectedTotalCents),
      money(result.oncely.totalChargedCents - result.expectedTotalCents),
    ],
  ];
  const header: [string, string, string] = ['', 'naive', 'oncely'];
  const widths = [0, 1, 2].map((i) => Math.max(...[header, ...rows].map((row) => row[i]!.length)));
  const line = (row: [string, string, string]) =>
    `  ${row[0].padEnd(widths[0]!)}   ${row[1].padStart(widths[1]!)}   ${row[2].padStart(widths[2]!)}`;
  const rule = `  ${'-'.repeat(widths[0]! + widths[1]! + widths[2]! + 6)}`;
  const summary =
    `${count(result.orders)} orders, ${count(result.published)} messages published ` +
    `(${count(result.producerDuplicates)} producer retries), ${(result.durationMs / 1000).toFixed(1)} s`;
  return ['', `  ${summary}`, '', line(header), rule, ...rows.map(line), ''].join('\n');
}

function progressLine(p: DemoProgress): string {
  return (
    `  [${(p.elapsedMs / 1000).toFixed(1).padStart(5)} s] published ${p.published}/${p.toPublish}; ` +
    `oncely ${p.oncelyProcessed}/${p.orders} orders paid (${p.oncelyDeliveries} deliveries); ` +
    `naive ${p.naiveDeliveries} deliveries`
  );
}

const currency = new Intl.NumberFormat('en-US', { style: 'currency', currency: 'USD' });
const money = (cents: number) => currency.format(cents / 100);
const count = (n: number) => n.toLocaleString('en-US');
const percent = (rate: number) => `${Math.round(rate * 1000) / 10}%`;

function intArg(value: string | undefined, name: string, fallback: number, min: number): number {
  if (value === undefined) return fallback;
  const parsed = Number(value);
  if (!Number.isInteger(parsed) || parsed < min)
    throw new UsageError(`--${name} must be an integer >= ${min}, got '${value}'`);
  return parsed;
}

function rateArg(value: string | undefined, name: string, fallback: number): number {
  if (value === undefined) return fallback;
  const parsed = Number(value);
  if (!(parsed >= 0 && parsed < 1))
    throw new UsageError(`--${name} must be a number from 0 to below 1, got '${value}'`);
  return parsed;
}

class UsageError extends Error {}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    console.error(error instanceof UsageError ? error.message : error);
    process.exitCode = error instanceof UsageError ? 2 : 1;
  },
);
