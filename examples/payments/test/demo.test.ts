import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { silentLogger } from '@oncely/core';
import { describe, expect, it, vi } from 'vitest';
import { requestCharge } from '../src/chargeClient.js';
import { FakePaymentProvider } from '../src/FakePaymentProvider.js';
import { type DemoProgress, runDemo } from '../src/runDemo.js';

const DEMO = fileURLToPath(new URL('../dist/demo.js', import.meta.url));
const run = promisify(execFile);

/** Runs the built demo; resolves with its exit code and output, whatever the code. */
async function demo(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await run(process.execPath, [DEMO, ...args]);
    return { code: 0, stdout, stderr };
  } catch (error) {
    const failed = error as { code: number; stdout: string; stderr: string };
    return { code: failed.code, stdout: failed.stdout, stderr: failed.stderr };
  }
}

describe('payments demo', () => {
  it('Oncely charges each order exactly once over HTTP while the naive consumer overcharges', async () => {
    const progress: DemoProgress[] = [];
    const status: string[] = [];
    const result = await runDemo({
      messages: 150,
      seed: 7,
      // 1.5 s: the lease keeper renews well inside it on a loaded machine (with 300 ms,
      // renewals late a few times over could fail an order up to maxAttempts).
      visibilityTimeoutMs: 1500,
      logger: silentLogger,
      progressIntervalMs: 500,
      onProgress: (p) => progress.push(p),
      onStatus: (line) => status.push(line),
    });

    expect(result.drained).toBe(true);
    // The fault pattern really produced redeliveries and duplicates on both sides...
    expect(result.producerDuplicates).toBeGreaterThan(0);
    expect(result.oncely.deliveries).toBeGreaterThan(result.published);
    expect(result.naive.deliveries).toBeGreaterThan(result.published);
    // ...which the naive consumer paid for again, and Oncely skipped.
    expect(result.naive.totalChargedCents).toBeGreaterThan(result.expectedTotalCents);
    // Each order ran once; every other delivery was skipped as a duplicate, except (on a
    // loaded machine) runs whose lease ran out mid-handler: they failed and came back.
    expect(result.oncely.processed).toBe(result.orders);
    expect(result.oncely.duplicatesSkipped).toBeGreaterThan(0);
    expect(result.oncely.duplicatesSkipped).toBeLessThanOrEqual(result.oncely.deliveries - result.orders);
    expect(result.oncely.totalChargedCents).toBe(result.expectedTotalCents);
    expect(result.oncely.charges).toBe(150);
    expect(result.oncely.paymentRows).toBe(150);
    expect(result.oncely.distinctPaymentOrders).toBe(150);
    expect(result.ok).toBe(true);

    // Where the duplicates came from: the sources add up to every delivery beyond one per order.
    for (const side of [result.naive, result.oncely]) {
      const { producerRetries, lostAcks, brokerDuplicates, otherRedeliveries } = side.sources;
      expect(producerRetries).toBe(result.producerDuplicates);
      expect(lostAcks).toBeGreaterThan(0);
      expect(brokerDuplicates).toBeGreaterThan(0);
      expect(otherRedeliveries).toBeGreaterThanOrEqual(0);
      expect(producerRetries + lostAcks + brokerDuplicates + otherRedeliveries).toBe(
        side.deliveries - result.orders,
      );
    }
    // Progress agrees with the table: the final snapshot holds the table's figures.
    const last = progress.at(-1)!;
    expect(last).toBe(result.progress);
    expect(last.final).toBe(true);
    expect(progress.filter((p) => p.final)).toHaveLength(1);
    expect(last.naive).toEqual({
      deliveries: result.naive.deliveries,
      duplicatesSkipped: result.naive.duplicatesSkipped,
      charges: result.naive.charges,
    });
    expect(last.oncely).toEqual({
      deliveries: result.oncely.deliveries,
      duplicatesSkipped: result.oncely.duplicatesSkipped,
      charges: result.oncely.charges,
    });
    expect(last.published).toBe(result.published);
    expect(status[0]).toMatch(/^starting the embedded databases/);
  });

  it('the provider charges once per Idempotency-Key per account, replays the first charge, and refuses another body (422)', async () => {
    const provider = await FakePaymentProvider.start();
    try {
      const order = { orderId: 'o-1', amountCents: 4000 };
      const first = await requestCharge(provider.url, order, { account: 'a', idempotencyKey: 'k-1' });
      const again = await requestCharge(provider.url, order, { account: 'a', idempotencyKey: 'k-1' });
      expect(again).toEqual(first);
      // Counted by the provider's thread when its response finished: reported asynchronously.
      // vitest's default 1 s would be a speed target; 30 s bounds a hang (test timeout 120 s).
      await vi.waitFor(() => expect(provider.replays).toBe(1), { timeout: 30_000, interval: 50 });
      // The same key from another account is another charge: keys are scoped per account.
      const otherAccount = await requestCharge(provider.url, order, { account: 'b', idempotencyKey: 'k-1' });
      expect(otherAccount.id).not.toBe(first.id);
      await expect(
        requestCharge(
          provider.url,
          { orderId: 'o-1', amountCents: 5000 },
          { account: 'a', idempotencyKey: 'k-1' },
        ),
      ).rejects.toThrow(/\(422\)/);
      // Without a key every request is a charge.
      await requestCharge(provider.url, order, { account: 'a' });
      await requestCharge(provider.url, order, { account: 'a' });
      expect(await provider.ledger('a')).toEqual({ charges: 3, totalCents: 12_000 });
      expect(await provider.ledger('b')).toEqual({ charges: 1, totalCents: 4000 });
    } finally {
      await provider.close();
    }
  });

  // The command line runs the built demo. Without it (examples/payments not built) the
  // tests skip saying so, and fail under CI=true, where the build comes first.
  if (!existsSync(DEMO)) {
    const reason = `needs the built demo (${DEMO}): run npm run build`;
    if (process.env.CI === 'true')
      it(`command line: ${reason}`, () => {
        throw new Error(`CI=true and ${reason}`);
      });
    else it.skip(`command line: ${reason}`, () => {});
  }

  describe.skipIf(!existsSync(DEMO))('command line', () => {
    it('--help prints the usage with the defaults and exits 0', async () => {
      const { code, stdout } = await demo('--help');
      expect(code).toBe(0);
      expect(stdout).toMatch(/^usage: npm run demo/);
      expect(stdout).toMatch(/--messages N .*\(default 1500\)/);
      expect(stdout).toMatch(/--drop-ack R .*\(default 0\.2\)/);
    });

    it('an unknown flag or a bad value prints the usage on stderr and exits 2, without a stack trace', async () => {
      for (const args of [
        ['--mesages', '10'],
        ['--messages', 'ten'],
      ]) {
        const { code, stdout, stderr } = await demo(...args);
        expect(code).toBe(2);
        expect(stdout).toBe('');
        expect(stderr).toMatch(/usage: npm run demo/);
        expect(stderr).not.toMatch(/\n\s+at /);
      }
      expect((await demo('--mesages', '10')).stderr).toMatch(/Unknown option '--mesages'/);
      expect((await demo('--messages', 'ten')).stderr).toMatch(
        /--messages must be an integer >= 1, got 'ten'/,
      );
    });
  });
});
