import type { Message as PubSubMessage, Subscription } from '@google-cloud/pubsub';
import type { Logger } from '@oncely/core';

/** Batch window of the client's own ack/modAck queues (its receipt modAck). */
export const RECEIPT_MODACK_BATCH_MS = 10;
/**
 * Without the client's modAck queue to watch (another client version), how long after
 * receipt a deadline change of ours waits so that the receipt modAck lands first.
 */
const RECEIPT_MODACK_GUARD_MS = 250;

/** The parts of the client's ModAckQueue the receipt guard reads. */
interface ClientModAckQueue {
  numPendingRequests: number;
  numInFlightRequests: number;
  onFlush(): Promise<void>;
  onDrain(): Promise<void>;
}

/** The parts of the client's subscriber (`subscription._subscriber`) read here. */
interface ClientSubscriber {
  _inventory?: { remove?: unknown };
  _modAcks?: Partial<ClientModAckQueue>;
}

/**
 * The parts of the client's subscriber the adapter reads that are not public API: its
 * flow-control inventory and its modAck queue. Each has a fallback for a client version
 * without it, slower but correct (test/clientInternals.test.ts runs them), and says once
 * in the log that it is in use. (SubscriberStream hooks the third, `_discardMessage`.)
 *
 * @example
 * ```ts
 * const internals = new ClientInternals(() => stream.client, log);
 * const receipt = internals.receiptOf(false);
 * internals.takeFromClient(message);
 * ```
 */
export class ClientInternals {
  private warnedInventory = false;
  private warnedReceipt = false;

  constructor(
    private readonly subscription: () => Subscription | undefined,
    private readonly log: Logger,
  ) {}

  /**
   * Takes the message out of the client's lease management and flow-control inventory.
   * The adapter settles through its own unary calls (never `message.ack()`), so the
   * client would otherwise count the message as outstanding until its lease manager
   * drops it (with a zero maxExtensionTime, at a random point of the first deadline):
   * meanwhile a full inventory pauses the stream, and the client's LeaseManager drops
   * messages it holds back (`allowExcessMessages: false`) without ever emitting them.
   * The service's own flow control (max_outstanding_messages on the stream) still bounds
   * what is received. Without the inventory the fallback is the zero maxExtensionTime.
   */
  takeFromClient(message: PubSubMessage): void {
    const inventory = this.subscriber()?._inventory;
    if (typeof inventory?.remove === 'function') {
      (inventory.remove as (m: PubSubMessage) => void).call(inventory, message);
    } else if (!this.warnedInventory) {
      this.warnedInventory = true;
      this.log.warn(
        "pubsub: this @google-cloud/pubsub version hides the subscriber's inventory; flow control falls back to its lease passes",
      );
    }
  }

  /**
   * Resolves once the client's receipt modAck of the message being accepted was
   * answered. Without exactly-once the client adds it to its ModAckQueue just before it
   * hands the message out (the message event follows on the next tick, before any timer:
   * the batch has not gone yet), sends it within RECEIPT_MODACK_BATCH_MS, and resolves
   * that queue's `onFlush()` once the request was answered; a request already on its way
   * is covered by `onDrain()`. With exactly-once the client hands a message out only
   * after its receipt modAck succeeded. Without the queue the fallback is a fixed pause.
   */
  receiptOf(exactlyOnce: boolean): Promise<void> {
    if (exactlyOnce) return Promise.resolve();
    const queue = this.subscriber()?._modAcks;
    if (typeof queue?.onFlush === 'function' && typeof queue.onDrain === 'function') {
      if ((queue.numPendingRequests ?? 0) > 0) return queue.onFlush();
      if ((queue.numInFlightRequests ?? 0) > 0) return queue.onDrain();
      return Promise.resolve();
    }
    if (!this.warnedReceipt) {
      this.warnedReceipt = true;
      this.log.warn(
        `pubsub: this @google-cloud/pubsub version hides its modAck queue; a deadline change waits ${RECEIPT_MODACK_GUARD_MS} ms after receipt for the receipt modAck instead`,
      );
    }
    return new Promise((resolve) => setTimeout(resolve, RECEIPT_MODACK_GUARD_MS).unref());
  }

  private subscriber(): ClientSubscriber | undefined {
    return (this.subscription() as unknown as { _subscriber?: ClientSubscriber } | undefined)?._subscriber;
  }
}
