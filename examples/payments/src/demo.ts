import { parseArgs } from 'node:util';
import { type DemoProgress, type DemoResult, runDemo } from './runDemo.js';

const DEFAULTS = { messages: 1500, seed: 42, concurrency: 8, dropAck: 0.2, duplicateDelivery: 0.05 };

const USAGE = `usage: npm run demo -- [options]

Runs the payments scenario (a naive consumer beside an Oncely one, on the memory broker
and embedded PostgreSQL) and prints one table. Exits 0 when Oncely charged each order
once, 1 when it did not, 2 on bad usage.

options:
  -n, --messages N              distinct orders                      (default ${DEFAULTS.messages})
      --seed S                  seeds amounts, producer retries, faults (default ${DEFAULTS.seed})
      --concurrency C           handlers in flight per consumer      (default ${DEFAULTS.concurrency})
      --drop-ack R              share of acks the broker loses, 0..<1 (default ${DEFAULTS.dropAck})
      --duplicate-delivery R    share of deliveries handed out twice  (default ${DEFAULTS.duplicateDelivery})
      --store-url URL           run the Oncely consumer on MySQL / MariaDB (@oncely/mysql):
                                mysql://root@127.0.0.1:3306/test (default: embedded PostgreSQL)
  -h, --help                    this message`;

/**
 * `npm run demo [-- --messages N --seed S --concurrency C --drop-ack R --duplicate-delivery R]`:
 * runs the payments scenario and prints one table. Exits 1 when Oncely's total is wrong,
 * 2 on bad usage (with the usage message, never a stack trace).
 */
async function main(argv: string[]): Promise<number> {
  let values: ReturnType<typeof parseOptions>['values'];
  try {
    ({ values } = parseOptions(argv));
  } catch (error) {
    // parseArgs refuses unknown flags and missing values with a TypeError: bad usage.
    throw new UsageError((error as Error).message);
  }
  if (values.help) {
    console.log(USAGE);
    return 0;
  }
  const messages = intArg(values.messages, 'messages', DEFAULTS.messages, 1);
  const seed = intArg(values.seed, 'seed', DEFAULTS.seed, 0);
  const concurrency = intArg(values.concurrency, 'concurrency', DEFAULTS.concurrency, 1);
  const dropAckRate = rateArg(values['drop-ack'], 'drop-ack', DEFAULTS.dropAck);
  const duplicateDeliveryRate = rateArg(
    values['duplicate-delivery'],
    'duplicate-delivery',
    DEFAULTS.duplicateDelivery,
  );

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
    ...(values['store-url'] === undefined ? {} : { storeUrl: values['store-url'] }),
    onStatus: (line) => console.log(line),
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

function parseOptions(argv: string[]) {
  return parseArgs({
    args: argv,
    options: {
      messages: { type: 'string', short: 'n' },
      seed: { type: 'string' },
      concurrency: { type: 'string' },
      'drop-ack': { type: 'string' },
      'duplicate-delivery': { type: 'string' },
      'store-url': { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  });
}

function table(result: DemoResult): string {
  const { naive, oncely } = result;
  const extra = (tally: typeof naive) => tally.deliveries - result.orders;
  const rows: Array<[string, string, string]> = [
    ['messages sent', count(naive.sent), count(oncely.sent)],
    ['deliveries', count(naive.deliveries), count(oncely.deliveries)],
    ['deliveries beyond one per order', count(extra(naive)), count(extra(oncely))],
    ['  from producer retries', count(naive.sources.producerRetries), count(oncely.sources.producerRetries)],
    ['  from lost acks (redelivered)', count(naive.sources.lostAcks), count(oncely.sources.lostAcks)],
    [
      '  from broker duplicates',
      count(naive.sources.brokerDuplicates),
      count(oncely.sources.brokerDuplicates),
    ],
    [
      '  from other redeliveries',
      count(naive.sources.otherRedeliveries),
      count(oncely.sources.otherRedeliveries),
    ],
    ['duplicates skipped', count(naive.duplicatesSkipped), count(oncely.duplicatesSkipped)],
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
    `(${count(result.producerDuplicates)} producer retries), ${(result.durationMs / 1000).toFixed(1)} s ` +
    `(${(result.startupMs / 1000).toFixed(1)} s of it starting the databases); ` +
    `charges the provider answered from a stored Idempotency-Key response: ${count(result.providerReplays)}`;
  return ['', `  ${summary}`, '', line(header), rule, ...rows.map(line), ''].join('\n');
}

/** The same counters as the table's rows, so the last line (`done`) matches it exactly. */
function progressLine(p: DemoProgress): string {
  const side = (name: string, c: DemoProgress['oncely']) =>
    `${name} ${count(c.deliveries)} deliveries, ${count(c.duplicatesSkipped)} duplicates skipped, ${count(c.charges)} charges`;
  const stamp = p.final ? ' done ' : `${(p.elapsedMs / 1000).toFixed(1).padStart(5)} s`;
  return (
    `  [${stamp}] published ${count(p.published)}/${count(p.toPublish)}; ` +
    `${side('naive', p.naive)}; ${side('oncely', p.oncely)}`
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

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    if (error instanceof UsageError) {
      console.error(`${error.message}\n\n${USAGE}`);
      process.exitCode = 2;
      return;
    }
    console.error(error);
    process.exitCode = 1;
  },
);
