import { randomBytes } from 'node:crypto';
import {
  type AdapterModule,
  type BackoffConfig,
  Consumer,
  type ConsumerConfig,
  type Handler,
  type HandlerContext,
  type IdempotencyStore,
  type Logger,
  loadAdapterModule,
  type Message,
  type SqlClient,
} from '@oncely/core';
import { HarnessIncompleteError, WaitTimeoutError } from './errors.js';
import { FaultInjector } from './FaultInjector.js';
import type {
  AdapterFeatures,
  AdapterHarness,
  HarnessSetup,
  PublishedMessage,
  SetupOptions,
  StoreHandle,
} from './harness.js';
import { Latch } from './Latch.js';
import { ConsumerSpy, waitFor } from './spies.js';
import { POSTGRES_DIALECT, type SqlDialect } from './sqlDialect.js';

/** State shared by the scenarios of one `runAdapterConformance` run. */
export interface SuiteState {
  features: AdapterFeatures;
  harness: AdapterHarness;
  storeHandle: StoreHandle;
  adapterModule: AdapterModule;
  /** Quoted schema (MySQL: database) holding the effect tables of this run. */
  schema: string;
  /** The SQL dialect of the store's transactions (the harness's, else PostgreSQL's). */
  sql: SqlDialect;
  schemaName: string;
  scenarioCount: number;
  failed: boolean;
}

/** What a scenario's consumer is built with; the rest comes from {@link ScenarioRun.startConsumer}'s defaults. */
export interface ScenarioConsumerOptions {
  /** Name of this consumer in events and evidence. */
  label: string;
  handler: Handler<any>;
  concurrency?: number;
  maxAttempts?: number;
  backoff?: Partial<BackoffConfig>;
  leaseRenewal?: boolean;
  handlerTimeoutMs?: number;
  outageHoldMs?: number;
  stopTimeoutMs?: number;
  stopGraceMs?: number;
  /** Another store (the one behind the TCP proxy). @default the run's store */
  store?: IdempotencyStore<SqlClient>;
  brokerOverrides?: Record<string, unknown>;
}

/** A row of a scenario's effect table. */
export interface EffectRow {
  ord: number;
  message_id: string;
  attempt: number | null;
  consumer: string | null;
  ordering_key: string | null;
  seq: number | null;
}

/** Thrown inside a probe transaction to roll it back. */
class ProbeRollback extends Error {
  constructor(readonly found: boolean) {
    super('probe rollback');
  }
}

const MAX_LOG_LINES = 400;

/**
 * The label of {@link ScenarioRun.waitForEffects} for `count` IDs: how its timeout's
 * message starts (a planted defect that loses messages names it as its symptom).
 */
export function effectsWait(count: number): string {
  return `an effect for each of ${count} messages`;
}

/** The label of {@link ScenarioRun.waitForBacklogZero}: how its timeout's message starts. */
export const BACKLOG_ZERO_WAIT = 'backlog 0 (every message settled at the broker)';

/**
 * One scenario's world: its broker destination, its effect table, the consumers it
 * starts (each wrapped in the shared fault injector and watched by the shared spy), and
 * the evidence printed when it fails.
 */
export class ScenarioRun {
  readonly spy = new ConsumerSpy();
  readonly faults = new FaultInjector();
  readonly consumers: Array<Consumer<any>> = [];
  readonly consumerName: string;
  /** Quoted, schema-qualified effect table. */
  readonly table: string;
  readonly setup: HarnessSetup;
  /** Lease of the destination (as the harness configured it). */
  readonly leaseMs: number;
  private readonly logLines: string[] = [];
  private readonly latches: Latch[] = [];
  private readonly cleanups: Array<() => Promise<void>> = [];

  private constructor(
    readonly state: SuiteState,
    readonly slug: string,
    setup: HarnessSetup,
    requestedLeaseMs: number,
  ) {
    const tag = `${state.scenarioCount}_${randomBytes(3).toString('hex')}`;
    this.consumerName = `conformance-${slug}-${tag}`;
    this.table = `${state.schema}.${state.sql.quote(`${slug.replaceAll('-', '_')}_${tag}`)}`;
    this.setup = setup;
    this.leaseMs = setup.leaseMs ?? requestedLeaseMs;
  }

  /** Provisions the destination and the effect table for one scenario. */
  static async begin(
    state: SuiteState,
    slug: string,
    options: SetupOptions & { leaseMs: number },
  ): Promise<ScenarioRun> {
    state.scenarioCount++;
    const name = `${slug}-${state.scenarioCount}-${randomBytes(3).toString('hex')}`;
    const setup = await state.harness.setup({ name, ...options });
    const run = new ScenarioRun(state, slug, setup, options.leaseMs);
    // No unique key on message_id on purpose: a second effect must be visible as a second row.
    const { types } = state.sql;
    await run.ddl(
      `CREATE TABLE ${run.table} (
         ord ${types.serialPrimaryKey},
         message_id ${types.key} NOT NULL,
         attempt integer,
         consumer ${types.text},
         ordering_key ${types.text},
         seq integer,
         at ${types.insertedAt}
       )`,
    );
    return run;
  }

  /** The store the suite checks through (never the proxied one). */
  get store(): IdempotencyStore<SqlClient> {
    return this.state.storeHandle.store;
  }

  /** The INSERT of one effect row (message_id, attempt, consumer, ordering_key, seq), in the store's dialect. */
  get insertEffectSql(): string {
    const p = this.state.sql.param;
    return `INSERT INTO ${this.table} (message_id, attempt, consumer, ordering_key, seq) VALUES (${p(1)}, ${p(2)}, ${p(3)}, ${p(4)}, ${p(5)})`;
  }

  /** DDL where the dialect runs it (outside store transactions on MySQL), else in a store transaction. */
  async ddl(statement: string): Promise<void> {
    await suiteDdl(this.state.sql, this.store, statement);
  }

  /** Runs one statement on the checking store. */
  async sql<R = Record<string, unknown>>(text: string, params: unknown[] = []): Promise<R[]> {
    return this.store.transaction(async (tx) => (await tx.query<R>(text, params)).rows);
  }

  /** Writes the effect of `message` through the handler's transaction: the only effect a scenario counts. */
  async insertEffect(
    ctx: HandlerContext<SqlClient>,
    message: Message<any>,
    consumer: string,
    seq?: number,
  ): Promise<void> {
    await ctx.tx.query(this.insertEffectSql, [
      message.id,
      ctx.attempt,
      consumer,
      message.orderingKey ?? null,
      seq ?? null,
    ]);
  }

  /** Committed effect rows, in insertion order. */
  async effectRows(): Promise<EffectRow[]> {
    const rows = await this.sql<EffectRow & { ord: string }>(
      `SELECT ord, message_id, attempt, consumer, ordering_key, seq FROM ${this.table} ORDER BY ord`,
    );
    return rows.map((row) => ({ ...row, ord: Number(row.ord) }));
  }

  /** Committed effects per message ID. */
  async effectCounts(): Promise<Map<string, number>> {
    const counts = new Map<string, number>();
    for (const row of await this.effectRows())
      counts.set(row.message_id, (counts.get(row.message_id) ?? 0) + 1);
    return counts;
  }

  async effectsOf(messageId: string): Promise<number> {
    const [row] = await this.sql<{ n: string }>(
      `SELECT count(*) AS n FROM ${this.table} WHERE message_id = ${this.state.sql.param(1)}`,
      [messageId],
    );
    return Number(row?.n ?? 0);
  }

  /** Waits until every ID in `ids` has at least one committed effect. */
  async waitForEffects(ids: readonly string[], timeoutMs: number): Promise<Map<string, number>> {
    let counts = new Map<string, number>();
    let missing: readonly string[] = ids;
    try {
      await waitFor(
        async () => {
          counts = await this.effectCounts();
          missing = ids.filter((id) => !counts.has(id));
          return missing.length === 0;
        },
        { timeoutMs, intervalMs: 100 },
      );
    } catch (error) {
      if (!(error instanceof WaitTimeoutError)) throw error;
      throw new WaitTimeoutError(
        `${effectsWait(ids.length)}: ${missing.length} still missing (${missing.slice(0, 5).join(', ')}…); events: ${this.spy.summary()}`,
        timeoutMs,
      );
    }
    return counts;
  }

  /**
   * Whether the processed marker of `messageId` is committed, asked of the store's own
   * claim in a transaction that is always rolled back (so the probe leaves nothing).
   */
  async markerExists(messageId: string): Promise<boolean> {
    try {
      await this.store.transaction(async (tx) => {
        const claimed = await this.store.claim(tx, this.consumerName, [messageId]);
        throw new ProbeRollback(!claimed.has(messageId));
      });
    } catch (error) {
      if (error instanceof ProbeRollback) return error.found;
      throw error;
    }
    throw new Error('unreachable: the probe transaction always rolls back');
  }

  /**
   * Waits until the broker reports no unsettled message. Skipped only where the harness
   * declares `backlogUnknown`; an `undefined` backlog from any other harness is an error.
   */
  async waitForBacklogZero(timeoutMs: number): Promise<void> {
    if (this.state.harness.backlogUnknown !== undefined) return;
    // Asked once outside waitFor, which would retry the error until its deadline.
    if ((await this.knownBacklog()) === 0) return;
    await waitFor(async () => (await this.knownBacklog()) === 0, {
      timeoutMs,
      intervalMs: 100,
      description: BACKLOG_ZERO_WAIT,
    });
  }

  private async knownBacklog(): Promise<number> {
    const backlog = await this.setup.backlog();
    if (backlog === undefined) {
      throw new HarnessIncompleteError(
        'setup.backlog',
        'a count of unsettled messages (it answered undefined); a broker that cannot count declares backlogUnknown',
      );
    }
    return backlog;
  }

  /** How many times the broker handed `messageId` to the suite's consumers. */
  receipts(messageId: string | undefined): number {
    return this.spy.countFor('received', messageId);
  }

  publish(messages: readonly PublishedMessage[]): Promise<void> {
    return this.setup.publish(messages);
  }

  /** A latch opened at the end of the scenario whatever happens, so nothing stays blocked. */
  latch(): Latch {
    const latch = new Latch();
    this.latches.push(latch);
    return latch;
  }

  /** Runs `cleanup` when the scenario ends (in reverse order of registration). */
  onEnd(cleanup: () => Promise<void>): void {
    this.cleanups.push(cleanup);
  }

  /** Builds a consumer of this scenario's destination through the fault injector and starts it. */
  async startConsumer(options: ScenarioConsumerOptions): Promise<Consumer<any>> {
    const consumer = this.buildConsumer(options);
    await consumer.start();
    return consumer;
  }

  buildConsumer(options: ScenarioConsumerOptions): Consumer<any> {
    const { harness, adapterModule } = this.state;
    const brokerConfig = this.setup.brokerConfig(options.brokerOverrides);
    const log = this.logger(options.label);
    const config: ConsumerConfig<any> = {
      name: this.consumerName,
      broker: brokerConfig,
      store: options.store ?? this.store,
      handler: options.handler,
      concurrency: options.concurrency ?? 4,
      maxAttempts: options.maxAttempts ?? 5,
      backoff: { initialMs: 100, maxMs: 2000, jitter: 0, ...options.backoff },
      handlerTimeoutMs: options.handlerTimeoutMs ?? 30_000,
      stopTimeoutMs: options.stopTimeoutMs ?? 5_000,
      logger: log,
    };
    if (options.leaseRenewal !== undefined) config.leaseRenewal = options.leaseRenewal;
    if (options.outageHoldMs !== undefined) config.outageHoldMs = options.outageHoldMs;
    if (options.stopGraceMs !== undefined) config.stopGraceMs = options.stopGraceMs;
    if (harness.idStrategy !== undefined) config.idStrategy = harness.idStrategy;
    const inner = adapterModule.createAdapter(brokerConfig, {
      consumerName: this.consumerName,
      log,
      idStrategy: config.idStrategy,
      maxAttempts: config.maxAttempts,
      handlerTimeoutMs: config.handlerTimeoutMs,
      outageHoldMs: config.outageHoldMs,
    });
    const adapter = this.faults.wrap(inner, { label: options.label, idStrategy: harness.idStrategy });
    const consumer = new Consumer(config, adapter);
    this.spy.attach(consumer, options.label);
    this.consumers.push(consumer);
    return consumer;
  }

  /** Consumer logs, kept as evidence for a failing scenario. */
  logger(label: string): Logger {
    const line = (level: string) => (message: string, fields?: Record<string, unknown>) => {
      if (this.logLines.length >= MAX_LOG_LINES) this.logLines.shift();
      this.logLines.push(
        `${new Date().toISOString()} [${label}] ${level} ${message}${fields ? ` ${describeFields(fields)}` : ''}`,
      );
    };
    return { debug: () => {}, info: line('info'), warn: line('warn'), error: line('error') };
  }

  /** What to print when the scenario fails. */
  evidence(): string {
    const settled = this.faults.settlements.map(
      (s) =>
        `${s.kind}(${s.messageId ?? '-'})@${s.source}${s.dropped ? ' dropped' : s.ok ? '' : ` failed: ${errorText(s.error)}`}`,
    );
    return [
      `consumer name: ${this.consumerName}; effect table: ${this.table} (kept for inspection)`,
      `events: ${this.spy.summary()}`,
      `settlements (${settled.length}): ${settled.slice(-60).join(', ')}`,
      '--- consumer log (tail) ---',
      ...this.logLines.slice(-80),
    ].join('\n');
  }

  /** Stops every consumer, releases everything held, tears the destination down and (on success) drops the table. */
  async end(passed: boolean): Promise<void> {
    for (const latch of this.latches) latch.open();
    this.faults.releaseAll();
    await Promise.allSettled(this.consumers.map((consumer) => consumer.stop()));
    for (const cleanup of this.cleanups.reverse()) await cleanup().catch(() => {});
    await this.setup.teardown().catch(() => {});
    if (passed) await this.ddl(`DROP TABLE IF EXISTS ${this.table}`).catch(() => {});
  }
}

/** Resolves after `ms`: simulated work inside handlers and deliberate outage lengths, never synchronisation. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener(
      'abort',
      () => {
        clearTimeout(timer);
        resolve();
      },
      { once: true },
    );
  });
}

/** Runs DDL through the dialect's own path when it has one, else in a transaction of `store`. */
export async function suiteDdl(
  sql: SqlDialect,
  store: IdempotencyStore<SqlClient>,
  statement: string,
): Promise<void> {
  if (sql.ddl) await sql.ddl(statement);
  else await store.transaction((tx) => tx.query(statement));
}

/** The dialect a harness declares, else PostgreSQL's. */
export function harnessDialect(harness: AdapterHarness): SqlDialect {
  return harness.sql ?? POSTGRES_DIALECT;
}

/** Loads the adapter module for a harness. */
export function loadHarnessAdapter(harness: AdapterHarness): Promise<AdapterModule> {
  return harness.loadAdapter ? harness.loadAdapter() : loadAdapterModule(harness.brokerType as never);
}

function describeFields(fields: Record<string, unknown>): string {
  const parts = Object.entries(fields).map(
    ([key, value]) => `${key}=${value instanceof Error ? errorText(value) : safe(value)}`,
  );
  return parts.join(' ');
}

function safe(value: unknown): string {
  try {
    const text = typeof value === 'string' ? value : JSON.stringify(value);
    return text === undefined ? String(value) : text.length > 200 ? `${text.slice(0, 200)}…` : text;
  } catch {
    return String(value);
  }
}

export function errorText(error: unknown): string {
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error);
}
