import type { PubSub } from '@google-cloud/pubsub';
import { status } from '@grpc/grpc-js';
import type { PubSubEmulator, SettlementFailure } from '@oncely/emulators/pubsub';
import { publishWithId } from '@oncely/pubsub';
import { waitFor } from '@oncely/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adapterFixture } from './fixture.js';
import { adminClient, postgresAvailable, startEmulator } from './support.js';

// Every kind of failure of the ack that follows a commit, with exactly-once on and off:
// the effect stays single (counted from the rows), the message is never lost (it is
// acked in the end, by this delivery or by the duplicate its redelivery becomes), a
// transient failure is retried and never reported (no ackFailed, no leaseLost), and any
// other is reported once as ackFailed, never as a second effect.

const hasPostgres = await postgresAvailable();
let emulator: PubSubEmulator;
let pubsub: PubSub;

beforeAll(async () => {
  emulator = await startEmulator();
  pubsub = adminClient(emulator);
});
afterAll(async () => {
  await pubsub.close();
  await emulator.stop();
});

interface Case {
  name: string;
  failure: Omit<SettlementFailure, 'rpc' | 'subscription'>;
  transient: boolean;
  exactlyOnce: boolean;
}

const wholeRequest = (code: status, transient: boolean, exactlyOnce: boolean): Case => ({
  name: `${status[code]}${exactlyOnce ? ' (exactly-once)' : ''}`,
  failure: { count: transient ? 2 : 1, code },
  transient,
  exactlyOnce,
});

const CASES: Case[] = [
  ...[false, true].flatMap((eod) => [
    wholeRequest(status.UNAVAILABLE, true, eod),
    wholeRequest(status.DEADLINE_EXCEEDED, true, eod),
    wholeRequest(status.RESOURCE_EXHAUSTED, true, eod),
    wholeRequest(status.ABORTED, true, eod),
    wholeRequest(status.INTERNAL, true, eod),
    wholeRequest(status.FAILED_PRECONDITION, false, eod),
    wholeRequest(status.PERMISSION_DENIED, false, eod),
    wholeRequest(status.INVALID_ARGUMENT, false, eod),
    wholeRequest(status.NOT_FOUND, false, eod),
    wholeRequest(status.UNAUTHENTICATED, false, eod),
    wholeRequest(status.CANCELLED, false, eod),
  ]),
  {
    name: 'TRANSIENT_FAILURE_UNORDERED_ACK_ID (exactly-once)',
    failure: { count: 2, ackIdReason: 'TRANSIENT_FAILURE_UNORDERED_ACK_ID' },
    transient: true,
    exactlyOnce: true,
  },
  {
    name: 'PERMANENT_FAILURE_INVALID_ACK_ID (exactly-once)',
    failure: { count: 1, ackIdReason: 'PERMANENT_FAILURE_INVALID_ACK_ID' },
    transient: false,
    exactlyOnce: true,
  },
  {
    name: 'PERMANENT_FAILURE_OTHER (exactly-once)',
    failure: { count: 1, ackIdReason: 'PERMANENT_FAILURE_OTHER' },
    transient: false,
    exactlyOnce: true,
  },
];

describe.skipIf(!hasPostgres).concurrent('the ack after a commit fails', () => {
  for (const { name, failure, transient, exactlyOnce } of CASES) {
    it(`${name}: one effect, acked in the end, ${transient ? 'retried without a report' : 'reported once'}`, async () => {
      const fixture = await adapterFixture(pubsub, emulator, 'ack-fault', {
        enableExactlyOnceDelivery: exactlyOnce,
      });
      const { schema } = fixture;
      const { consumer, events } = fixture.consumer({
        handler: async (message, ctx) => {
          await ctx.tx.query(`INSERT INTO "${schema}".effects (id) VALUES ($1)`, [message.id]);
        },
      });
      const fault = emulator.failSettlements({
        rpc: 'Acknowledge',
        subscription: fixture.subscriptionName,
        ...failure,
      });
      const view = () => emulator.inspectSubscription(fixture.subscriptionName)!;
      try {
        await consumer.start();
        await publishWithId(fixture.topic, { id: 'm1', body: {} });
        await waitFor(() => fault.failed === failure.count, {
          timeoutMs: 30_000,
          description: 'the ack failed',
        });
        await waitFor(() => view().ready + view().outstanding === 0, {
          timeoutMs: 60_000,
          description: 'm1 acked in the end',
        });
        const rows = await fixture.store.transaction((tx) =>
          tx.query<{ n: string }>(`SELECT count(*) AS n FROM "${schema}".effects`),
        );
        expect(Number(rows.rows[0]!.n)).toBe(1);
        expect(events.count('processed', 'm1')).toBe(1);
        if (transient) {
          expect(events.count('ackFailed')).toBe(0);
          expect(events.count('leaseLost')).toBe(0);
          expect(events.count('received', 'm1')).toBe(1);
        } else {
          expect(events.count('ackFailed')).toBe(1);
          // Redelivered after the lease and skipped as the duplicate it is.
          expect(events.count('duplicate', 'm1')).toBe(1);
        }
      } finally {
        fault.clear();
        await fixture.drop();
      }
    }, 90_000);
  }
});
