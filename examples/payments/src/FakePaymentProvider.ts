import { Worker } from 'node:worker_threads';
import type { AccountLedger } from './providerServer.js';
import type { FromWorker, ToWorker } from './providerWorker.js';

export type { AccountLedger, Charge } from './providerServer.js';

/**
 * A stand-in for a card processor such as Stripe: `ProviderServer` (an HTTP server on
 * `@oncely/http` with its own PGlite ledger) started in a worker thread, so the
 * provider's database works on another core than the consumers'. This is its handle in
 * the main thread: the URL, live counters for progress lines, and the committed ledger.
 *
 * The worker runs the built `dist/providerWorker.js` (run `npm run build` first).
 *
 * @example
 * ```ts
 * const provider = await FakePaymentProvider.start();
 * await fetch(`${provider.url}/v1/charges`, {
 *   method: 'POST',
 *   headers: { 'content-type': 'application/json', 'x-account': 'shop', 'idempotency-key': 'payments:o-1:charge' },
 *   body: JSON.stringify({ orderId: 'o-1', amountCents: 4000 }),
 * });
 * console.log(await provider.ledger('shop')); // { charges: 1, totalCents: 4000 }
 * await provider.close();
 * ```
 */
export class FakePaymentProvider {
  /** Requests answered with an earlier charge because their key was seen before. */
  replays = 0;
  private readonly writtenByAccount = new Map<string, AccountLedger>();
  private readonly pending = new Map<
    number,
    { resolve: (ledger: AccountLedger) => void; reject: (error: Error) => void }
  >();
  private nextId = 0;
  private closing: Promise<void> | undefined;

  private constructor(
    private readonly worker: Worker,
    /** Base URL, for example `http://127.0.0.1:49152`. */
    readonly url: string,
  ) {}

  /** Starts the worker, its database and its server; resolves once it listens. */
  static start(): Promise<FakePaymentProvider> {
    // dist/ from both src/ (tests) and dist/ (the demo): a worker cannot run TypeScript.
    const worker = new Worker(new URL('../dist/providerWorker.js', import.meta.url));
    return new Promise<FakePaymentProvider>((resolve, reject) => {
      let provider: FakePaymentProvider | undefined;
      // One set of listeners for the worker's whole life (never removeAllListeners: the
      // Worker keeps internal listeners of its own).
      worker.on('message', (message: FromWorker) => {
        if (message.type === 'ready') {
          provider = new FakePaymentProvider(worker, message.url);
          resolve(provider);
        } else if (message.type === 'failed') {
          reject(new Error(`payment provider failed to start: ${message.error}`));
          void worker.terminate();
        } else {
          provider?.receive(message);
        }
      });
      const fail = (error: Error) => {
        reject(error);
        provider?.failPending(error);
      };
      worker.on('error', fail);
      worker.on('exit', (code) => fail(new Error(`payment provider worker exited with code ${code}`)));
    });
  }

  /** Charges the provider's handler wrote for `account` so far (for progress lines; `ledger()` is the committed figure). */
  written(account: string): AccountLedger {
    return { ...(this.writtenByAccount.get(account) ?? { charges: 0, totalCents: 0 }) };
  }

  /** The committed ledger of `account`, read from the provider's database. */
  ledger(account: string): Promise<AccountLedger> {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.post({ type: 'ledger', id, account });
    });
  }

  /** Closes the server and its database, then ends the worker. */
  close(): Promise<void> {
    this.closing ??= new Promise<void>((resolve) => {
      // A worker that does not answer is ended anyway.
      const timer = setTimeout(resolve, 10_000);
      this.onClosed = () => {
        clearTimeout(timer);
        resolve();
      };
      this.worker.once('exit', this.onClosed);
      this.post({ type: 'close' });
    }).then(() => this.worker.terminate().then(() => {}));
    return this.closing;
  }

  private onClosed: (() => void) | undefined;

  private receive(message: FromWorker): void {
    switch (message.type) {
      case 'charge': {
        const written = this.writtenByAccount.get(message.account) ?? { charges: 0, totalCents: 0 };
        this.writtenByAccount.set(message.account, {
          charges: written.charges + 1,
          totalCents: written.totalCents + message.amountCents,
        });
        return;
      }
      case 'replay':
        this.replays++;
        return;
      case 'ledger':
        this.pending.get(message.id)?.resolve({ charges: message.charges, totalCents: message.totalCents });
        this.pending.delete(message.id);
        return;
      case 'closed':
        this.onClosed?.();
        return;
    }
  }

  /** A worker that failed or exited answers no more questions. */
  private failPending(error: Error): void {
    for (const { reject } of this.pending.values()) reject(error);
    this.pending.clear();
  }

  private post(message: ToWorker): void {
    this.worker.postMessage(message);
  }
}
