import { randomUUID } from 'node:crypto';
import type { IncomingHttpHeaders, IncomingMessage, OutgoingHttpHeaders, ServerResponse } from 'node:http';
import type { IdempotencyStore, Logger, SqlClient } from '@oncely/core';
import { ConfigError, stderrLogger, toLogger } from '@oncely/core';
import { HttpIdempotencyError } from './errors.js';
import { requestFingerprint } from './fingerprint.js';
import type { HttpQueries } from './schema.js';
import { buildHttpQueries, migrateHttpSchema, quoteSchema } from './schema.js';

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
  /** The Oncely store (a `PostgresStore` on `pg` or PGlite). Its `transaction()` runs every statement. */
  store: IdempotencyStore<SqlClient>;
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
  /** Longest accepted key. @default 255 */
  maxKeyLength?: number;
  /**
   * The client or tenant the key belongs to: two clients sending the same key never see
   * each other's responses. Return a stable string (account ID, API key ID); throw or
   * return a non-string to refuse the request (500 is logged as a configuration error).
   * @default every request shares one scope ('')
   */
  scope?: (request: IdempotentRequest) => string | Promise<string>;
  /**
   * The request's fingerprint: a retry with the same key and another fingerprint gets 422.
   * @default SHA-256 of method, path (no query) and the body (parsed bodies with sorted keys)
   */
  fingerprint?: (request: IdempotentRequest) => string;
  /** How long a key and its stored response are kept (and replayed). @default 86_400_000 (24 h) */
  retentionMs?: number;
  /**
   * A failure is a 5xx or a thrown handler. `'rerun'` (Stripe v2): nothing is stored, the
   * handler's transactional writes roll back, and a retry runs the handler again.
   * `'store'` (Stripe v1): the failure response is stored and replayed like a success
   * (in transactional mode the handler's writes still roll back).
   * @default 'rerun'
   */
  failures?: 'rerun' | 'store';
  /** Response headers stored and replayed (lower case). @default content-type, content-language, content-location, location, etag, last-modified, cache-control, link */
  storeHeaders?: readonly string[];
  /** `leased` mode: claim deadline, renewed every third of it while the handler runs. @default 30000 */
  leaseMs?: number;
  /**
   * Transactional mode: the handler's budget. Past it `req.idempotency.signal` aborts, the
   * request is settled as a 504 (a failure: its writes roll back) and the transaction ends.
   * Keep it below the store's `idleInTransactionTimeoutMs`.
   * @default 30000
   */
  handlerTimeoutMs?: number;
  /** Schema of this package's table. @default the store's `schema`, else 'oncely' */
  schema?: string;
  /** Node http wrapper and Express without a body parser: the largest body read (413 beyond). @default 1_048_576 */
  maxBodyBytes?: number;
  /** @default core's stderr logger */
  logger?: Logger;
}

/**
 * What the middleware decided for one request.
 *
 * @example
 * ```ts
 * const decision = await idempotency.decide(request);
 * if (decision.kind === 'run') send(await decision.finish(await runHandler(decision.tx)));
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
      /** Leased mode: aborts when the claim is lost to a takeover. */
      signal: AbortSignal;
      /** Stores the handler's response (per policy) and returns what to send. Never rejects. */
      finish(response: StoredResponse): Promise<StoredResponse>;
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
  /** Aborts when the claim was taken over (leased mode) or `handlerTimeoutMs` passed (transactional mode). */
  signal: AbortSignal;
}

const DEFAULT_STORE_HEADERS = [
  'content-type',
  'content-language',
  'content-location',
  'location',
  'etag',
  'last-modified',
  'cache-control',
  'link',
];

/**
 * Header set on a replayed response.
 *
 * @example
 * ```ts
 * if (response.headers.get(REPLAY_HEADER) === 'true') console.log('replayed');
 * ```
 */
export const REPLAY_HEADER = 'idempotent-replayed';

/**
 * `Idempotency-Key` handling for HTTP APIs on the Oncely store, following the IETF draft
 * "The Idempotency-Key HTTP Header Field" (draft-07): 400 for a missing or malformed key,
 * 409 while the first request is in progress, 422 for a key reused with another payload,
 * and the first response replayed (with `Idempotent-Replayed: true`) without running the
 * handler again. Bind it with {@link HttpIdempotency.handler} (Node http),
 * {@link HttpIdempotency.express} or {@link HttpIdempotency.fastify}.
 *
 * @example
 * ```ts
 * const idempotency = new HttpIdempotency({ store, scope: (req) => String(req.headers['x-account']) });
 * await idempotency.migrate();
 * app.use(express.json(), idempotency.express());
 * app.post('/payments', async (req, res) => {
 *   await req.tx.query('INSERT INTO payments(id, amount) VALUES ($1, $2)', [req.body.id, req.body.amount]);
 *   res.status(201).json({ ok: true });
 * });
 * ```
 */
export class HttpIdempotency {
  readonly mode: 'transactional' | 'leased';
  readonly schema: string;
  private readonly store: IdempotencyStore<SqlClient>;
  private readonly queries: HttpQueries;
  private readonly quotedSchema: string;
  private readonly methods: ReadonlySet<string>;
  private readonly header: string;
  private readonly required: boolean;
  private readonly maxKeyLength: number;
  private readonly scopeOf: (request: IdempotentRequest) => string | Promise<string>;
  private readonly fingerprintOf: (request: IdempotentRequest) => string;
  private readonly retentionMs: number;
  private readonly storeFailures: boolean;
  private readonly storeHeaders: ReadonlySet<string>;
  private readonly leaseMs: number;
  private readonly handlerTimeoutMs: number;
  /** @internal used by the bindings */
  readonly maxBodyBytes: number;
  /** @internal used by the bindings */
  readonly log: Logger;
  private migrated: Promise<unknown> | undefined;

  constructor(options: HttpIdempotencyOptions) {
    if (typeof options !== 'object' || options === null)
      throw new ConfigError('http', 'options are required');
    const { store } = options;
    if (!store || typeof store.transaction !== 'function') {
      throw new ConfigError('store', 'must be an Oncely store (for example a PostgresStore)');
    }
    // This package's SQL is PostgreSQL's: refused here rather than failing every request.
    if ((store as { dialect?: unknown }).dialect === 'mysql') {
      throw new ConfigError(
        'store',
        'is a MySQL store: @oncely/http works on the PostgreSQL store only (for now)',
      );
    }
    this.store = store;
    this.mode = options.mode ?? 'transactional';
    if (this.mode !== 'transactional' && this.mode !== 'leased') {
      throw new ConfigError('mode', `must be 'transactional' or 'leased'; got ${JSON.stringify(this.mode)}`);
    }
    this.schema = options.schema ?? (store as { schema?: string }).schema ?? 'oncely';
    try {
      this.quotedSchema = quoteSchema(this.schema);
    } catch (error) {
      throw new ConfigError('schema', (error as Error).message);
    }
    this.queries = buildHttpQueries(this.quotedSchema);
    this.methods = new Set((options.methods ?? ['POST', 'PATCH']).map((method) => method.toUpperCase()));
    this.header = (options.header ?? 'Idempotency-Key').toLowerCase();
    this.required = options.required ?? true;
    this.maxKeyLength = positiveInteger('maxKeyLength', options.maxKeyLength ?? 255);
    this.scopeOf = options.scope ?? (() => '');
    this.fingerprintOf =
      options.fingerprint ??
      ((request) => requestFingerprint({ method: request.method, url: request.url, body: request.body }));
    this.retentionMs = positiveInteger('retentionMs', options.retentionMs ?? 86_400_000);
    const failures = options.failures ?? 'rerun';
    if (failures !== 'rerun' && failures !== 'store') {
      throw new ConfigError('failures', `must be 'rerun' or 'store'; got ${JSON.stringify(failures)}`);
    }
    this.storeFailures = failures === 'store';
    this.storeHeaders = new Set(
      (options.storeHeaders ?? DEFAULT_STORE_HEADERS).map((name) => name.toLowerCase()),
    );
    this.leaseMs = positiveInteger('leaseMs', options.leaseMs ?? 30_000);
    this.handlerTimeoutMs = positiveInteger('handlerTimeoutMs', options.handlerTimeoutMs ?? 30_000);
    this.maxBodyBytes = positiveInteger('maxBodyBytes', options.maxBodyBytes ?? 1_048_576);
    this.log = toLogger(options.logger ?? stderrLogger);
  }

  /**
   * Creates this package's table (`<schema>.http_idempotency_keys`) if needed, in one
   * store transaction under an advisory lock. Run the store's own `migrate()` first. Also
   * run once, lazily, by the first request.
   *
   * @example
   * ```ts
   * await store.migrate();
   * await idempotency.migrate();
   * ```
   */
  async migrate(): Promise<{ applied: string[] }> {
    const applied = await this.store.transaction((tx) =>
      migrateHttpSchema(tx, this.schema, this.quotedSchema),
    );
    this.migrated = Promise.resolve();
    return { applied };
  }

  /**
   * Deletes keys past retention, `batchSize` per transaction; claims still held are kept.
   * Returns how many were deleted. Schedule it (for example hourly); nothing runs it for you.
   *
   * @example
   * ```ts
   * const deleted = await idempotency.prune();
   * ```
   */
  async prune(options: { batchSize?: number } = {}): Promise<number> {
    const batchSize = positiveInteger('batchSize', options.batchSize ?? 1000);
    await this.ensureMigrated();
    let total = 0;
    for (;;) {
      const deleted = await this.store.transaction(
        async (tx) => (await tx.query(this.queries.prune, [batchSize])).rows.length,
      );
      total += deleted;
      if (deleted < batchSize) return total;
    }
  }

  /**
   * The framework-neutral decision for one request. The bindings call it; use it directly
   * to support another framework.
   *
   * @example
   * ```ts
   * const decision = await idempotency.decide({ method: 'POST', url: '/x', headers, body, raw: req });
   * ```
   */
  async decide(request: IdempotentRequest): Promise<IdempotencyDecision> {
    if (!this.methods.has(request.method.toUpperCase())) return { kind: 'bypass' };
    const parsed = parseKey(request.headers[this.header], this.maxKeyLength);
    if (parsed.kind === 'missing') {
      if (!this.required) return { kind: 'bypass' };
      return respond(
        problem(400, 'Idempotency-Key is missing', `This operation requires the ${this.header} header.`),
      );
    }
    if (parsed.kind === 'malformed') {
      return respond(problem(400, 'Idempotency-Key is malformed', parsed.reason));
    }
    let scope: string;
    let fingerprint: string;
    try {
      scope = await this.scopeOf(request);
      if (typeof scope !== 'string')
        throw new ConfigError('scope', `must return a string; got ${typeof scope}`);
      fingerprint = this.fingerprintOf(request);
    } catch (error) {
      this.log.error('oncely/http: the scope or fingerprint function failed', { error });
      return respond(problem(500, 'Internal Server Error', 'The request could not be scoped.'));
    }
    try {
      await this.ensureMigrated();
      return this.mode === 'leased'
        ? await this.decideLeased(scope, parsed.key, fingerprint)
        : await this.decideTransactional(scope, parsed.key, fingerprint);
    } catch (error) {
      // Fail closed: without the store the handler never runs unprotected.
      this.log.error('oncely/http: the store failed before the handler ran', { error });
      return respond(unavailable(this.store.classifyError(error)));
    }
  }

  private ensureMigrated(): Promise<unknown> {
    if (!this.migrated) {
      this.migrated = this.migrate().catch((error) => {
        this.migrated = undefined;
        throw error;
      });
    }
    return this.migrated;
  }

  private pickHeaders(
    headers: OutgoingHttpHeaders | Record<string, unknown>,
  ): Record<string, string | string[]> {
    const picked: Record<string, string | string[]> = {};
    for (const [name, value] of Object.entries(headers)) {
      if (value === undefined || !this.storeHeaders.has(name.toLowerCase())) continue;
      picked[name.toLowerCase()] = Array.isArray(value) ? value.map(String) : String(value);
    }
    return picked;
  }

  private decideTransactional(scope: string, key: string, fingerprint: string): Promise<IdempotencyDecision> {
    const q = this.queries;
    const outcome = deferred<StoredResponse>();
    const sent = deferred<StoredResponse>();
    // The handler's view of the transaction. Once the transaction has settled (a timeout, a
    // commit), a late statement must fail instead of running on a pooled connection that
    // may by then serve another request's transaction.
    let txEnded = false;
    let inner: SqlClient | undefined;
    const handlerTx: SqlClient = {
      query: (text, params) => {
        if (txEnded || !inner) {
          return Promise.reject(
            new HttpIdempotencyError(
              'HTTP_TRANSACTION_ENDED',
              "req.tx was used after the request's transaction ended (handlerTimeoutMs passed, or the response was already sent)",
            ),
          );
        }
        return params === undefined ? inner.query(text) : inner.query(text, params);
      },
    };
    return new Promise<IdempotencyDecision>((resolveDecision, rejectDecision) => {
      let running = false;
      const committed = this.store.transaction(async (tx) => {
        inner = tx;
        const peeked = (
          await tx.query<KeyRow & { locked: boolean }>(q.lockAndPeek, [
            scope,
            key,
            `${this.schema}:${scope.length}:${scope}:${key}`,
          ])
        ).rows[0];
        const settled = peeked?.status ? peeked : undefined;
        // Replays (the common retry) never wait on or 409 each other.
        if (settled?.status === 'completed') {
          return resolveDecision(settled.fingerprint === fingerprint ? replay(settled) : respond(mismatch()));
        }
        // Another request with this key holds its transaction open: it is in progress.
        if (peeked?.locked !== true) {
          return resolveDecision(
            settled && settled.fingerprint !== fingerprint ? respond(mismatch()) : respond(inProgress()),
          );
        }
        // Read again under the lock: the first request may have committed in between.
        const row = (await tx.query<KeyRow>(q.read, [scope, key])).rows[0];
        if (row) {
          if (row.fingerprint !== fingerprint) return resolveDecision(respond(mismatch()));
          if (row.status === 'completed') return resolveDecision(replay(row));
          // A leased-mode claim on the same table: taken over only once its deadline passed.
          if (row.live) return resolveDecision(respond(inProgress()));
        }
        if (this.storeFailures) await tx.query('SAVEPOINT oncely_http_handler');
        running = true;
        const timedOut = new AbortController();
        resolveDecision({
          kind: 'run',
          key,
          scope,
          tx: handlerTx,
          signal: timedOut.signal,
          finish: (response) => {
            outcome.resolve(response);
            return sent.promise;
          },
        });
        // A handler that never answers must not hold the key's transaction (and a pooled
        // connection) forever: past the budget it is settled as a 504, its writes rolled back.
        const timer = setTimeout(() => {
          timedOut.abort(new Error('the request handler ran past handlerTimeoutMs'));
          outcome.resolve(
            problem(504, 'Gateway Timeout', 'The request did not complete in time; retry with the same key.'),
          );
        }, this.handlerTimeoutMs);
        const response = await outcome.promise.finally(() => {
          clearTimeout(timer);
          txEnded = true;
        });
        if (response.status >= 500) {
          // Nothing stored, nothing written: a retry runs the handler again.
          if (!this.storeFailures) throw new NotStored(response);
          await tx.query('ROLLBACK TO SAVEPOINT oncely_http_handler');
        }
        await tx.query(q.saveCompleted, [
          scope,
          key,
          fingerprint,
          response.status,
          JSON.stringify(this.pickHeaders(response.headers)),
          response.body,
          this.retentionMs,
        ]);
        return response;
      });
      committed.then(
        (response) => {
          if (response) sent.resolve(response);
        },
        (error: unknown) => {
          if (!running) return rejectDecision(error);
          if (error instanceof NotStored) return sent.resolve(error.response);
          // The handler's writes did not commit: its response must not be sent as a success.
          this.log.error('oncely/http: the transaction of a request failed to commit', { error, key });
          sent.resolve(unavailable(this.store.classifyError(error)));
        },
      );
    });
  }

  private async decideLeased(scope: string, key: string, fingerprint: string): Promise<IdempotencyDecision> {
    const q = this.queries;
    const owner = randomUUID();
    const claim = await this.store.transaction(async (tx): Promise<IdempotencyDecision | 'acquired'> => {
      const acquired = await tx.query(q.acquire, [
        scope,
        key,
        fingerprint,
        owner,
        this.leaseMs,
        this.retentionMs,
      ]);
      if (acquired.rows.length === 1) return 'acquired';
      const { rows } = await tx.query<KeyRow>(q.read, [scope, key]);
      const row = rows[0];
      if (!row) return respond(inProgress()); // changed under us; the client retries
      if (row.fingerprint !== fingerprint) return respond(mismatch());
      if (row.status === 'completed') return replay(row);
      return respond(inProgress());
    });
    if (claim !== 'acquired') return claim;
    const lost = new AbortController();
    const keyArgs = [scope, key, owner] as const;
    const renewal = setInterval(
      () => {
        this.store
          .transaction((tx) => tx.query(q.renew, [...keyArgs, this.leaseMs]))
          .then(
            (result) => {
              if (result.rows.length === 0 && !lost.signal.aborted)
                lost.abort(new Error('the idempotency key was taken over'));
            },
            (error) => this.log.warn('oncely/http: renewing a key claim failed', { error, key }),
          );
      },
      Math.max(1, Math.floor(this.leaseMs / 3)),
    );
    renewal.unref();
    return {
      kind: 'run',
      key,
      scope,
      tx: undefined,
      signal: lost.signal,
      finish: async (response) => {
        clearInterval(renewal);
        try {
          if (response.status >= 500 && !this.storeFailures) {
            await this.store.transaction((tx) => tx.query(q.release, [...keyArgs]));
            return response;
          }
          const done = await this.store.transaction((tx) =>
            tx.query(q.complete, [
              ...keyArgs,
              response.status,
              JSON.stringify(this.pickHeaders(response.headers)),
              response.body,
              this.retentionMs,
            ]),
          );
          if (done.rows.length === 0) {
            this.log.warn(
              'oncely/http: the key was taken over before this request completed; its response is not stored',
              { key },
            );
          }
        } catch (error) {
          // The handler's effects happened; the claim stays in progress until its deadline,
          // after which a retry takes it over.
          this.log.error('oncely/http: storing the response failed', { error, key });
        }
        return response;
      },
    };
  }

  /**
   * Wraps a Node `http` request handler. The wrapper reads the body itself (up to
   * `maxBodyBytes`) and hands it over as `req.rawBody`; the handler also gets `req.tx`
   * (transactional mode) and `req.idempotency`. A handler that throws answers 500.
   *
   * @example
   * ```ts
   * const server = http.createServer(idempotency.handler(async (req, res) => {
   *   await req.tx?.query('INSERT INTO orders(id) VALUES ($1)', [JSON.parse(req.rawBody.toString()).id]);
   *   res.writeHead(201, { 'content-type': 'application/json' }).end('{"ok":true}');
   * }));
   * ```
   */
  handler(
    handle: (req: IdempotentIncomingMessage, res: ServerResponse) => unknown,
  ): (req: IncomingMessage, res: ServerResponse) => Promise<void> {
    return async (incoming, res) => {
      const req = incoming as IdempotentIncomingMessage;
      let body: Buffer;
      try {
        body = await readBody(req, this.maxBodyBytes);
      } catch (error) {
        send(
          res,
          problem(
            error instanceof TooLarge ? 413 : 400,
            'Bad request body',
            String((error as Error).message),
          ),
          false,
        );
        return;
      }
      req.rawBody = body;
      const run = async () => {
        try {
          await handle(req, res);
        } catch (error) {
          this.log.error('oncely/http: the request handler threw', { error });
          if (!res.writableEnded)
            send(res, problem(500, 'Internal Server Error', 'The request failed.'), false);
        }
      };
      await this.serve(
        req,
        res,
        { method: req.method ?? 'GET', url: req.url ?? '/', headers: req.headers, body, raw: req },
        run,
      );
    };
  }

  /**
   * Express middleware (4 and 5). Mount it after the body parser: the parsed `req.body` is
   * fingerprinted (without a parser the raw body is read into `req.body` as a Buffer).
   * Handlers get `req.tx` (transactional mode) and `req.idempotency`.
   *
   * @example
   * ```ts
   * app.post('/payments', express.json(), idempotency.express(), async (req, res) => {
   *   await req.tx.query('INSERT INTO payments(id) VALUES ($1)', [req.body.id]);
   *   res.status(201).json({ id: req.body.id });
   * });
   * ```
   */
  express(): (req: IncomingMessage, res: ServerResponse, next: (error?: unknown) => void) => void {
    return (incoming, res, next) => {
      const req = incoming as IdempotentIncomingMessage & { body?: unknown; originalUrl?: string };
      const start = async () => {
        if (req.body === undefined && hasBody(req)) req.body = await readBody(req, this.maxBodyBytes);
        await this.serve(
          req,
          res,
          {
            method: req.method ?? 'GET',
            url: req.originalUrl ?? req.url ?? '/',
            headers: req.headers,
            body: req.body,
            raw: req,
          },
          async () => next(),
        );
      };
      start().catch((error: unknown) => {
        if (error instanceof TooLarge) send(res, problem(413, 'Content Too Large', error.message), false);
        else next(error);
      });
    };
  }

  /**
   * A Fastify (4, 5) plugin applying to every route registered after it in the same
   * scope's parents (it is not encapsulated). Handlers get `request.tx` (transactional
   * mode) and `request.idempotency`.
   *
   * @example
   * ```ts
   * await app.register(idempotency.fastify());
   * app.post('/payments', async (request, reply) => {
   *   await request.tx.query('INSERT INTO payments(id) VALUES ($1)', [request.body.id]);
   *   return reply.code(201).send({ ok: true });
   * });
   * ```
   */
  fastify(): FastifyPluginLike {
    const pending = new WeakMap<object, Extract<IdempotencyDecision, { kind: 'run' }>>();
    const plugin = async (app: FastifyInstanceLike) => {
      if (!app.hasRequestDecorator('tx')) app.decorateRequest('tx', null);
      if (!app.hasRequestDecorator('idempotency')) app.decorateRequest('idempotency', null);
      app.addHook('preHandler', async (request: FastifyRequestLike, reply: FastifyReplyLike) => {
        const decision = await this.decide({
          method: request.method,
          url: request.url,
          headers: request.headers,
          body: request.body,
          raw: request,
        });
        if (decision.kind === 'bypass') return;
        if (decision.kind === 'respond') {
          reply.code(decision.response.status);
          for (const [name, value] of Object.entries(decision.response.headers)) reply.header(name, value);
          if (decision.replayed) reply.header(REPLAY_HEADER, 'true');
          return reply.send(decision.response.body);
        }
        request.tx = decision.tx;
        request.idempotency = { key: decision.key, scope: decision.scope, signal: decision.signal };
        pending.set(request, decision);
      });
      app.addHook(
        'onSend',
        async (request: FastifyRequestLike, reply: FastifyReplyLike, payload: unknown) => {
          const decision = pending.get(request);
          if (!decision) return payload;
          pending.delete(request);
          const body = await payloadBytes(payload);
          const response: StoredResponse = {
            status: reply.statusCode,
            headers: reply.getHeaders() as never,
            body,
          };
          const final = await decision.finish(response);
          if (final === response) return body;
          for (const name of Object.keys(reply.getHeaders())) reply.removeHeader(name);
          reply.code(final.status);
          for (const [name, value] of Object.entries(final.headers)) reply.header(name, value);
          return final.body;
        },
      );
      app.addHook('onResponse', async (request: FastifyRequestLike, reply: FastifyReplyLike) => {
        // onSend never ran (the reply was hijacked): settle as a failure so nothing stays held.
        const decision = pending.get(request);
        if (!decision) return;
        pending.delete(request);
        await decision.finish({
          status: Math.max(500, reply.statusCode),
          headers: {},
          body: Buffer.alloc(0),
        });
      });
    };
    const marked = plugin as FastifyPluginLike;
    // What fastify-plugin does: the hooks apply to the parent scope, not an encapsulated child.
    (marked as unknown as Record<symbol, unknown>)[Symbol.for('skip-override')] = true;
    (marked as unknown as Record<symbol, unknown>)[Symbol.for('fastify.display-name')] = '@oncely/http';
    return marked;
  }

  /** Shared by the Node and Express bindings: decide, capture the handler's response, settle, send. */
  private async serve(
    req: IdempotentIncomingMessage,
    res: ServerResponse,
    request: IdempotentRequest,
    run: () => Promise<void>,
  ): Promise<void> {
    const decision = await this.decide(request);
    if (decision.kind === 'bypass') return run();
    if (decision.kind === 'respond') return send(res, decision.response, decision.replayed);
    req.tx = decision.tx;
    req.idempotency = { key: decision.key, scope: decision.scope, signal: decision.signal };
    const capture = captureResponse(res);
    await run();
    const response = await capture.done;
    const captured: StoredResponse = {
      status: response.status,
      headers: res.getHeaders() as never,
      body: response.body,
    };
    const final = await decision.finish(captured);
    capture.restore();
    if (final === captured) {
      res.end(final.body);
      return;
    }
    for (const name of res.getHeaderNames()) res.removeHeader(name);
    send(res, final, false);
  }
}

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

interface KeyRow {
  fingerprint: string;
  status: 'in_progress' | 'completed';
  live: boolean;
  response_status: number | null;
  response_headers: Record<string, string | string[]> | string | null;
  response_body: Uint8Array | null;
}

class NotStored extends Error {
  constructor(readonly response: StoredResponse) {
    super('failure response not stored');
  }
}

class TooLarge extends Error {}

function respond(response: StoredResponse): IdempotencyDecision {
  return { kind: 'respond', response, replayed: false };
}

function replay(row: KeyRow): IdempotencyDecision {
  const headers =
    typeof row.response_headers === 'string'
      ? JSON.parse(row.response_headers)
      : (row.response_headers ?? {});
  return {
    kind: 'respond',
    replayed: true,
    response: {
      status: row.response_status ?? 200,
      headers,
      body: Buffer.from(row.response_body ?? new Uint8Array()),
    },
  };
}

/** RFC 9457 problem details, as the draft's examples use. */
function problem(
  status: number,
  title: string,
  detail: string,
  extra: Record<string, string> = {},
): StoredResponse {
  return {
    status,
    headers: { 'content-type': 'application/problem+json', ...extra },
    body: Buffer.from(JSON.stringify({ type: 'about:blank', title, status, detail })),
  };
}

function inProgress(): StoredResponse {
  return problem(
    409,
    'A request is outstanding for this Idempotency-Key',
    'Retry after the first request completes.',
    {
      'retry-after': '1',
    },
  );
}

function mismatch(): StoredResponse {
  return problem(
    422,
    'Idempotency-Key is already used',
    'This key was used with a different request payload. Use a new key for a new request.',
  );
}

function unavailable(kind: string): StoredResponse {
  return kind === 'other'
    ? problem(500, 'Internal Server Error', 'The request could not be recorded.')
    : problem(503, 'Service Unavailable', 'The idempotency store is unavailable; retry with the same key.', {
        'retry-after': '1',
      });
}

type ParsedKey = { kind: 'missing' } | { kind: 'malformed'; reason: string } | { kind: 'ok'; key: string };

/**
 * The draft defines the header as a Structured Field string (`"abc"`); most clients send
 * it bare (`abc`). Both are accepted; the quotes are not part of the key.
 */
function parseKey(value: string | string[] | undefined, maxLength: number): ParsedKey {
  if (value === undefined) return { kind: 'missing' };
  if (Array.isArray(value)) return { kind: 'malformed', reason: 'The header must appear once.' };
  let key = value.trim();
  if (key.length >= 2 && key.startsWith('"') && key.endsWith('"')) key = key.slice(1, -1);
  if (key === '') return { kind: 'malformed', reason: 'The key is empty.' };
  if (key.length > maxLength)
    return { kind: 'malformed', reason: `The key is longer than ${maxLength} characters.` };
  if (!/^[\x20-\x7e]+$/.test(key) || key.includes('"') || key.includes('\\')) {
    return { kind: 'malformed', reason: 'The key must be printable ASCII without quotes or backslashes.' };
  }
  return { kind: 'ok', key };
}

function send(res: ServerResponse, response: StoredResponse, replayed: boolean): void {
  res.statusCode = response.status;
  for (const [name, value] of Object.entries(response.headers)) res.setHeader(name, value);
  if (replayed) res.setHeader(REPLAY_HEADER, 'true');
  res.setHeader('content-length', response.body.length);
  res.end(response.body);
}

function hasBody(req: IncomingMessage): boolean {
  return req.headers['transfer-encoding'] !== undefined || Number(req.headers['content-length'] ?? 0) > 0;
}

async function readBody(req: IncomingMessage, maxBytes: number): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > maxBytes) throw new TooLarge(`The body is larger than ${maxBytes} bytes.`);
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks);
}

async function payloadBytes(payload: unknown): Promise<Buffer> {
  if (payload === undefined || payload === null) return Buffer.alloc(0);
  if (Buffer.isBuffer(payload)) return payload;
  if (typeof payload === 'string') return Buffer.from(payload);
  if (payload instanceof Uint8Array) return Buffer.from(payload);
  if (typeof (payload as AsyncIterable<unknown>)[Symbol.asyncIterator] === 'function') {
    const chunks: Buffer[] = [];
    for await (const chunk of payload as AsyncIterable<Uint8Array | string>) chunks.push(Buffer.from(chunk));
    return Buffer.concat(chunks);
  }
  return Buffer.from(String(payload));
}

/**
 * Holds the handler's response back until the key's outcome is settled (committed, or
 * stored): nothing reaches the client before the commit, so a client never sees a success
 * whose writes were rolled back.
 */
function captureResponse(res: ServerResponse): {
  done: Promise<{ status: number; body: Buffer }>;
  restore(): void;
} {
  const original = {
    writeHead: res.writeHead,
    write: res.write,
    end: res.end,
    flushHeaders: res.flushHeaders,
  };
  const chunks: Buffer[] = [];
  const done = deferred<{ status: number; body: Buffer }>();
  const push = (chunk: unknown, encoding: unknown) => {
    if (chunk === undefined || chunk === null || typeof chunk === 'function') return;
    chunks.push(
      typeof chunk === 'string'
        ? Buffer.from(chunk, (typeof encoding === 'string' ? encoding : 'utf8') as BufferEncoding)
        : Buffer.from(chunk as Uint8Array),
    );
  };
  const patched = res as unknown as Record<string, unknown>;
  patched.writeHead = (status: number, reason?: unknown, headers?: unknown) => {
    res.statusCode = status;
    if (typeof reason === 'string') res.statusMessage = reason;
    else headers = reason;
    if (Array.isArray(headers)) {
      for (let i = 0; i + 1 < headers.length; i += 2)
        res.setHeader(String(headers[i]), headers[i + 1] as string);
    } else if (headers && typeof headers === 'object') {
      for (const [name, value] of Object.entries(headers))
        if (value !== undefined) res.setHeader(name, value as string);
    }
    return res;
  };
  patched.write = (chunk: unknown, encoding?: unknown, callback?: unknown) => {
    push(chunk, encoding);
    const cb = typeof encoding === 'function' ? encoding : callback;
    if (typeof cb === 'function') queueMicrotask(() => (cb as () => void)());
    return true;
  };
  patched.end = (chunk?: unknown, encoding?: unknown, callback?: unknown) => {
    push(chunk, encoding);
    const cb = [chunk, encoding, callback].find((arg) => typeof arg === 'function');
    done.resolve({ status: res.statusCode, body: Buffer.concat(chunks) });
    if (typeof cb === 'function') res.once('finish', cb as () => void);
    return res;
  };
  patched.flushHeaders = () => {};
  return {
    done: done.promise,
    restore: () => Object.assign(res, original),
  };
}

function deferred<T>(): { promise: Promise<T>; resolve(value: T): void } {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

function positiveInteger(field: string, value: number): number {
  if (!Number.isInteger(value) || value < 1)
    throw new ConfigError(field, `must be a positive integer; got ${String(value)}`);
  return value;
}
