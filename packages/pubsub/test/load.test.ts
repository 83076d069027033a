import type { PubSub } from '@google-cloud/pubsub';
import { status } from '@grpc/grpc-js';
import type { PubSubEmulator } from '@oncely/emulators/pubsub';
import { waitFor } from '@oncely/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adapterFixture } from './fixture.js';
import { adminClient, postgresAvailable, startEmulator } from './support.js';

// Load with ordinary faults, counted from the rows: 5,000 messages at concurrency 32,
// one Acknowledge request in 20 failing transiently (UNAVAILABLE; with exactly-once,
// TRANSIENT_FAILURE_UNORDERED_ACK_ID for each of its ack IDs), the stream dropped by the
// server (UNAVAILABLE, the client reopens it) a third of the way through and ended with a
// status the client does not retry (INVALID_ARGUMENT, the adapter reopens it) two thirds
// of the way. Nothing may be lost, nothing applied twice, and a transient ack failure is
// retried, never reported as a failed settlement or a lost lease.

const MESSAGES = 5_000;
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

describe.skipIf(!hasPostgres)(
  '5,000 messages, concurrency 32, 5 % transient ack failures, stream ends',
  () => {
    for (const { exactlyOnce, batch } of [
      { exactlyOnce: false, batch: false },
      { exactlyOnce: true, batch: false },
      // The batch path: each batch's acks share a request and go while the next one fills.
      { exactlyOnce: false, batch: true },
    ]) {
      const label = `exactly-once ${exactlyOnce ? 'on' : 'off'}${batch ? ', batches of 10' : ''}`;
      it(`lost 0, doubled 0 (${label})`, async () => {
        const fixture = await adapterFixture(
          pubsub,
          emulator,
          exactlyOnce ? 'load-eod' : batch ? 'load-batch' : 'load',
          {
            enableExactlyOnceDelivery: exactlyOnce,
          },
        );
        const { store, schema, subscriptionName } = fixture;
        let applied = 0;
        const { consumer, events, adapter } = fixture.consumer({
          concurrency: 32,
          handler: async (message, ctx) => {
            await ctx.tx.query(`INSERT INTO "${schema}".effects (id) VALUES ($1)`, [message.id]);
            applied++;
          },
        });
        const faults = emulator.failSettlements({
          rpc: 'Acknowledge',
          subscription: subscriptionName,
          count: 1_000_000,
          every: 20,
          ...(exactlyOnce
            ? { ackIdReason: 'TRANSIENT_FAILURE_UNORDERED_ACK_ID' }
            : { code: status.UNAVAILABLE }),
        });
        const rows = async () => {
          const result = await store.transaction((tx) =>
            tx.query<{ total: string; distinct: string }>(
              `SELECT count(*) AS total, count(DISTINCT id) AS distinct FROM "${schema}".effects`,
            ),
          );
          return { total: Number(result.rows[0]!.total), distinct: Number(result.rows[0]!.distinct) };
        };
        try {
          await consumer.start();
          for (let from = 0; from < MESSAGES; from += 500) {
            const publishes = [];
            for (let i = from; i < Math.min(MESSAGES, from + 500); i++) {
              publishes.push(
                fixture.topic.publishMessage({
                  data: Buffer.from(JSON.stringify({ n: i })),
                  attributes: { 'message-id': `order-${i}` },
                }),
              );
            }
            await Promise.all(publishes);
          }
          await waitFor(() => applied >= MESSAGES / 3, {
            timeoutMs: 180_000,
            description: 'a third applied',
          });
          expect(emulator.disconnectStreams(subscriptionName)).toBeGreaterThan(0);
          await waitFor(() => applied >= (2 * MESSAGES) / 3, {
            timeoutMs: 180_000,
            description: 'two thirds applied',
          });
          expect(
            emulator.endStreams(subscriptionName, status.INVALID_ARGUMENT, 'hostile end'),
          ).toBeGreaterThan(0);
          await waitFor(
            () => {
              const view = emulator.inspectSubscription(subscriptionName)!;
              return applied >= MESSAGES && view.ready + view.outstanding === 0;
            },
            { timeoutMs: 300_000, intervalMs: 200, description: 'every message applied and acked' },
          );
          const { total, distinct } = await rows();
          // The figures, for the record (the assertions below are what counts).
          console.info(
            `pubsub load (${label}): ${MESSAGES} published, ${distinct} applied, ` +
              `${total - distinct} doubled, ${faults.failed} ack requests failed, ` +
              `${events.count('duplicate')} duplicates skipped, ${adapter.health.streamEnds} stream ends reopened by the adapter`,
          );
          expect({ lost: MESSAGES - distinct, doubled: total - distinct }).toEqual({ lost: 0, doubled: 0 });
          expect(faults.failed).toBeGreaterThan(MESSAGES / 32 / 20);
          expect(adapter.health.streamEnds).toBeGreaterThanOrEqual(1);
          expect(adapter.health.receiving).toBe(true);
          expect(events.count('ackFailed')).toBe(0);
          expect(events.count('leaseLost')).toBe(0);
          expect(events.count('failed')).toBe(0);
        } finally {
          faults.clear();
          await fixture.drop();
        }
      }, 600_000);
    }
  },
);
