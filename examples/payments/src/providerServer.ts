import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { SqlClient } from '@oncely/core';
import { HttpIdempotency, type IdempotentIncomingMessage, REPLAY_HEADER } from '@oncely/http';
import { PostgresStore } from '@oncely/postgres';

/** One charge in the provider's ledger. */
export interface Charge {
  id: string;
  account: string;
  orderId: string;
  amountCents: number;
}

/** What the provider's ledger holds for one account. */
export interface AccountLedger {
  charges: number;
  totalCents: number;
}

/** What the server reports as it works (the worker forwards it to the main thread). */
export interface ProviderServerEvents {
  /** The handler wrote a charge (not yet committed: progress only). */
  onCharge?(account: string, amountCents: number): void;
  /** A request was answered with a stored response (`Idempotent-Replayed: true`). */
  onReplay?(): void;
}

/**
 * The payment provider's server side: an HTTP server on 127.0.0.1 with a ledger in its
 * own embedded PostgreSQL (PGlite). `POST /v1/charges` runs behind `@oncely/http`'s
 * `Idempotency-Key` middleware in transactional mode: the charge row and the stored
 * response commit together, a repeated key gets the first charge back
 * (`Idempotent-Replayed: true`) without charging, a key reused with another body gets
 * 422. A request without a key is charged every time, as a real provider would. Keys are
 * scoped per account (the `x-account` header). The demo runs it in a worker thread
 * (`FakePaymentProvider`), so its database has a core of its own.
 *
 * @example
 * ```ts
 * const server = await ProviderServer.start();
 * console.log(server.url, await server.ledger('shop'));
 * await server.close();
 * ```
 */
export class ProviderServer {
  private constructor(
    private readonly server: Server,
    private readonly store: PostgresStore,
    /** Base URL, for example `http://127.0.0.1:49152`. */
    readonly url: string,
    private readonly events: ProviderServerEvents,
  ) {}

  /** Starts the provider's database and the server on a free port of 127.0.0.1. */
  static async start(events: ProviderServerEvents = {}): Promise<ProviderServer> {
    const store = PostgresStore.embedded({ schema: 'provider' });
    let server: Server | undefined;
    try {
      await store.migrate();
      await store.transaction((tx) =>
        tx.query(`CREATE TABLE provider.charges (
          id bigserial PRIMARY KEY,
          account text NOT NULL,
          order_id text NOT NULL,
          amount_cents integer NOT NULL,
          created_at timestamptz NOT NULL DEFAULT now()
        )`),
      );
      const idempotency = new HttpIdempotency({
        store,
        methods: ['POST'],
        // Like a real provider: a request without a key is a new charge each time.
        required: false,
        scope: (req) => String(req.headers['x-account'] ?? ''),
      });
      await idempotency.migrate();
      let provider: ProviderServer | undefined;
      const handle = idempotency.handler((req, res) => provider!.charge(req, res));
      server = createServer((req, res) => {
        res.on('finish', () => {
          if (res.getHeader(REPLAY_HEADER) === 'true') events.onReplay?.();
        });
        void handle(req, res);
      });
      // Keep-alive sockets from fetch would otherwise hold close() open.
      server.keepAliveTimeout = 1000;
      await new Promise<void>((resolve, reject) => {
        server!.once('error', reject);
        server!.listen(0, '127.0.0.1', resolve);
      });
      const { port } = server.address() as AddressInfo;
      provider = new ProviderServer(server, store, `http://127.0.0.1:${port}`, events);
      return provider;
    } catch (error) {
      server?.close();
      await store.close();
      throw error;
    }
  }

  /** The committed ledger of `account`, read from the provider's database. */
  async ledger(account: string): Promise<AccountLedger> {
    const { rows } = await this.store.transaction((tx) =>
      tx.query<{ charges: number; total: number }>(
        'SELECT count(*)::int AS charges, coalesce(sum(amount_cents), 0)::int AS total FROM provider.charges WHERE account = $1',
        [account],
      ),
    );
    return { charges: rows[0]?.charges ?? 0, totalCents: rows[0]?.total ?? 0 };
  }

  async close(): Promise<void> {
    await new Promise<void>((resolve) => {
      this.server.close(() => resolve());
      this.server.closeAllConnections();
    });
    await this.store.close();
  }

  private async charge(req: IdempotentIncomingMessage, res: ServerResponse): Promise<void> {
    if (req.url !== '/v1/charges') {
      respond(res, 404, { error: 'not found' });
      return;
    }
    const body = parse(req.rawBody);
    if (typeof body?.orderId !== 'string' || typeof body.amountCents !== 'number') {
      respond(res, 400, { error: 'orderId (string) and amountCents (number) are required' });
      return;
    }
    const account = String(req.headers['x-account'] ?? '');
    const insert = (tx: SqlClient) =>
      tx.query<{ id: string }>(
        'INSERT INTO provider.charges (account, order_id, amount_cents) VALUES ($1, $2, $3) RETURNING id::text',
        [account, body.orderId, body.amountCents],
      );
    // With a key the row goes through the key's transaction (req.tx): charge and stored
    // response commit together. Without one there is no key to protect: a plain transaction.
    const { rows } = req.tx ? await insert(req.tx) : await this.store.transaction(insert);
    this.events.onCharge?.(account, body.amountCents as number);
    const charge: Charge = {
      id: `ch_${rows[0]!.id}`,
      account,
      orderId: body.orderId,
      amountCents: body.amountCents as number,
    };
    respond(res, 201, charge);
  }
}

function parse(raw: Buffer | undefined): Record<string, unknown> | undefined {
  try {
    const value: unknown = JSON.parse(raw?.toString('utf8') ?? '');
    return typeof value === 'object' && value !== null ? (value as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

function respond(res: ServerResponse, status: number, body: unknown): void {
  if (res.headersSent) return;
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}
