import type { IncomingHttpHeaders, IncomingMessage } from 'node:http';
import type { IdempotencyStore, Logger, SqlClient } from '@oncely/core';

/**
 * The request as the middleware sees it, whatever the framework.
 *
 * @example
 * ```ts
 * const request: IdempotentRequest = { method: 'POST', url: '/payments', headers: req.headers, body, raw: req };
 * ```
 */
export interface IdempotentRequest {
  method: string;
  /** Path and query string, as received. */
  url: string;
  headers: IncomingHttpHeaders;
  /** The parsed body (Express, Fastify) or the raw bytes (Node http wrapper). */
  body: unknown;
  /** The framework's own request object. */
  raw: unknown;
}

/**
 * A response as stored and replayed.
 *
 * @example
 * ```ts
 * const response: StoredResponse = { status: 201, headers: { 'content-type': 'application/json' }, body: Buffer.from('{}') };
 * ```
 */
export interface StoredResponse {
  status: number;
  headers: Record<string, string | string[]>;
  body: Buffer;
}

/**
 * Options of {@link HttpIdempotency}.
 *
 * @example
 * ```ts
 * const options: HttpIdempotencyOptions = { store, mode: 'leased', scope: (req) => String(req.headers['x-tenant']) };
 * ```
 */
export interface HttpIdempotencyOptions {
  /**
   * The Oncely store: a `PostgresStore` (`pg` or PGlite) or a `MySqlStore` (handlers' SQL
   * then takes `?` placeholders). It provides the statements on the keys table
   * (`httpKeys()`) and its `transaction()` runs them.
   */
  store: IdempotencyStore<SqlClient>;
  /**
   * Whose keys these are: two requests share a key only within one scope. A function of the
   * request returns the client or tenant it comes from (account ID, API key ID: a stable
   * identity, not a bearer token that is refreshed between a request and its retry); throw
   * or return a non-string to refuse the request (a 500, logged). A string is one fixed
   * scope for every request: choose it only when the API has a single client, or keys are
   * unique across clients (`''` is the scope of keys stored before scope was required).
   * Required: with one shared scope, two clients that pick the same key see each other's
   * responses (the draft's security considerations ask for a composite key).
   */
  scope: string | ((request: IdempotentRequest) => string | Promise<string>);
  /**
   * `'transactional'`: the handler runs inside the key's transaction and writes through
   * `req.tx`; its writes and the stored response commit together or not at all.
   * `'leased'`: the key is claimed `in_progress` with a database-time deadline, renewed
   * while the handler runs (for handlers that call out); after a crash another request
   * takes it over once the deadline passes.
   * @default 'transactional'
   */
  mode?: 'transactional' | 'leased';
  /** Methods the key applies to; others pass through untouched. @default ['POST', 'PATCH'] */
  methods?: readonly string[];
  /** Request header carrying the key (case-insensitive). @default 'Idempotency-Key' */
  header?: string;
  /** Reject (400) a covered request without a key. When false, such requests run unprotected. @default true */
  required?: boolean;
  /** Longest accepted key (after decoding). @default 255 */
  maxKeyLength?: number;
  /**
   * Accept the key bare (`Idempotency-Key: abc`, as Stripe's clients send it) besides the
   * draft's sf-string (`"abc"`); both are the same key. A bare key is visible ASCII without
   * spaces, commas, semicolons, quotes or backslashes. `false`: the draft's grammar only.
   * @default true
   */
  bareKeys?: boolean;
  /**
   * The request's fingerprint: a retry with the same key and another fingerprint gets 422.
   * @default SHA-256 of method, path, query string (parameters sorted) and body (parsed bodies with sorted keys)
   */
  fingerprint?: (request: IdempotentRequest) => string;
  /** How long a key and its stored response are kept (and replayed). @default 86_400_000 (24 h) */
  retentionMs?: number;
  /**
   * A failure is a 5xx or a thrown handler. `'rerun'` (Stripe's v2 API): nothing is
   * stored, the handler's transactional writes roll back, and a retry runs the handler
   * again. `'store'` (Stripe's v1 API, the draft's "result of the previously completed
   * operation, success or an error"): the failure response is stored and replayed like a
   * success (in transactional mode the handler's writes still roll back).
   * @default 'rerun'
   */
  failures?: 'rerun' | 'store';
  /** Response headers stored and replayed (lower case). @default content-type, content-language, content-location, location, etag, last-modified, cache-control, link */
  storeHeaders?: readonly string[];
  /** `leased` mode: claim deadline, renewed every third of it while the handler runs. @default 30000 */
  leaseMs?: number;
  /**
   * The handler's budget, in both modes: past it the client gets a 504 (a failure, never
   * stored) and `req.idempotency.signal` aborts. Transactional mode: the writes roll back,
   * the transaction ends, and later statements on `req.tx` are refused; keep it below the
   * store's `idleInTransactionTimeoutMs`. Leased mode: the claim is no longer renewed; it
   * stays in progress until its deadline (the handler may still be running), then a retry
   * takes it over, as after a crash; the handler's late response is not stored.
   * @default 30000
   */
  handlerTimeoutMs?: number;
  /**
   * The largest response body stored (and held back until the commit). A larger one is a
   * failure: a 500 problem, its writes rolled back. Streamed responses are buffered whole.
   * @default 8_388_608 (8 MiB)
   */
  maxResponseBytes?: number;
  /**
   * Where your API documents its idempotency policy (the draft: the resource server MUST
   * publish it). Problem answers then carry `type: <documentationUrl>#<problem>` and a
   * `Link: <documentationUrl>; rel="describedby"` header.
   * @default none: `type` is `about:blank`
   */
  documentationUrl?: string;
  /** Schema of this package's table (PostgreSQL; a `MySqlStore` keeps it in its own database). @default the store's `schema`, else 'oncely' */
  schema?: string;
  /** Node http wrapper and Express without a body parser: the largest body read (413 beyond). @default 1_048_576 */
  maxBodyBytes?: number;
  /** @default core's stderr logger */
  logger?: Logger;
}

/**
 * What the middleware decided for one request. A binding sends `answer` once it resolves
 * (for `respond`, `response` at once), whoever settled the key: the handler through
 * `finish`, or `handlerTimeoutMs`.
 *
 * @example
 * ```ts
 * const decision = await idempotency.decide(request);
 * if (decision.kind === 'run') {
 *   runHandler(decision.tx).then((response) => decision.finish(response));
 *   send(await decision.answer);
 * }
 * ```
 */
export type IdempotencyDecision =
  | { kind: 'bypass' }
  | { kind: 'respond'; response: StoredResponse; replayed: boolean }
  | {
      kind: 'run';
      key: string;
      scope: string;
      /** Transactional mode: the key's transaction. */
      tx: SqlClient | undefined;
      /** Aborts at `handlerTimeoutMs`, and (leased mode) when the claim is lost to a takeover. */
      signal: AbortSignal;
      /**
       * Settles the key with the handler's response (stored per policy) and resolves with
       * what to send: `answer`. After the key was settled without it (the timeout), it
       * changes nothing. Never rejects.
       */
      finish(response: StoredResponse): Promise<StoredResponse>;
      /** What to send, once the key is settled (by `finish` or by the timeout). Never rejects. */
      answer: Promise<StoredResponse>;
    };

/**
 * What handlers see on the request (`req.idempotency`).
 *
 * @example
 * ```ts
 * await provider.charge({ signal: req.idempotency.signal, idempotencyKey: `orders:${req.idempotency.key}:charge` });
 * ```
 */
export interface IdempotencyInfo {
  key: string;
  scope: string;
  /**
   * Aborts when `handlerTimeoutMs` passed (`reason.code` `HTTP_HANDLER_TIMEOUT`), or (leased
   * mode) the claim was taken over (`HTTP_CLAIM_LOST`).
   */
  signal: AbortSignal;
}

/**
 * Header set on a replayed response.
 *
 * @example
 * ```ts
 * if (response.headers.get(REPLAY_HEADER) === 'true') console.log('replayed');
 * ```
 */
export const REPLAY_HEADER = 'idempotent-replayed';

declare global {
  // Express's documented augmentation point: `req.tx` and `req.idempotency` are typed in
  // Express handlers. A plain namespace, so it compiles without @types/express too.
  namespace Express {
    interface Request {
      /** Transactional mode: the key's transaction (set by `HttpIdempotency.express()`). */
      tx?: SqlClient | undefined;
      idempotency?: IdempotencyInfo;
    }
  }
}

/**
 * The Node request with what the bindings add.
 *
 * @example
 * ```ts
 * idempotency.handler(async (req: IdempotentIncomingMessage, res) => { await req.tx?.query('SELECT 1'); res.end(); });
 * ```
 */
export interface IdempotentIncomingMessage extends IncomingMessage {
  /** Transactional mode: the key's transaction; write through it. Undefined in leased mode and for bypassed requests. */
  tx?: SqlClient | undefined;
  idempotency?: IdempotencyInfo;
  /** Node http wrapper: the request body. */
  rawBody?: Buffer;
}

/**
 * The parts of Fastify the plugin uses (structural, so Fastify stays an optional peer).
 *
 * @example
 * ```ts
 * await app.register(idempotency.fastify()); // app: a FastifyInstance
 * ```
 */
export interface FastifyRequestLike {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  body: unknown;
  tx?: SqlClient | undefined | null;
  idempotency?: IdempotencyInfo | null;
}
/** The part of a Fastify reply the plugin uses (so `fastify` stays an optional peer dependency). */
export interface FastifyReplyLike {
  statusCode: number;
  /** True once the response went out (or the reply was hijacked). */
  readonly sent: boolean;
  code(status: number): FastifyReplyLike;
  header(name: string, value: unknown): FastifyReplyLike;
  getHeaders(): Record<string, unknown>;
  removeHeader(name: string): FastifyReplyLike;
  send(payload?: unknown): FastifyReplyLike;
}
/** The part of a Fastify instance the plugin registers on (hooks and the request decorator). */
export interface FastifyInstanceLike {
  addHook(name: string, hook: (...args: any[]) => unknown): unknown;
  decorateRequest(name: string, value: unknown): unknown;
  hasRequestDecorator(name: string): boolean;
}
/**
 * A Fastify plugin function, typed without importing `fastify`.
 *
 * @example
 * ```ts
 * await app.register(idempotency.fastify());
 * ```
 */
export type FastifyPluginLike = (app: any, options?: unknown) => Promise<void>;
