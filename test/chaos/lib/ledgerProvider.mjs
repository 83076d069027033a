// The chaos runs' payment provider: an in-memory ledger of every charge (order, charge ID,
// Idempotency-Key), so a run can match each payment row with the charge the provider made.
// It was the payments demo's provider until the demo moved to a real @oncely/http server
// with per-account totals, which cannot tell which order a charge belongs to.
import { createServer } from 'node:http';
/**
 * A stand-in for a card processor such as Stripe: a tiny HTTP server on 127.0.0.1 with
 * its own in-memory ledger, outside the consumer's database. It honours an
 * `Idempotency-Key` header the way real providers do: a repeated key returns the
 * original charge and charges nothing; a repeated key with different parameters is
 * refused (422). Without a key every request is a new charge.
 *
 * @example
 * ```ts
 * const provider = await FakePaymentProvider.start();
 * await provider.charge({ orderId: 'o-1', amountCents: 4000, idempotencyKey: 'payments:o-1:charge' });
 * console.log(provider.totalCents); // 4000
 * await provider.close();
 * ```
 */
export class FakePaymentProvider {
  server;
  url;
  charges = [];
  byKey = new Map();
  /** Requests answered with an earlier charge because their key was seen before. */
  replays = 0;
  constructor(
    server,
    /** Base URL, for example `http://127.0.0.1:49152`. */
    url,
  ) {
    this.server = server;
    this.url = url;
  }
  /** Starts the server on a free port of 127.0.0.1. */
  static async start() {
    let provider;
    const server = createServer((request, response) => {
      provider.handle(request, response).catch((error) => {
        respond(response, 500, { error: String(error) });
      });
    });
    // Keep-alive sockets from fetch would otherwise hold close() open.
    server.keepAliveTimeout = 1000;
    await new Promise((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', resolve);
    });
    const { port } = server.address();
    provider = new FakePaymentProvider(server, `http://127.0.0.1:${port}`);
    return provider;
  }
  /** Charges made (replays excluded). */
  get chargeCount() {
    return this.charges.length;
  }
  /** Sum of every charge made, in cents. */
  get totalCents() {
    return this.charges.reduce((sum, charge) => sum + charge.amountCents, 0);
  }
  /** A copy of the ledger. */
  ledger() {
    return this.charges.map((charge) => ({ ...charge }));
  }
  /**
   * Client side: POSTs a charge over HTTP, with the `Idempotency-Key` header when a key
   * is given. Rejects on any non-2xx answer.
   */
  async charge(request, signal) {
    const headers = { 'content-type': 'application/json' };
    if (request.idempotencyKey !== undefined) headers['idempotency-key'] = request.idempotencyKey;
    const response = await fetch(`${this.url}/v1/charges`, {
      method: 'POST',
      headers,
      body: JSON.stringify({ orderId: request.orderId, amountCents: request.amountCents }),
      signal,
    });
    const answer = await response.json();
    if (!response.ok) throw new Error(`provider refused the charge (${response.status}): ${answer.error}`);
    return answer;
  }
  async close() {
    await new Promise((resolve) => {
      this.server.close(() => resolve());
      this.server.closeAllConnections();
    });
  }
  async handle(request, response) {
    if (request.method !== 'POST' || request.url !== '/v1/charges') {
      respond(response, 404, { error: 'not found' });
      return;
    }
    const chunks = [];
    for await (const chunk of request) chunks.push(chunk);
    const body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
    if (typeof body.orderId !== 'string' || typeof body.amountCents !== 'number') {
      respond(response, 400, { error: 'orderId (string) and amountCents (number) are required' });
      return;
    }
    const key = request.headers['idempotency-key'];
    const idempotencyKey = typeof key === 'string' && key !== '' ? key : undefined;
    if (idempotencyKey !== undefined) {
      const earlier = this.byKey.get(idempotencyKey);
      if (earlier) {
        if (earlier.orderId !== body.orderId || earlier.amountCents !== body.amountCents) {
          respond(response, 422, { error: 'Idempotency-Key reused with different parameters' });
          return;
        }
        this.replays++;
        respond(response, 200, earlier);
        return;
      }
    }
    const charge = {
      id: `ch_${this.charges.length + 1}`,
      orderId: body.orderId,
      amountCents: body.amountCents,
      idempotencyKey,
    };
    this.charges.push(charge);
    if (idempotencyKey !== undefined) this.byKey.set(idempotencyKey, charge);
    respond(response, 201, charge);
  }
}
function respond(response, status, body) {
  if (response.headersSent) return;
  response.writeHead(status, { 'content-type': 'application/json' });
  response.end(JSON.stringify(body));
}
