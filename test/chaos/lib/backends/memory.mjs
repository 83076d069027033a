/**
 * The in-process memory broker. It lives in the runner's process, so its consumers are
 * "virtual processes" there too (a kill stops one without settling anything).
 */
import * as memory from '@oncely/memory';

/**
 * @param {{ runId: string }} input
 * @returns {Promise<import('./types.mjs').Backend>}
 */
export async function memoryBackend({ runId }) {
  const leaseMs = 1000;
  const broker = new memory.MemoryBroker();
  const queue = `chaos-${runId}`;
  broker.createQueue(queue, { visibilityTimeoutMs: leaseMs });
  return {
    name: 'memory',
    crossProcess: false,
    adapterModule: memory,
    leaseMs,
    stallMs: Math.round(leaseMs * 1.5),
    leaseLossSlot: true,
    notes: {
      consumers: 'in-process virtual processes (the memory broker cannot outlive a real process)',
      kill: 'virtual: its DB connections are cut, nothing it does reaches the broker again',
      brokerDrop: 'n/a (in-process)',
      brokerRestart: 'n/a (in-process)',
    },
    async consumerBroker() {
      return { type: 'memory', broker, queue, visibilityTimeoutMs: leaseMs, pollWaitMs: 1000 };
    },
    async publish(messages) {
      for (const message of messages) {
        await broker.send(queue, {
          ...(message.id === undefined ? {} : { id: message.id }),
          body: message.rawBody ?? message.body,
        });
      }
    },
    async backlog() {
      const stats = broker.stats(queue);
      return stats.visible + stats.inFlight + stats.delayed;
    },
    async deadLetters() {
      return broker
        .deadLetters(queue)
        .map((entry) => ({ id: entry.producerMessageId, reason: entry.reason }));
    },
    async teardown() {
      broker.close();
    },
  };
}
