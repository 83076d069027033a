import { parentPort } from 'node:worker_threads';
import { ProviderServer } from './providerServer.js';

/** Messages between {@link FakePaymentProvider} (main thread) and this worker. */
export type ToWorker = { type: 'ledger'; id: number; account: string } | { type: 'close' };
export type FromWorker =
  | { type: 'ready'; url: string }
  | { type: 'failed'; error: string }
  | { type: 'charge'; account: string; amountCents: number }
  | { type: 'replay' }
  | { type: 'ledger'; id: number; charges: number; totalCents: number }
  | { type: 'closed' };

// The payment provider's thread: its HTTP server and its PGlite run here, on a core of
// their own, while the main thread runs the broker, the consumers and their PGlite.
const port = parentPort!;
const post = (message: FromWorker) => port.postMessage(message);

try {
  const server = await ProviderServer.start({
    onCharge: (account, amountCents) => post({ type: 'charge', account, amountCents }),
    onReplay: () => post({ type: 'replay' }),
  });
  port.on('message', async (message: ToWorker) => {
    if (message.type === 'ledger') {
      const ledger = await server.ledger(message.account);
      post({ type: 'ledger', id: message.id, ...ledger });
    } else {
      await server.close();
      post({ type: 'closed' });
      port.close();
    }
  });
  post({ type: 'ready', url: server.url });
} catch (error) {
  post({ type: 'failed', error: error instanceof Error ? (error.stack ?? error.message) : String(error) });
}
