import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/** One charge in the provider's ledger. */
export interface Charge {
  id: string;
  orderId: string;
  amountCents: number;
  /** The Idempotency-Key it was created with, if any. */
  idempotencyKey?: string;
}

/** What a charge request carries. */
export interface ChargeRequest {
  orderId: string;
  amountCents: number;
  /** Sent as the `Idempotency-Key` header: the same key returns the same charge. */
  idempotencyKey?: string;
}

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
  private readonly charges: Charge[] = [];
  private readonly byKey = new Map<string, Charge>();
  /** Requests answered with an earlier charge because their key was seen before. */
  replays = 0;

  private constructor(
    private readonly server: Server,
    /** Base URL, for example `http://127.0.0.1:49152`. */
    readonly url: string,
  ) {}

  /** Starts the server on a free port of 127.0.0.1. */
  static async start(): Promise<FakePaymentProvider> {
    let provider: FakePaymentProvider | undefined;
    const server = createServer((request, response) => {
      provider!.handle(request, response).catch((error: unknown) => {
        respond(response, 500, { error: String(error) });
      });
    });
    // Keep-alive sockets from fetch would otherwise hold close() open.
    server.keepAliveTimeout = 1000;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', resolve);
    });
    const { port } = server.address() as AddressInfo;
    provider = new FakePaymentProvider(server, `http://127.0.0.1:${port}`);
    return provider;
  }

  /** Charges made (replays excluded). */
  get chargeCount(): number {
    return this.charges.length;
  }

  /** Sum of every charge made, in cents. */
  get totalCents(): number {
    return this.charges.reduce((sum, charge) => sum + charge.amountCents, 0);
  }

  /** A copy of the ledger. */
  ledger(): Charge[] {
    return this.charges.map((charge) => ({ ...charge }));
  }

  /**
   * Client side: POSTs a charge over HTTP, with the `Idempotency-Key` header when a key
   * is given. Rejects on any non-2xx answer.
   */
  async charge(request: ChargeRequest, signal?: AbortSignal): Promise<Charge> {
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    if (request.idempotencyKey !== undefined) headers['idempotency-key'] = request.idempotencyKey;
    const response = await fetch(`${this.url}/v1/charges`, {
      method: 'POST',
      headers,
      body: JSON.stringify({ orderId: request.orderId, amountCents: request.amountCents }),
      signal,
    });
    const answer = (await response.json()) as Charge & { error?: string };
    if (!response.ok) throw new Error(`provider refused the charge (${response.status}): ${answer.error}`);
    return answer;
  }

  async close(): Promise<void> {
    await new Promise<void>((resolve) => {
      this.server.close(() => resolve());
      this.server.closeAllConnections();
    });
  }

  private async handle(request: IncomingMessage, response: ServerResponse): Promise<void> {
    if (request.method !== 'POST' || request.url !== '/v1/charges') {
      respond(response, 404, { error: 'not found' });
      return;
    }
    const chunks: Buffer[] = [];
    for await (const chunk of request) chunks.push(chunk as Buffer);
    const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as {
      orderId?: unknown;
      amountCents?: unknown;
    };
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
    const charge: Charge = {
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

function respond(response: ServerResponse, status: number, body: unknown): void {
  if (response.headersSent) return;
  response.writeHead(status, { 'content-type': 'application/json' });
  response.end(JSON.stringify(body));
}
