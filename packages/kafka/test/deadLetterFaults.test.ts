/**
 * `openDeadLetters` under faults a real broker will not produce on demand: a copy the
 * broker appended but had not made visible yet (high watermark behind, a request still in
 * flight), a pass whose lock was lost while its send was pending, and a message
 * dead-lettered twice. The cluster is an in-memory fake behind the driver interface; the
 * ledger an in-memory one with the store's semantics. What counts is what lands in the
 * source topic.
 */
import {
  type ConsumerConfig,
  type DeadLetterLedger,
  type DeadLetterLedgerEntry,
  DeadLetters,
  type IdempotencyStore,
} from '@oncely/core';
import type { KafkaMessage } from 'kafkajs';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { KafkaClientDriver, OutgoingRecord, TopicScan } from '../src/adapter/clientApi.js';

type FakeRecord = KafkaMessage;

/** Topics of partitions; a partition's records at or above `hw` are not visible yet. */
class FakeCluster {
  readonly topics = new Map<string, Array<{ records: FakeRecord[]; hw: number }>>();
  /** Replaces how a send lands (default: appended and visible at once). */
  onSend: ((topic: string, records: OutgoingRecord[]) => Promise<void>) | undefined;

  create(topic: string, partitions: number): void {
    this.topics.set(
      topic,
      Array.from({ length: partitions }, () => ({ records: [], hw: 0 })),
    );
  }

  append(topic: string, partition: number, record: OutgoingRecord, visible = true): string {
    const log = this.topics.get(topic)![partition]!;
    const offset = String(log.records.length);
    const headers: Record<string, Buffer> = {};
    for (const [name, value] of Object.entries(record.headers ?? {})) {
      headers[name] = Buffer.isBuffer(value) ? value : Buffer.from(String(value));
    }
    log.records.push({
      key: record.key == null ? null : Buffer.from(record.key as string | Buffer),
      value: record.value == null ? null : Buffer.from(record.value as string | Buffer),
      headers,
      offset,
      timestamp: String(Date.now()),
      attributes: 0,
    } as FakeRecord);
    if (visible) log.hw = log.records.length;
    return offset;
  }

  /** What the source topic holds (visible or not). */
  all(topic: string): FakeRecord[] {
    return this.topics.get(topic)!.flatMap((log) => log.records);
  }

  driver(): KafkaClientDriver {
    return {
      name: 'fake',
      consumer: () => {
        throw new Error('not used');
      },
      producer: () => ({
        connect: async () => {},
        disconnect: async () => {},
        send: async (topic: string, records: OutgoingRecord[]) => {
          if (this.onSend) await this.onSend(topic, records);
          else for (const record of records) this.append(topic, record.partition ?? 0, record);
          return [];
        },
      }),
      admin: () =>
        ({
          connect: async () => {},
          disconnect: async () => {},
          topicExists: async (topic: string) => this.topics.has(topic),
          partitionOffsets: async (topic: string) =>
            this.topics.get(topic)!.map((log, partition) => ({ partition, low: 0n, high: BigInt(log.hw) })),
          deleteGroup: async () => {},
        }) as unknown as ReturnType<KafkaClientDriver['admin']>,
      scanTopic: async (scan: TopicScan) => {
        const logs = this.topics.get(scan.topic)!;
        for (const [partition, end] of scan.ends) {
          const log = logs[partition]!;
          const from = Number(scan.starts?.get(partition) ?? 0n);
          for (let at = from; at < Math.min(Number(end), log.hw); at++) {
            if (scan.visit(log.records[at]!, partition)) return;
          }
        }
      },
    };
  }
}

const cluster = { current: new FakeCluster() };
vi.mock('../src/adapter/loadDriver.js', () => ({
  toolDriver: async () => cluster.current.driver(),
  loadDriver: async () => cluster.current.driver(),
}));

const { openDeadLetters } = await import('../src/deadLetters.js');
const { DEAD_LETTER_HEADERS } = await import('../src/deadLetter.js');

/** The store's ledger in memory; `lock.lost` settable, a lost lock free for the next pass. */
class FakeLedger implements DeadLetterLedger {
  readonly rows = new Map<string, DeadLetterLedgerEntry>();
  held: { lost: boolean; release(): Promise<void> } | undefined;
  /** Applied to each row put (e.g. to age an intent). */
  shape: ((entry: DeadLetterLedgerEntry) => DeadLetterLedgerEntry) | undefined;

  async tryLock() {
    if (this.held && !this.held.lost) return undefined;
    const lock = {
      lost: false,
      release: async () => {
        if (this.held === lock) this.held = undefined;
      },
    };
    this.held = lock;
    return lock;
  }
  async entries() {
    return [...this.rows.values()].map((row) => ({ ...row }));
  }
  async put(entries: readonly DeadLetterLedgerEntry[]) {
    for (const entry of entries) {
      const row = this.shape ? this.shape({ ...entry }) : { ...entry };
      this.rows.set(`${entry.partition}/${entry.offset}`, row);
    }
  }
  async delete(_c: string, _q: string, keys: ReadonlyArray<{ partition: number; offset: string }>) {
    for (const { partition, offset } of keys) this.rows.delete(`${partition}/${offset}`);
  }
  async prune() {
    return 0;
  }
}

function configOf(ledger: FakeLedger, mode: 'transactional' | 'offsets'): ConsumerConfig<any, any> {
  const store = {
    deadLetterLog: {
      ledger,
      processed: async () => new Set<string>(),
      recordDiscards: async () => {},
      discards: async () => [],
    },
  } as unknown as IdempotencyStore<unknown>;
  return {
    name: 'payments',
    broker: { type: 'kafka', brokers: ['fake:9092'], topic: 'src' },
    store,
    mode,
    handler: async () => {},
  } as unknown as ConsumerConfig<any, any>;
}

/**
 * A dead letter of src/<partition>/<origin> (partition 0 unless named) in dlq partition
 * `dlqPartition` (0), as the adapter writes it; `options` change what the case is about.
 */
function deadLetter(
  fake: FakeCluster,
  origin: string,
  id: string | undefined,
  at: Date,
  options: {
    key?: string | null;
    value?: string | null;
    topic?: string;
    partition?: number;
    dlqPartition?: number;
    headers?: Record<string, string>;
  } = {},
): string {
  return fake.append('src.dlq', options.dlqPartition ?? 0, {
    key: options.key === undefined ? `k-${origin}` : options.key,
    value: options.value === undefined ? JSON.stringify({ origin }) : options.value,
    headers: {
      ...(id === undefined ? {} : { 'message-id': id }),
      [DEAD_LETTER_HEADERS.reason]: 'handler-error',
      [DEAD_LETTER_HEADERS.detail]: 'boom',
      [DEAD_LETTER_HEADERS.consumer]: 'payments',
      [DEAD_LETTER_HEADERS.topic]: options.topic ?? 'src',
      [DEAD_LETTER_HEADERS.partition]: String(options.partition ?? 0),
      [DEAD_LETTER_HEADERS.offset]: origin,
      [DEAD_LETTER_HEADERS.timestamp]: at.toISOString(),
      ...options.headers,
    },
  });
}

function open(ledger: FakeLedger, mode: 'transactional' | 'offsets') {
  return DeadLetters.open(configOf(ledger, mode), { openDeadLetters } as never);
}

describe('Kafka dead letters under faults (fake cluster, in-memory ledger)', () => {
  afterEach(() => {
    cluster.current = new FakeCluster();
  });

  it('a copy not visible yet when the next pass recovers is found, not sent twice (transactional mode too)', async () => {
    const fake = new FakeCluster();
    cluster.current = fake;
    fake.create('src', 1);
    fake.create('src.dlq', 1);
    deadLetter(fake, '7', 'm-7', new Date(Date.now() - 60_000));
    const ledger = new FakeLedger();
    // Pass A died after its send reached the leader but before the high watermark moved:
    // the copy is appended, not visible yet; it becomes visible 1 s later.
    fake.onSend = async (topic, records) => {
      for (const record of records) fake.append(topic, record.partition ?? 0, record, false);
      setTimeout(() => {
        const log = fake.topics.get('src')![0]!;
        log.hw = log.records.length;
      }, 1_000);
    };
    ledger.shape = (entry) =>
      entry.state === 'replaying' ? { ...entry, at: new Date(Date.now() - 28_000) } : entry;
    const a = await open(ledger, 'transactional');
    await expect(a.replay({ all: true })).resolves.toBeDefined();
    // The first pass saw its copy acknowledged: settle to the state a kill right after
    // the ack leaves (the intent only).
    for (const row of ledger.rows.values()) {
      row.state = 'replaying';
      row.at = new Date(Date.now() - 28_000);
      delete row.target!.offset;
    }
    ledger.shape = undefined;
    fake.onSend = undefined;
    const b = await open(ledger, 'transactional');
    await b.replay({ all: true });
    expect(fake.all('src').map((r) => r.headers?.['message-id']?.toString())).toEqual(['m-7']);
    expect([...ledger.rows.values()].map((row) => row.state)).toEqual(['replayed']);
  });

  it('a pass that lost its lock while its send was pending: the next pass does not send again', async () => {
    const fake = new FakeCluster();
    cluster.current = fake;
    fake.create('src', 1);
    fake.create('src.dlq', 1);
    deadLetter(fake, '3', 'm-3', new Date(Date.now() - 60_000));
    const ledger = new FakeLedger();
    // The intent was written 28 s ago (a slow broker), the send still pending.
    ledger.shape = (entry) =>
      entry.state === 'replaying' ? { ...entry, at: new Date(Date.now() - 28_000) } : entry;
    let landed!: () => void;
    const pending = new Promise<void>((resolve) => {
      landed = resolve;
    });
    fake.onSend = async (topic, records) => {
      await pending;
      for (const record of records) fake.append(topic, record.partition ?? 0, record);
    };
    const a = await open(ledger, 'transactional');
    const first = a.replay({ all: true }).catch((error: unknown) => error);
    await vi.waitFor(() => expect([...ledger.rows.values()].map((r) => r.state)).toEqual(['replaying']));
    // A's lock connection dies; B takes the lock at once, while A's produce is in flight.
    ledger.held!.lost = true;
    ledger.shape = undefined;
    const onSendOfA = fake.onSend;
    fake.onSend = undefined;
    const second = (async () => {
      const b = await open(ledger, 'transactional');
      return b.replay({ all: true });
    })();
    // A's copy lands 1 s later.
    setTimeout(landed, 1_000);
    await second;
    await first;
    expect(onSendOfA).toBeDefined();
    expect(fake.all('src')).toHaveLength(1);
  });
});

describe('a message dead-lettered twice (killed between the dead letter and the commit)', () => {
  afterEach(() => {
    cluster.current = new FakeCluster();
  });

  function twice(mode: 'transactional' | 'offsets') {
    const fake = new FakeCluster();
    cluster.current = fake;
    fake.create('src', 1);
    fake.create('src.dlq', 1);
    // src/0/5 dead-lettered, the offset commit lost, redelivered, dead-lettered again.
    deadLetter(fake, '5', undefined, new Date(Date.now() - 60_000));
    deadLetter(fake, '5', undefined, new Date(Date.now() - 50_000));
    deadLetter(fake, '6', undefined, new Date(Date.now() - 40_000));
    return { fake, ledger: new FakeLedger(), mode };
  }

  it('offsets mode: listed once, replayed as one copy, both letters settled', async () => {
    const { fake, ledger, mode } = twice('offsets');
    const listed = await (await open(ledger, mode)).list();
    expect(listed.letters.map((l) => l.messageId)).toEqual(['src/0/5', 'src/0/6']);
    await (await open(ledger, mode)).replay({ all: true });
    const copies = fake.all('src').map((r) => r.headers?.['message-id']?.toString());
    expect(copies).toEqual(['src/0/5', 'src/0/6']);
    expect((await (await open(ledger, mode)).list()).letters).toEqual([]);
    expect([...ledger.rows.values()].map((row) => row.state)).toEqual(['replayed', 'replayed', 'replayed']);
  });

  it('killed after the copy was sent, before the twin was recorded: the twin is not sent again', async () => {
    const { fake, ledger, mode } = twice('offsets');
    // The first letter alone was replayed by an older pass (its twin had no row then).
    await (await open(ledger, mode)).replay({ all: true });
    for (const [at, row] of ledger.rows) if (row.offset === '1') ledger.rows.delete(at);
    await (await open(ledger, mode)).replay({ all: true });
    expect(fake.all('src').map((r) => r.headers?.['message-id']?.toString())).toEqual(['src/0/5', 'src/0/6']);
    expect((await (await open(ledger, mode)).list()).letters).toEqual([]);
  });

  it('two records at the same position of a recreated source topic are two letters, both sent', async () => {
    const fake = new FakeCluster();
    cluster.current = fake;
    fake.create('src', 1);
    fake.create('src.dlq', 1);
    deadLetter(fake, '5', 'm-old', new Date(Date.now() - 60_000));
    // 'src' deleted and created again: its new src/0/5 is another record, dead-lettered too.
    const at = deadLetter(fake, '5', 'm-new', new Date(Date.now() - 30_000), {
      key: 'k-new',
      value: JSON.stringify({ origin: 'new' }),
    });
    expect(at).toBe('1');
    const ledger = new FakeLedger();
    expect((await (await open(ledger, 'transactional')).list()).letters.map((l) => l.messageId)).toEqual([
      'm-old',
      'm-new',
    ]);
    await (await open(ledger, 'transactional')).replay({ ids: ['m-old'] });
    await (await open(ledger, 'transactional')).replay({ all: true });
    expect(fake.all('src').map((r) => r.headers?.['message-id']?.toString())).toEqual(['m-old', 'm-new']);
  });

  it('discard settles both', async () => {
    const { ledger, mode } = twice('offsets');
    await (await open(ledger, mode)).discard({ all: true }, { by: 'test' });
    expect([...ledger.rows.values()].map((row) => row.state)).toEqual([
      'discarded',
      'discarded',
      'discarded',
    ]);
    expect((await (await open(ledger, mode)).list()).letters).toEqual([]);
  });
});

describe('a dead letter of another topic in the dead-letter topic', () => {
  it('is listed but not re-sent into this consumer topic (a shared or reconfigured dead-letter topic)', async () => {
    const fake = new FakeCluster();
    cluster.current = fake;
    fake.create('src', 2);
    fake.create('src.dlq', 1);
    // Written by this consumer name when it read 'orders-old' (same dead-letter topic).
    deadLetter(fake, '9', 'm-old', new Date(), { key: 'k', value: 'v', topic: 'orders-old', partition: 1 });
    const ledger = new FakeLedger();
    const listed = await (await open(ledger, 'transactional')).list();
    expect(listed.letters.map((l) => l.messageId)).toEqual(['m-old']);
    const error = await (await open(ledger, 'transactional')).replay({ all: true }).catch((e: unknown) => e);
    expect(String(error)).toMatch(/orders-old/);
    expect(fake.all('src')).toEqual([]);
    expect([...ledger.rows.values()]).toEqual([]);
  });
});

describe('a pass killed during recovery', () => {
  it('the next pass finishes it: one copy of each letter, none lost', async () => {
    const fake = new FakeCluster();
    cluster.current = fake;
    fake.create('src', 1);
    fake.create('src.dlq', 1);
    deadLetter(fake, '1', 'm-1', new Date(Date.now() - 60_000));
    deadLetter(fake, '2', 'm-2', new Date(Date.now() - 50_000));
    const ledger = new FakeLedger();
    // Pass A: the produce wrote the first copy, then failed (a partial batch).
    fake.onSend = async (topic, records) => {
      fake.append(topic, records[0]!.partition ?? 0, records[0]!);
      throw new Error('NOT_LEADER_OR_FOLLOWER for the rest');
    };
    ledger.shape = (entry) =>
      entry.state === 'replaying' ? { ...entry, at: new Date(Date.now() - 60_000) } : entry;
    await expect((await open(ledger, 'transactional')).replay({ all: true })).rejects.toThrow(/in doubt/);
    ledger.shape = undefined;
    fake.onSend = undefined;
    // Pass B dies in its recovery, after recording the copy found, before deleting the other row.
    const del = ledger.delete.bind(ledger);
    ledger.delete = async () => {
      throw new Error('killed');
    };
    await expect((await open(ledger, 'transactional')).list()).rejects.toThrow(/killed/);
    expect([...ledger.rows.values()].map((r) => r.state).sort()).toEqual(['replayed', 'replaying']);
    ledger.delete = del;
    // Pass C.
    await (await open(ledger, 'transactional')).replay({ all: true });
    expect(fake.all('src').map((r) => r.headers?.['message-id']?.toString())).toEqual(['m-1', 'm-2']);
    expect([...ledger.rows.values()].map((r) => r.state)).toEqual(['replayed', 'replayed']);
  });
});

describe('a discard killed as the pass closes', () => {
  it('leaves the letters listed with their discard record; a second discard settles them', async () => {
    const fake = new FakeCluster();
    cluster.current = fake;
    fake.create('src', 1);
    fake.create('src.dlq', 1);
    deadLetter(fake, '1', 'm-1', new Date(Date.now() - 60_000));
    const ledger = new FakeLedger();
    const config = configOf(ledger, 'transactional');
    const recorded: string[] = [];
    (config.store as any).deadLetterLog.recordDiscards = async (records: Array<{ messageId?: string }>) => {
      for (const record of records) recorded.push(record.messageId ?? '?');
    };
    const put = ledger.put.bind(ledger);
    ledger.put = async () => {
      throw new Error('killed');
    };
    const dlq = await DeadLetters.open(config, { openDeadLetters } as never);
    await expect(dlq.discard({ all: true }, { by: 'ops' })).rejects.toThrow(/killed/);
    expect(recorded).toEqual(['m-1']);
    ledger.put = put;
    expect((await dlq.list()).letters.map((l) => l.messageId)).toEqual(['m-1']);
    await dlq.discard({ all: true }, { by: 'ops' });
    expect(recorded).toEqual(['m-1', 'm-1']);
    expect((await dlq.list()).letters).toEqual([]);
    expect(fake.all('src')).toEqual([]);
  });
});

describe('recovery on a busy source topic', () => {
  it('stops reading the source once every copy it looks for is found', async () => {
    const fake = new FakeCluster();
    cluster.current = fake;
    fake.create('src', 1);
    fake.create('src.dlq', 1);
    deadLetter(fake, '1', 'm-1', new Date(Date.now() - 60_000));
    const ledger = new FakeLedger();
    ledger.shape = (entry) =>
      entry.state === 'replaying' ? { ...entry, at: new Date(Date.now() - 60_000) } : entry;
    // Pass A: killed after the send, before 'replayed'.
    const put = ledger.put.bind(ledger);
    ledger.put = async (entries) => {
      if (entries[0]?.state === 'replayed') throw new Error('killed');
      return put(entries);
    };
    await expect((await open(ledger, 'transactional')).replay({ all: true })).rejects.toThrow(
      /could not record/,
    );
    ledger.put = put;
    ledger.shape = undefined;
    // Meanwhile the producers of the topic wrote a lot after the copy.
    for (let i = 0; i < 5_000; i++) fake.append('src', 0, { key: `k${i}`, value: 'x' });
    // The scan's time bound, as records read: a scan reading them all runs out of time.
    const driver = fake.driver.bind(fake);
    fake.driver = () => {
      const d = driver();
      const scanTopic = d.scanTopic;
      return {
        ...d,
        scanTopic: async (scan: TopicScan) => {
          let read = 0;
          return scanTopic({
            ...scan,
            visit: (record, partition) => {
              if (scan.topic === 'src' && ++read > 1_000)
                throw new Error(`scan of '${scan.topic}' timed out`);
              return scan.visit(record, partition);
            },
          });
        },
      };
    };
    await (await open(ledger, 'transactional')).replay({ all: true });
    expect(fake.all('src').filter((r) => r.headers?.['message-id'])).toHaveLength(1);
    expect([...ledger.rows.values()].map((r) => r.state)).toEqual(['replayed']);
  });
});

describe('odd letters', () => {
  it('a null key and a null value (a tombstone) go back as they were, to their partition', async () => {
    const fake = new FakeCluster();
    cluster.current = fake;
    fake.create('src', 3);
    fake.create('src.dlq', 3);
    deadLetter(fake, '4', 'm-null', new Date(), { key: null, value: null, partition: 2, dlqPartition: 2 });
    const ledger = new FakeLedger();
    const report = await (await open(ledger, 'transactional')).replay({ all: true });
    expect(report.replayed).toEqual(['m-null']);
    const copy = fake.topics.get('src')![2]!.records;
    expect(copy).toHaveLength(1);
    expect(copy[0]!.key).toBeNull();
    expect(copy[0]!.value).toBeNull();
    expect(Object.keys(copy[0]!.headers ?? {}).sort()).toEqual(['message-id', 'oncely-replay-of']);
  });

  it('a letter written without its value is refused, names the original, and stays listed', async () => {
    const fake = new FakeCluster();
    cluster.current = fake;
    fake.create('src', 1);
    fake.create('src.dlq', 1);
    deadLetter(fake, '12', 'm-big', new Date(), {
      key: 'k',
      value: null,
      headers: { [DEAD_LETTER_HEADERS.valueDropped]: '1' },
    });
    const ledger = new FakeLedger();
    const error = await (await open(ledger, 'transactional')).replay({ all: true }).catch((e: unknown) => e);
    expect(String(error)).toMatch(/without its value.*src\/0\/12/);
    expect(fake.all('src')).toEqual([]);
    expect(ledger.rows.size).toBe(0);
    expect((await (await open(ledger, 'transactional')).list()).letters.map((l) => l.messageId)).toEqual([
      'm-big',
    ]);
  });
});
