import type { IncomingMessage, ServerResponse } from 'node:http';
import type { HttpKeyStore, IdempotencyStore, Logger, SqlClient } from '@oncely/core';
import { ConfigError, stderrLogger, toLogger } from '@oncely/core';
import { expressMiddleware } from './expressBinding.js';
import { fastifyPlugin } from './fastifyBinding.js';
import { requestFingerprint } from './fingerprint.js';
import { parseIdempotencyKey } from './idempotencyKeyField.js';
import type { KeyContext } from './keyContext.js';
import { respond } from './keyContext.js';
import { decideLeased } from './leasedKey.js';
import { nodeHandler } from './nodeBinding.js';
import { Problems } from './problems.js';
import { decideTransactional } from './transactionalKey.js';
import type {
  FastifyPluginLike,
  HttpIdempotencyOptions,
  IdempotencyDecision,
  IdempotentIncomingMessage,
  IdempotentRequest,
  StoredResponse,
} from './types.js';

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
 * `Idempotency-Key` handling for HTTP APIs on the Oncely store, following the IETF draft
 * "The Idempotency-Key HTTP Header Field" (draft-07): 400 for a missing or malformed key,
 * 409 while the first request is in progress, 422 for a key reused with another payload,
 * and the first response replayed (with `Idempotent-Replayed: true`) without running the
 * handler again. Bind it with {@link HttpIdempotency.handler} (Node http),
 * {@link HttpIdempotency.express} or {@link HttpIdempotency.fastify}; every request they
 * take gets an answer within `handlerTimeoutMs`.
 *
 * @example
 * ```ts
 * const idempotency = new HttpIdempotency({ store, scope: (req) => String(req.headers['x-account']) });
 * await idempotency.migrate();
 * app.use(express.json(), idempotency.express());
 * app.post('/payments', async (req, res) => {
 *   await req.tx!.query('INSERT INTO payments(id, amount) VALUES ($1, $2)', [req.body.id, req.body.amount]);
 *   res.status(201).json({ ok: true });
 * });
 * ```
 */
export class HttpIdempotency {
  readonly mode: 'transactional' | 'leased';
  readonly schema: string;
  /** @internal used by the bindings */
  readonly maxBodyBytes: number;
  /** @internal used by the bindings */
  readonly maxResponseBytes: number;
  /** @internal used by the bindings */
  readonly problems: Problems;
  /** @internal used by the bindings */
  readonly log: Logger;
  private readonly store: IdempotencyStore<SqlClient>;
  private readonly keys: HttpKeyStore<SqlClient>;
  private readonly methods: ReadonlySet<string>;
  private readonly header: string;
  private readonly required: boolean;
  private readonly maxKeyLength: number;
  private readonly bareKeys: boolean;
  private readonly scopeOf: (request: IdempotentRequest) => string | Promise<string>;
  private readonly fingerprintOf: (request: IdempotentRequest) => string;
  private readonly keyContext: KeyContext;
  private migrated: Promise<unknown> | undefined;

  constructor(options: HttpIdempotencyOptions) {
    if (typeof options !== 'object' || options === null)
      throw new ConfigError('http', 'options are required');
    const { store } = options;
    if (!store || typeof store.transaction !== 'function') {
      throw new ConfigError('store', 'must be an Oncely store (for example a PostgresStore or a MySqlStore)');
    }
    if (typeof store.httpKeys !== 'function') {
      throw new ConfigError(
        'store',
        'cannot hold HTTP idempotency keys (it has no httpKeys()): use a PostgresStore or a MySqlStore',
      );
    }
    this.store = store;
    this.scopeOf = scopeFunction(options.scope);
    this.mode = options.mode ?? 'transactional';
    if (this.mode !== 'transactional' && this.mode !== 'leased') {
      throw new ConfigError('mode', `must be 'transactional' or 'leased'; got ${JSON.stringify(this.mode)}`);
    }
    this.schema = options.schema ?? (store as { schema?: string }).schema ?? 'oncely';
    // The store validates the schema (and may refuse one other than its own).
    this.keys = store.httpKeys(options.schema === undefined ? {} : { schema: options.schema });
    if (this.mode === 'transactional' && this.keys.transactionalRefusal !== undefined) {
      throw new ConfigError('mode', this.keys.transactionalRefusal);
    }
    this.methods = new Set((options.methods ?? ['POST', 'PATCH']).map((method) => method.toUpperCase()));
    this.header = (options.header ?? 'Idempotency-Key').toLowerCase();
    this.required = options.required ?? true;
    this.maxKeyLength = positiveInteger('maxKeyLength', options.maxKeyLength ?? 255);
    // Keys are ASCII (the sf-string and bare-key grammars), so characters are bytes.
    if (this.keys.maxKeyBytes !== undefined && this.maxKeyLength > this.keys.maxKeyBytes) {
      throw new ConfigError(
        'maxKeyLength',
        `is ${this.maxKeyLength}, but this store keeps keys of at most ${this.keys.maxKeyBytes} bytes`,
      );
    }
    this.bareKeys = options.bareKeys ?? true;
    if (typeof this.bareKeys !== 'boolean') throw new ConfigError('bareKeys', 'must be a boolean');
    this.fingerprintOf =
      options.fingerprint ??
      ((request) => requestFingerprint({ method: request.method, url: request.url, body: request.body }));
    const failures = options.failures ?? 'rerun';
    if (failures !== 'rerun' && failures !== 'store') {
      throw new ConfigError('failures', `must be 'rerun' or 'store'; got ${JSON.stringify(failures)}`);
    }
    const storeHeaders = new Set(
      (options.storeHeaders ?? DEFAULT_STORE_HEADERS).map((name) => name.toLowerCase()),
    );
    this.maxBodyBytes = positiveInteger('maxBodyBytes', options.maxBodyBytes ?? 1_048_576);
    this.maxResponseBytes = positiveInteger('maxResponseBytes', options.maxResponseBytes ?? 8_388_608);
    this.problems = new Problems(documentationUrl(options.documentationUrl));
    this.log = toLogger(options.logger ?? stderrLogger);
    this.keyContext = {
      store,
      keys: this.keys,
      storeFailures: failures === 'store',
      retentionMs: positiveInteger('retentionMs', options.retentionMs ?? 86_400_000),
      leaseMs: positiveInteger('leaseMs', options.leaseMs ?? 30_000),
      handlerTimeoutMs: positiveInteger('handlerTimeoutMs', options.handlerTimeoutMs ?? 30_000),
      problems: this.problems,
      log: this.log,
      storedHeaders: (response) => JSON.stringify(pickHeaders(response.headers, storeHeaders)),
    };
  }

  /**
   * Creates this package's table (`<schema>.http_idempotency_keys`) if needed, through the
   * store (`store.httpKeys().migrate()`): on PostgreSQL in one transaction under an
   * advisory lock (run the store's own `migrate()` first); on MySQL it is the store's
   * migration 0002, applied by the store's `migrate()` under its `GET_LOCK`. Also run once,
   * lazily, by the first request.
   *
   * @example
   * ```ts
   * await store.migrate();
   * await idempotency.migrate();
   * ```
   */
  async migrate(): Promise<{ applied: string[] }> {
    const applied = await this.keys.migrate();
    this.migrated = Promise.resolve();
    return { applied };
  }

  /**
   * Deletes keys past retention, `batchSize` per transaction; claims still held are kept
   * (rows another transaction holds are skipped, not waited for).
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
      const deleted = await this.store.transaction((tx) => this.keys.prune(tx, batchSize));
      total += deleted;
      if (deleted < batchSize) return total;
    }
  }

  /**
   * The framework-neutral decision for one request. The bindings call it; use it directly
   * to support another framework (send `decision.answer` once it resolves).
   *
   * @example
   * ```ts
   * const decision = await idempotency.decide({ method: 'POST', url: '/x', headers, body, raw: req });
   * ```
   */
  async decide(request: IdempotentRequest): Promise<IdempotencyDecision> {
    if (!this.methods.has(request.method.toUpperCase())) return { kind: 'bypass' };
    const parsed = parseIdempotencyKey(request.headers[this.header], {
      maxLength: this.maxKeyLength,
      bareKeys: this.bareKeys,
    });
    if (parsed.kind === 'missing') {
      if (!this.required) return { kind: 'bypass' };
      return respond(this.problems.answer('missing', `This operation requires the ${this.header} header.`));
    }
    if (parsed.kind === 'malformed') return respond(this.problems.answer('malformed', parsed.reason));
    let scope: string;
    let fingerprint: string;
    try {
      scope = await this.scopeOf(request);
      if (typeof scope !== 'string')
        throw new ConfigError('scope', `must return a string; got ${typeof scope}`);
      fingerprint = this.fingerprintOf(request);
    } catch (error) {
      this.log.error('oncely/http: the scope or fingerprint function failed', { error });
      return respond(this.problems.answer('failed', 'The request could not be scoped.'));
    }
    try {
      await this.ensureMigrated();
      const request = { scope, key: parsed.key, fingerprint };
      return this.mode === 'leased'
        ? await decideLeased(this.keyContext, request)
        : await decideTransactional(this.keyContext, request);
    } catch (error) {
      // Fail closed: without the store the handler never runs unprotected.
      this.log.error('oncely/http: the store failed before the handler ran', { error });
      return respond(this.problems.storeFailed(this.store.classifyError(error)));
    }
  }

  /**
   * Wraps a Node `http` request handler. The wrapper reads the body itself (up to
   * `maxBodyBytes`) and hands it over as `req.rawBody`; the handler also gets `req.tx`
   * (transactional mode) and `req.idempotency`. A handler that throws answers 500. The
   * response is held back until the key is settled, so `await pipeline(stream, res)` and
   * awaiting `res.end`'s callback resume once it is sent.
   *
   * @example
   * ```ts
   * const server = http.createServer(idempotency.handler(async (req, res) => {
   *   await req.tx?.query('INSERT INTO orders(id) VALUES ($1)', [JSON.parse(req.rawBody!.toString()).id]);
   *   res.writeHead(201, { 'content-type': 'application/json' }).end('{"ok":true}');
   * }));
   * ```
   */
  handler(
    handle: (req: IdempotentIncomingMessage, res: ServerResponse) => unknown,
  ): (req: IncomingMessage, res: ServerResponse) => Promise<void> {
    return nodeHandler(this, handle);
  }

  /**
   * Express middleware (4 and 5). Mount it after the body parser: the parsed `req.body` is
   * fingerprinted (without a parser the raw body is read into `req.body` as a Buffer).
   * Handlers get `req.tx` (transactional mode) and `req.idempotency`.
   *
   * @example
   * ```ts
   * app.post('/payments', express.json(), idempotency.express(), async (req, res) => {
   *   await req.tx!.query('INSERT INTO payments(id) VALUES ($1)', [req.body.id]);
   *   res.status(201).json({ id: req.body.id });
   * });
   * ```
   */
  express(): (req: IncomingMessage, res: ServerResponse, next: (error?: unknown) => void) => void {
    return expressMiddleware(this);
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
    return fastifyPlugin(this);
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
}

/** `scope` as a function; a string is the same scope for every request. */
function scopeFunction(
  scope: HttpIdempotencyOptions['scope'] | undefined,
): (request: IdempotentRequest) => string | Promise<string> {
  if (typeof scope === 'function') return scope;
  if (typeof scope === 'string') return () => scope;
  throw new ConfigError(
    'scope',
    "is required: (req) => the client's stable identity (account or API key ID), so that two clients never share a key; or a fixed string to share one scope across all requests ('' is the scope keys had before scope was required)",
  );
}

function documentationUrl(url: string | undefined): string | undefined {
  if (url === undefined) return undefined;
  if (typeof url !== 'string' || !URL.canParse(url)) {
    throw new ConfigError('documentationUrl', `must be an absolute URL; got ${JSON.stringify(url)}`);
  }
  return url;
}

function pickHeaders(
  headers: StoredResponse['headers'] | Record<string, unknown>,
  keep: ReadonlySet<string>,
): Record<string, string | string[]> {
  const picked: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined || !keep.has(name.toLowerCase())) continue;
    picked[name.toLowerCase()] = Array.isArray(value) ? value.map(String) : String(value);
  }
  return picked;
}

function positiveInteger(field: string, value: number): number {
  if (!Number.isInteger(value) || value < 1)
    throw new ConfigError(field, `must be a positive integer; got ${String(value)}`);
  return value;
}
