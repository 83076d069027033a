/**
 * Azure Service Bus on the @oncely/emulators emulator, started in the runner's process
 * (which outlives every consumer); the consumers are child processes that reach it over
 * TCP with the real @azure/service-bus client. A connection drop destroys every client
 * connection (the emulator's `disconnect()`); a restart stops listening for a while and
 * listens again on the same port with every message, lock and session kept, as a durable
 * namespace does (`restart()`).
 *
 * IDs: the adapter's default strategy ('producer') reads the MessageId. Service Bus gives
 * a message sent without a MessageId one of its own, so the poison messages "without an
 * ID" are sent with an empty MessageId, which the consumer cannot use as an ID
 * (dead-lettered as `missing-id`).
 *
 * With ONCELY_CHAOS_SERVICEBUS_SESSIONS=1 (issue #34) the queue requires sessions (each
 * order in one of 64 sessions by its ID), the consumers receive through sessions with
 * `retryStrategy: 'schedule'` and `idStrategy: 'broker'` (the sequence number), and 5 %
 * of first attempts fail on purpose, so delayed retries (held in their session, outside
 * any handler slot) run all along. The sequence number sees no producer retry: run it
 * without producer duplicates and without poison messages lacking an ID.
 */
import { ServiceBusClient } from '@azure/service-bus';
import { startServiceBusEmulator } from '@oncely/emulators/servicebus';

const ID_PROPERTY = 'message-id';

/**
 * @param {{ runId: string, restartDownMs?: number }} input
 * @returns {Promise<import('./types.mjs').Backend>}
 */
export async function servicebusBackend({ runId, restartDownMs = 3000 }) {
  const leaseMs = 2000;
  const sessions = process.env.ONCELY_CHAOS_SERVICEBUS_SESSIONS === '1';
  const emulator = await startServiceBusEmulator({ port: 0 });
  const queue = `oncely-chaos-${runId}`;
  emulator.createQueue(queue, {
    LockDuration: leaseMs,
    RequiresSession: sessions,
    // Far above the consumer's maxAttempts: the consumer, which knows why, dead-letters first.
    MaxDeliveryCount: 1000,
  });
  /**
   * Sends `messages` from index `from` in batches and returns how far it got. A client
   * of its own per call, closed at once: a client still connected when the broker
   * restarts re-attaches its links in the background, and one closed while that runs can
   * leave the SDK's timers keeping the runner alive.
   * @param {Array<{ id?: string, body: unknown, rawBody?: string }>} messages
   * @param {number} from
   */
  async function publishFrom(messages, from) {
    const client = new ServiceBusClient(emulator.connectionString);
    let confirmed = from;
    try {
      const sender = client.createSender(queue);
      let batch = await sender.createMessageBatch();
      let batchEnd = from;
      for (let i = from; i < messages.length; i++) {
        const message = messages[i];
        const outgoing = {
          body: Buffer.from(message.rawBody ?? JSON.stringify(message.body)),
          messageId: message.id ?? '',
          applicationProperties: message.id === undefined ? {} : { [ID_PROPERTY]: message.id },
          ...(sessions ? { sessionId: sessionOf(message.id ?? 'no-id') } : {}),
        };
        if (!batch.tryAddMessage(outgoing)) {
          await sender.sendMessages(batch);
          confirmed = batchEnd;
          batch = await sender.createMessageBatch();
          batch.tryAddMessage(outgoing);
        }
        batchEnd = i + 1;
      }
      if (batch.count > 0) await sender.sendMessages(batch);
      confirmed = batchEnd;
      return confirmed;
    } catch (error) {
      if (confirmed > from) return confirmed;
      throw error;
    } finally {
      await client.close().catch(() => {});
    }
  }

  return {
    name: 'servicebus',
    crossProcess: true,
    leaseMs,
    stallMs: Math.round(leaseMs * 1.5),
    leaseLossSlot: true,
    ...(sessions ? { idStrategy: 'broker', failFirstRate: 0.05 } : {}),
    notes: {
      ...(sessions
        ? {
            sessions:
              "64 sessions, retryStrategy 'schedule', idStrategy 'broker', 5 % of first attempts fail",
          }
        : {}),
      consumers: 'child processes; the Service Bus emulator runs in the runner',
      brokerDrop: 'every client connection to the emulator destroyed (server side)',
      brokerRestart: `emulator not listening for ${restartDownMs} ms; state kept, as a durable namespace keeps it`,
    },
    async consumerBroker() {
      return {
        type: 'servicebus',
        connectionString: emulator.connectionString,
        queueName: queue,
        maxWaitTimeMs: 500,
        maxDeliveryCount: 1000,
        ...(sessions ? { sessions: true, retryStrategy: 'schedule' } : {}),
        // A send or settle on a connection that died must not wait the SDK's default minute.
        clientOptions: {
          retryOptions: { timeoutInMs: 10_000, maxRetries: 10, retryDelayInMs: 200, maxRetryDelayInMs: 2000 },
        },
      };
    },
    async publish(messages) {
      // A producer that retries, as a real one must: a connection drop or a restart may
      // hit a send. A batch whose send failed has an unknown outcome and is sent again
      // (the duplicates that makes are the consumer's to absorb); confirmed batches are not.
      let sent = 0;
      for (let attempt = 1; sent < messages.length; attempt++) {
        try {
          sent = await publishFrom(messages, sent);
        } catch (error) {
          if (attempt >= 20) throw error;
          await new Promise((resolve) => setTimeout(resolve, 250 * Math.min(attempt, 8)));
        }
      }
    },
    async backlog() {
      return emulator.inspect(queue).total;
    },
    async deadLetters() {
      return emulator.messages(`${queue}/$DeadLetterQueue`).map((message) => {
        const id = message.application_properties?.[ID_PROPERTY];
        return {
          id: typeof id === 'string' ? id : undefined,
          reason: String(message.application_properties?.DeadLetterReason ?? 'servicebus-native'),
        };
      });
    },
    async disconnect() {
      const count = emulator.disconnect();
      return `dropped ${count} connection(s) to the emulator`;
    },
    async restart() {
      await emulator.restart({ downMs: restartDownMs });
      return `emulator not listening for ${restartDownMs} ms`;
    },
    async teardown() {
      await emulator.stop();
    },
  };
}

/** One of 64 sessions, by the order's ID: more than the consumers' workers, so every consumer holds some. */
/** @param {string} id */
function sessionOf(id) {
  let hash = 0;
  for (const char of id) hash = (hash * 31 + char.charCodeAt(0)) >>> 0;
  return `session-${hash % 64}`;
}
