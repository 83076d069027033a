import { createHash, randomUUID } from 'node:crypto';
import {
  ConfigError,
  type ConsumerConfig,
  type DeadLetterLedger,
  type DeadLetterLedgerEntry,
  type DeadLetterPassLock,
  type DeadLetterSession,
  type HeldDeadLetter,
  type IdempotencyStore,
  type IdStrategy,
  resolveMessageId,
} from '@oncely/core';
import type { IHeaders } from 'kafkajs';
import type {
  ClusterAdmin,
  KafkaClientDriver,
  KafkaRecord,
  OutgoingRecord,
  RecordProducer,
} from './adapter/clientApi.js';
import { toolDriver } from './adapter/loadDriver.js';
import { defaultMessageId } from './client.js';
import { type ResolvedKafkaConfig, resolveKafkaConfig } from './config.js';
import { DEAD_LETTER_HEADERS } from './deadLetter.js';
import { headersToAttributes } from './envelope.js';
import { KafkaDeadLetterError, KafkaTopicMissingError } from './errors.js';
import { MESSAGE_ID_HEADER } from './send.js';

/** How long `open` waits for another pass's lock before it gives up. */
const LOCK_WAIT_MS = 10_000;
/** How long one scan of the dead-letter topic (or of a source partition) may take. */
const SCAN_TIMEOUT_MS = 120_000;
/**
 * How long after its intent a copy may still turn up (offsets mode, see recover): the
 * broker's replica.lag.time.max.ms default, after which a follower that has not fetched is
 * out of the in-sync set and the high watermark moves on without it.
 */
const REPLICATION_GRACE_MS = 30_000;
/** How many discards are written in one commit at most. */
const DISCARD_BATCH = 500;
/** The headers a dead letter carries and its re-sent copy must not (it starts afresh). */
const STRIPPED = new Set<string>(Object.values(DEAD_LETTER_HEADERS));

/** A dead letter as this session read it: where it lies, and what it came from. */
interface KafkaHeld extends HeldDeadLetter {
  readonly partition: number;
  readonly offset: string;
  readonly fingerprint: string;
  readonly record: KafkaRecord;
  readonly origin: { topic: string; partition: number; offset: string };
  readonly valueDropped: boolean;
  /**
   * Later dead letters of the same original record (it was dead-lettered again after a
   * crash between the dead letter and the offset commit): settled with this one, never
   * sent themselves.
   */
  readonly twins: KafkaHeld[];
}

/**
 * Opens a pass over the consumer's dead-letter topic (`broker.deadLetterTopic`, default
 * `<topic>.dlq`) for `DeadLetters` / `oncely dlq`.
 *
 * A Kafka topic cannot forget a record, so what was done to each dead letter is kept in the
 * store's dead-letter ledger (`store.deadLetterLog.ledger`: PostgreSQL, PGlite, MySQL), keyed
 * by its position, and a pass runs under the ledger's lock, tied to a database connection so
 * that a killed process lets go of it at once (another pass waits up to 10 s, then fails).
 *
 * - `read()` scans every partition of the dead-letter topic from its log start to its end and
 *   lists this consumer's letters (header `oncely-consumer`) that the ledger does not mark
 *   replayed or discarded, oldest first. It first settles what a pass that died left
 *   `replaying`: a copy found in the source partition (header `oncely-replay-of`, at or above
 *   the end offset read before the send) makes it `replayed`; none puts it back in the list.
 * - `replay` re-sends in two phases: the intent (`replaying`, with the source partition's end
 *   offset) is committed, the copy is produced to the letter's original partition (acks -1)
 *   without the dead-letter headers, then `replayed` is committed. So a letter is re-sent
 *   once, whatever kills the process, even in `offsets` mode, which keeps no marker (not
 *   covered: a pass whose lock connection died while its produce stayed pending over 30 s,
 *   and a source whose retention passed the intent; see the README). A record dead-lettered
 *   twice is listed, sent and settled once.
 * - `remove` marks it `discarded` (the core has recorded the discard before); written in one
 *   commit at `close()` (every 500 in a larger pass).
 *
 * @example
 * ```ts
 * const session = await openDeadLetters({ name: 'payments', broker: { type: 'kafka', brokers, topic: 'payments' }, store, handler });
 * const letters = await session.read();
 * await session.close();
 * ```
 */
export async function openDeadLetters(config: ConsumerConfig<any, any>): Promise<DeadLetterSession> {
  const resolved = resolveKafkaConfig(config.broker, config.name);
  const ledger = (config.store as IdempotencyStore<unknown> | undefined)?.deadLetterLog?.ledger;
  if (!ledger) {
    throw new ConfigError(
      'store',
      'Kafka keeps dead letters in a log: oncely dlq needs a store with a dead-letter ledger (PostgresStore or MySqlStore on a pool or PGlite)',
    );
  }
  const driver = await toolDriver(resolved, 'dlq');
  const admin = driver.admin();
  await admin.connect();
  let lock: DeadLetterPassLock | undefined;
  try {
    if (!(await admin.topicExists(resolved.deadLetterTopic))) {
      throw new KafkaTopicMissingError(
        resolved.deadLetterTopic,
        `dead-letter topic '${resolved.deadLetterTopic}' does not exist`,
      );
    }
    lock = await takeLock(ledger, config.name, resolved.deadLetterTopic);
  } catch (error) {
    await admin.disconnect().catch(() => {});
    throw error;
  }
  const strategy: IdStrategy = config.idStrategy ?? ((envelope) => defaultMessageId(envelope, config.mode));
  return new KafkaDeadLetterSession(config, resolved, driver, admin, ledger, lock, strategy);
}

/** The pass lock, waiting up to {@link LOCK_WAIT_MS} for another pass to end. */
async function takeLock(
  ledger: DeadLetterLedger,
  consumer: string,
  queue: string,
): Promise<DeadLetterPassLock> {
  const deadline = Date.now() + LOCK_WAIT_MS;
  for (;;) {
    const lock = await ledger.tryLock(consumer, queue);
    if (lock) return lock;
    if (Date.now() >= deadline) {
      throw new KafkaDeadLetterError(
        `another oncely dlq pass on '${queue}' for consumer '${consumer}' is running (its lock was still held after ${LOCK_WAIT_MS / 1000} s); run again once it is done`,
      );
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

class KafkaDeadLetterSession implements DeadLetterSession {
  private producer: RecordProducer | undefined;
  private connecting: Promise<RecordProducer> | undefined;
  private readonly scanGroups: string[] = [];
  /** Replays asked for in this turn of the event loop: sent as one batch. */
  private queued: Array<{ letter: KafkaHeld; resolve: () => void; reject: (error: unknown) => void }> = [];
  /** The batch being sent: batches go one after another. */
  private sending: Promise<void> = Promise.resolve();
  /** Discards not written yet (see remove). */
  private discards: DeadLetterLedgerEntry[] = [];
  private closed = false;

  constructor(
    private readonly config: ConsumerConfig<any, any>,
    private readonly resolved: ResolvedKafkaConfig,
    private readonly driver: KafkaClientDriver,
    private readonly admin: ClusterAdmin,
    private readonly ledger: DeadLetterLedger,
    private readonly lock: DeadLetterPassLock,
    readonly defaultIdStrategy: IdStrategy,
  ) {}

  get name(): string {
    return this.resolved.deadLetterTopic;
  }

  private get queue(): string {
    return this.resolved.deadLetterTopic;
  }

  async read(): Promise<HeldDeadLetter[]> {
    this.assertLocked();
    const offsets = await this.admin.partitionOffsets(this.queue);
    // Rows below the log start belong to records retention removed.
    await this.ledger.prune(
      this.config.name,
      this.queue,
      new Map(offsets.map(({ partition, low }) => [partition, low.toString()])),
    );
    let entries = await this.ledger.entries(this.config.name, this.queue);
    if (entries.some((entry) => entry.state === 'replaying')) {
      await this.recover(entries.filter((entry) => entry.state === 'replaying'));
      entries = await this.ledger.entries(this.config.name, this.queue);
    }
    const settled = new Map(entries.map((entry) => [`${entry.partition}/${entry.offset}`, entry]));
    const ends = new Map<number, bigint>();
    for (const { partition, low, high } of offsets) if (high > low) ends.set(partition, high);
    const letters: KafkaHeld[] = [];
    const stale: Array<{ partition: number; offset: string }> = [];
    // Original record -> the ledger row of a settled dead letter of it.
    const settledOrigins = new Map<string, DeadLetterLedgerEntry>();
    await this.scan(this.queue, ends, undefined, (record, partition) => {
      const letter = this.toLetter(record, partition);
      if (!letter) return;
      const entry = settled.get(`${partition}/${record.offset}`);
      if (entry && entry.fingerprint === letter.fingerprint) {
        if (entry.state !== 'replaying') settledOrigins.set(originKey(letter), entry);
        return;
      }
      // A row written for another record at this position: the topic was recreated.
      if (entry) stale.push({ partition, offset: record.offset });
      letters.push(letter);
    });
    if (stale.length > 0) {
      this.assertLocked();
      await this.ledger.delete(this.config.name, this.queue, stale);
    }
    letters.sort(
      (a, b) =>
        (a.lastFailedAt?.getTime() ?? 0) - (b.lastFailedAt?.getTime() ?? 0) ||
        a.partition - b.partition ||
        compareOffsets(a.offset, b.offset),
    );
    // One original record dead-lettered twice (a crash between the dead letter and the
    // offset commit, then the same failure) is one message: listed, sent and settled once.
    // A later dead letter of one already settled (a pass killed before it recorded the
    // twin) takes that state; the copy is in the source, or the operator threw it away.
    const listed: KafkaHeld[] = [];
    const firsts = new Map<string, KafkaHeld>();
    const adopted: DeadLetterLedgerEntry[] = [];
    for (const letter of letters) {
      const origin = originKey(letter);
      const done = settledOrigins.get(origin);
      if (done) {
        adopted.push({
          ...this.entry(letter, done.state),
          ...(done.target === undefined ? {} : { target: done.target }),
        });
        continue;
      }
      const first = firsts.get(origin);
      if (first) first.twins.push(letter);
      else {
        firsts.set(origin, letter);
        listed.push(letter);
      }
    }
    if (adopted.length > 0) {
      this.assertLocked();
      await this.ledger.put(adopted);
    }
    return listed;
  }

  replay(letter: HeldDeadLetter): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      // The core starts a window's replays in one synchronous loop: they go out together.
      if (this.queued.length === 0) setImmediate(() => this.sendQueued());
      this.queued.push({ letter: letter as KafkaHeld, resolve, reject });
    });
  }

  async remove(letter: HeldDeadLetter): Promise<void> {
    this.assertLocked();
    const held = letter as KafkaHeld;
    this.discards.push(this.entry(held, 'discarded'));
    for (const twin of held.twins) this.discards.push(this.entry(twin, 'discarded'));
    // Written in one commit at close() (the core reports the discard only after it), or
    // now when many wait: a crash before the write leaves the letter listed with its
    // discard record, as a crash between the record and the removal does on every broker.
    if (this.discards.length >= DISCARD_BATCH) await this.writeDiscards();
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    try {
      await this.sending;
      if (this.discards.length > 0) await this.writeDiscards();
    } finally {
      await this.lock.release();
      await this.producer?.disconnect().catch(() => {});
      for (const groupId of this.scanGroups) await this.admin.deleteGroup(groupId).catch(() => {});
      await this.admin.disconnect().catch(() => {});
    }
  }

  private async writeDiscards(): Promise<void> {
    this.assertLocked();
    const batch = this.discards.splice(0);
    await this.ledger.put(batch);
  }

  private sendQueued(): void {
    const batch = this.queued.splice(0);
    this.sending = this.sending
      .then(() => this.sendBatch(batch))
      .catch((error: unknown) => {
        // Settled letters ignore this; the rest fail with it rather than hang.
        for (const item of batch) item.reject(error);
      });
  }

  /** Intent, produce, done: see openDeadLetters. Each letter's promise settles with its fate. */
  private async sendBatch(
    batch: Array<{ letter: KafkaHeld; resolve: () => void; reject: (error: unknown) => void }>,
  ): Promise<void> {
    const source = this.resolved.topic;
    let entries: DeadLetterLedgerEntry[];
    let records: OutgoingRecord[];
    let ready: typeof batch;
    try {
      this.assertLocked();
      const ends = new Map(
        (await this.admin.partitionOffsets(source)).map(({ partition, high }) => [partition, high]),
      );
      ready = [];
      for (const item of batch) {
        const refusal = this.refusal(item.letter, ends);
        if (refusal) item.reject(refusal);
        else ready.push(item);
      }
      if (ready.length === 0) return;
      entries = ready.map(({ letter }) => ({
        ...this.entry(letter, 'replaying'),
        target: {
          topic: source,
          partition: letter.origin.partition,
          from: ends.get(letter.origin.partition)!.toString(),
        },
      }));
      records = ready.map(({ letter }) => this.copyOf(letter));
      // Phase 1: the intent. A crash from here on is settled by the next pass's recovery.
      await this.ledger.put(entries);
    } catch (error) {
      for (const item of batch) item.reject(error);
      return;
    }
    let sent: Awaited<ReturnType<RecordProducer['send']>>;
    try {
      const producer = await this.connectedProducer();
      // The lock may have gone while the intent was written: another pass may be running.
      this.assertLocked();
      sent = await producer.send(source, records, { timeoutMs: this.resolved.requestTimeout });
    } catch (error) {
      const inDoubt = new KafkaDeadLetterError(
        `re-sending ${ready.length} dead letter(s) to '${source}' failed or is in doubt: the next pass looks for them in '${source}' and re-sends only those not there`,
        { cause: error },
      );
      for (const item of ready) item.reject(inDoubt);
      return;
    }
    // The copies' offsets: per partition, its base offset plus the position in the request.
    const next = new Map<number, bigint>();
    for (const written of sent) {
      if (written.baseOffset !== undefined) next.set(written.partition, BigInt(written.baseOffset));
    }
    const done: DeadLetterLedgerEntry[] = entries.map((entry) => {
      const target = { ...entry.target! };
      const at = next.get(target.partition);
      if (at !== undefined) {
        target.offset = at.toString();
        next.set(target.partition, at + 1n);
      }
      return { ...entry, state: 'replayed' as const, target, at: new Date() };
    });
    // The twins are settled with their letter, in the same commit.
    ready.forEach(({ letter }, i) => {
      for (const twin of letter.twins)
        done.push({ ...this.entry(twin, 'replayed'), target: done[i]!.target! });
    });
    try {
      this.assertLocked();
      // Phase 2: done. A crash before it leaves `replaying` rows the next pass finds sent.
      await this.ledger.put(done);
    } catch (error) {
      const unrecorded = new KafkaDeadLetterError(
        `re-sent ${ready.length} dead letter(s) to '${source}', but could not record it: the next pass finds the copies and does not send them again`,
        { cause: error },
      );
      for (const item of ready) item.reject(unrecorded);
      return;
    }
    for (const item of ready) item.resolve();
  }

  /** Why `letter` cannot be re-sent as it is, or undefined. */
  private refusal(letter: KafkaHeld, ends: ReadonlyMap<number, bigint>): Error | undefined {
    if (letter.valueDropped) {
      return new KafkaDeadLetterError(
        `dead letter ${this.queue}/${letter.partition}/${letter.offset} was written without its value (too large for the dead-letter topic): replay the original at ${letter.origin.topic}/${letter.origin.partition}/${letter.origin.offset}, or discard it`,
      );
    }
    if (letter.origin.topic !== this.resolved.topic) {
      // A dead-letter topic shared with (or kept from) this consumer name on another topic:
      // its partition number means nothing here, and the record never was in this topic.
      return new KafkaDeadLetterError(
        `dead letter ${this.queue}/${letter.partition}/${letter.offset} came from '${letter.origin.topic}', not from '${this.resolved.topic}' (this consumer's topic): replay it with a config whose topic is '${letter.origin.topic}', or discard it`,
      );
    }
    if (!ends.has(letter.origin.partition)) {
      return new KafkaDeadLetterError(
        `'${this.resolved.topic}' has no partition ${letter.origin.partition}, where dead letter ${this.queue}/${letter.partition}/${letter.offset} came from (was the topic recreated smaller?)`,
      );
    }
    return undefined;
  }

  /**
   * The copy sent back: key, value and headers without the dead-letter headers, a fresh
   * timestamp (retention counts from the replay), the `oncely-replay-of` mark, to the
   * partition the record came from (its key's partition, and where recovery looks).
   */
  private copyOf(letter: KafkaHeld): OutgoingRecord {
    const headers: IHeaders = {};
    for (const [name, value] of Object.entries(letter.record.headers ?? {})) {
      if (!STRIPPED.has(name) && value !== undefined) headers[name] = value;
    }
    // offsets mode names a record without `message-id` by its position: the copy keeps the
    // original's, or events, attempts and `inspect` would know it by the copy's offset.
    if (
      this.config.mode === 'offsets' &&
      this.config.idStrategy === undefined &&
      !letter.envelope.attributes[MESSAGE_ID_HEADER]?.trim()
    ) {
      headers[MESSAGE_ID_HEADER] =
        `${letter.origin.topic}/${letter.origin.partition}/${letter.origin.offset}`;
    }
    headers[DEAD_LETTER_HEADERS.replayOf] = replayMark(
      this.queue,
      letter.partition,
      letter.offset,
      letter.fingerprint,
    );
    return {
      key: letter.record.key,
      value: letter.record.value,
      headers,
      partition: letter.origin.partition,
    };
  }

  /**
   * Settles the `replaying` rows a dead pass left: a copy in its target partition at or
   * above `from` (the end offset read before the send, so a copy written before the crash
   * lies there) makes the row `replayed`; none deletes it, and the letter waits again.
   */
  private async recover(rows: DeadLetterLedgerEntry[]): Promise<void> {
    const found = new Map<string, string>();
    const expired: DeadLetterLedgerEntry[] = [];
    await this.findCopies(rows, found, expired);
    // A copy the killed pass's leader had appended but not yet replicated lies above the
    // high watermark, invisible to the scan, and may still become visible; so may the copy
    // of a pass whose lock connection died while its produce was in flight (it goes on
    // sending). A re-send now would put a second copy in the source: in offsets mode (no
    // marker) or under an ID strategy naming the copy by its offset, a second effect. In
    // every mode, rows younger than the broker's replica.lag.time.max.ms default are
    // looked for once more after it. (A produce still pending after that is not covered:
    // see the README's "Dead letters" limits.)
    const young = rows.filter(
      (row) => !found.has(key(row)) && Date.now() - row.at.getTime() < REPLICATION_GRACE_MS,
    );
    if (young.length > 0) {
      const wait = Math.max(...young.map((row) => row.at.getTime())) + REPLICATION_GRACE_MS - Date.now();
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, wait)));
      await this.findCopies(young, found, []);
    }
    const lost = expired.filter((row) => !found.has(key(row)));
    if (lost.length > 0 && this.config.mode === 'offsets') {
      // No marker would absorb a second copy: better stop than double an effect.
      throw new KafkaDeadLetterError(
        `cannot tell whether ${lost.length} dead letter(s) of an interrupted replay reached '${lost[0]!.target!.topic}' (its retention removed records since): first ${this.queue}/${lost[0]!.partition}/${lost[0]!.offset}; check the consumer's effects, then delete their 'replaying' rows from dead_letter_ledger to list them again, or mark them 'replayed'`,
      );
    }
    this.assertLocked();
    const now = new Date();
    await this.ledger.put(
      rows
        .filter((row) => found.has(key(row)))
        .map((row) => ({
          ...row,
          state: 'replayed' as const,
          target: { ...row.target!, offset: found.get(key(row))! },
          at: now,
        })),
    );
    await this.ledger.delete(
      this.config.name,
      this.queue,
      rows.filter((row) => !found.has(key(row))),
    );
  }

  /**
   * Looks for the copies of `rows` in their target partitions, from each row's `from` to the
   * end now; adds what it finds to `found` (row key → the copy's offset), and to `expired`
   * the rows whose partition's retention removed records above their `from`.
   */
  private async findCopies(
    rows: DeadLetterLedgerEntry[],
    found: Map<string, string>,
    expired: DeadLetterLedgerEntry[],
  ): Promise<void> {
    const byTopic = new Map<string, DeadLetterLedgerEntry[]>();
    for (const row of rows) {
      if (!row.target) continue;
      byTopic.set(row.target.topic, [...(byTopic.get(row.target.topic) ?? []), row]);
    }
    for (const [topic, topicRows] of byTopic) {
      // A source topic deleted since: no copy to find there (the re-send is refused later).
      if (!(await this.admin.topicExists(topic))) continue;
      const offsets = new Map(
        (await this.admin.partitionOffsets(topic)).map((o) => [o.partition, o] as const),
      );
      const starts = new Map<number, bigint>();
      const ends = new Map<number, bigint>();
      const wanted = new Map<string, DeadLetterLedgerEntry>();
      for (const row of topicRows) {
        const target = row.target!;
        const from = BigInt(target.from);
        const partition = offsets.get(target.partition);
        if (!partition) continue; // the partition is gone: nothing to find, re-send
        // Retention removed records above `from`: a copy may have been among them.
        if (partition.low > from) expired.push(row);
        // What is left of [from, end): a scan asked to begin below the log start would wait
        // for records that no longer exist until it timed out.
        const begin = partition.low > from ? partition.low : from;
        if (partition.high <= begin) continue;
        starts.set(target.partition, min(starts.get(target.partition), begin));
        ends.set(target.partition, partition.high);
        wanted.set(replayMark(this.queue, row.partition, row.offset, row.fingerprint), row);
      }
      let missing = wanted.size;
      await this.scan(topic, ends, starts, (record) => {
        const mark = headersToAttributes(record.headers)[DEAD_LETTER_HEADERS.replayOf];
        const row = mark === undefined ? undefined : wanted.get(mark);
        if (row && !found.has(key(row)) && BigInt(record.offset) >= BigInt(row.target!.from)) {
          found.set(key(row), record.offset);
          missing -= 1;
        }
        // Every copy found: the rest of a busy topic need not be read (the scan is bounded
        // in time, and the copies lie just above `from`).
        return missing === 0;
      });
    }
  }

  /** Reads `topic` from `starts` (else the log start) to `ends`, in a throwaway group; a visit returning `true` ends it. */
  private async scan(
    topic: string,
    ends: Map<number, bigint>,
    starts: Map<number, bigint> | undefined,
    visit: (record: KafkaRecord, partition: number) => unknown,
  ): Promise<void> {
    if (ends.size === 0) return;
    const groupId = `${this.resolved.groupId}-dlq-${randomUUID()}`;
    this.scanGroups.push(groupId);
    await this.driver.scanTopic({
      topic,
      groupId,
      ends,
      ...(starts ? { starts } : {}),
      timeoutMs: SCAN_TIMEOUT_MS,
      visit: (record, partition) => visit(record, partition) === true,
    });
  }

  /** The record as this consumer's dead letter, or undefined (another consumer's, or not Oncely's). */
  private toLetter(record: KafkaRecord, partition: number): KafkaHeld | undefined {
    const headers = headersToAttributes(record.headers);
    if (headers[DEAD_LETTER_HEADERS.consumer] !== this.config.name) return undefined;
    const topic = headers[DEAD_LETTER_HEADERS.topic];
    const originPartition = Number(headers[DEAD_LETTER_HEADERS.partition]);
    const originOffset = headers[DEAD_LETTER_HEADERS.offset];
    if (topic === undefined || !Number.isInteger(originPartition) || originOffset === undefined)
      return undefined;
    const at = headers[DEAD_LETTER_HEADERS.timestamp];
    const attributes = Object.fromEntries(Object.entries(headers).filter(([name]) => !STRIPPED.has(name)));
    const attempts = Number(headers[DEAD_LETTER_HEADERS.attempts]);
    const lastFailedAt = at === undefined ? undefined : new Date(at);
    const fingerprint = deadLetterFingerprint(headers);
    return {
      envelope: {
        body: record.value,
        attributes,
        // As the consumer saw it: the 'broker' ID strategy and offsets mode name it so.
        brokerMessageId: `${topic}/${originPartition}/${originOffset}`,
      },
      reason: headers[DEAD_LETTER_HEADERS.reason] ?? 'unknown',
      ...(headers[DEAD_LETTER_HEADERS.detail] === undefined
        ? {}
        : { error: headers[DEAD_LETTER_HEADERS.detail] }),
      ...(Number.isInteger(attempts) && attempts > 0 ? { attempts } : {}),
      ...(lastFailedAt && !Number.isNaN(lastFailedAt.getTime()) ? { lastFailedAt } : {}),
      partition,
      offset: record.offset,
      fingerprint,
      record,
      origin: { topic, partition: originPartition, offset: originOffset },
      valueDropped: headers[DEAD_LETTER_HEADERS.valueDropped] !== undefined,
      twins: [],
    };
  }

  private entry(letter: KafkaHeld, state: DeadLetterLedgerEntry['state']): DeadLetterLedgerEntry {
    const messageId = safeId(this.defaultIdStrategyFor(), letter);
    return {
      consumer: this.config.name,
      queue: this.queue,
      partition: letter.partition,
      offset: letter.offset,
      fingerprint: letter.fingerprint,
      state,
      ...(messageId === undefined ? {} : { messageId }),
      at: new Date(),
    };
  }

  private defaultIdStrategyFor(): IdStrategy {
    return this.config.idStrategy ?? this.defaultIdStrategy;
  }

  private assertLocked(): void {
    if (this.lock.lost) {
      throw new KafkaDeadLetterError(
        `the dead-letter pass on '${this.queue}' lost its lock (its database connection died): it writes nothing more; run it again`,
      );
    }
  }

  private async connectedProducer(): Promise<RecordProducer> {
    if (this.producer) return this.producer;
    this.connecting ??= (async () => {
      const producer = this.driver.producer();
      await producer.connect();
      this.producer = producer;
      return producer;
    })();
    return this.connecting;
  }
}

/**
 * What ties a ledger row to its record: a hash of the record's own evidence (where it came
 * from, when and why it was dead-lettered), so that a recreated topic's record at the same
 * offset is not taken for it.
 */
export function deadLetterFingerprint(headers: Record<string, string>): string {
  const origin = `${headers[DEAD_LETTER_HEADERS.topic]}/${headers[DEAD_LETTER_HEADERS.partition]}/${headers[DEAD_LETTER_HEADERS.offset]}`;
  return createHash('sha256')
    .update(
      `${origin}\x1f${headers[DEAD_LETTER_HEADERS.timestamp] ?? ''}\x1f${headers[DEAD_LETTER_HEADERS.reason] ?? ''}`,
    )
    .digest('hex');
}

/** `oncely-replay-of` of a copy: the dead letter's position and 8 hex digits of its fingerprint. */
function replayMark(queue: string, partition: number, offset: string, fingerprint: string): string {
  return `${queue}/${partition}/${offset}#${fingerprint.slice(0, 8)}`;
}

/** The message ID the ledger row carries, for people reading it; never a reason to fail. */
function safeId(strategy: IdStrategy, letter: KafkaHeld): string | undefined {
  try {
    return resolveMessageId(strategy, { ...letter.envelope, source: letter.origin.topic, raw: undefined });
  } catch {
    // A strategy that throws on this letter: the row goes without an ID.
    return undefined;
  }
}

/**
 * The original record a dead letter copies, as a map key: its position, and its key, value
 * and message ID, since a source topic deleted and created again puts another record at the
 * same position (two letters then, not twins).
 */
function originKey(letter: KafkaHeld): string {
  const content = createHash('sha256');
  for (const part of [
    letter.record.key,
    letter.record.value,
    letter.envelope.attributes[MESSAGE_ID_HEADER],
  ]) {
    const bytes = part === null || part === undefined ? undefined : Buffer.from(part);
    content.update(bytes === undefined ? '-' : `${bytes.length}:`);
    if (bytes) content.update(bytes);
  }
  return `${letter.origin.topic}/${letter.origin.partition}/${letter.origin.offset}#${content.digest('hex')}`;
}

/** A ledger row's dead-letter position, as a map key. */
function key(row: { partition: number; offset: string }): string {
  return `${row.partition}/${row.offset}`;
}

function compareOffsets(a: string, b: string): number {
  const x = BigInt(a);
  const y = BigInt(b);
  return x < y ? -1 : x > y ? 1 : 0;
}

function min(a: bigint | undefined, b: bigint): bigint {
  return a === undefined || b < a ? b : a;
}
