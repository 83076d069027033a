/**
 * Public shapes of the in-process broker: what you send, what you receive, what you can
 * inspect and how faults are injected.
 */

/** Per-queue settings. Every field has a default, so queues can also be created on first use. */
export interface QueueOptions {
  /** How long a received message stays invisible (leased) before it is handed out again. @default 30000 */
  visibilityTimeoutMs?: number;
  /**
   * Deliveries after which a message that was not acked goes to the dead-letter list
   * (like an SQS redrive policy's `maxReceiveCount`). @default unlimited
   */
  maxDeliveries?: number;
  /**
   * Name of a queue that also receives every dead-lettered message, so it can be consumed.
   * Dead letters are always listed by `deadLetters(queue)`, with or without it. @default none
   */
  deadLetterQueue?: string;
  /**
   * FIFO groups: a group's next message is not handed out while an earlier message of the
   * group is in flight or waiting for a delayed retry. Messages without `groupId` are
   * not ordered. @default false
   */
  fifo?: boolean;
}

/** A message to send. */
export interface SendInput {
  /** Producer-set message ID; also stored as attribute `message-id`. */
  id?: string;
  /** Any structured-cloneable value; stored as a copy, so later mutations do not leak in. */
  body: unknown;
  attributes?: Record<string, string>;
  /** FIFO group (ordering key). */
  groupId?: string;
  /** Keeps the message invisible this long after sending. @default 0 */
  delayMs?: number;
}

/** What `send` returns. */
export interface SendResult {
  /** ID the broker assigned (unique per sent copy). */
  messageId: string;
  /** Position in the queue, increasing with every send. */
  sequence: number;
}

/** Options of `receive`. */
export interface ReceiveOptions {
  /** Most messages to return. @default 1 */
  max?: number;
  /** Lease length for these deliveries. @default the queue's visibilityTimeoutMs */
  visibilityTimeoutMs?: number;
  /**
   * Long poll: when nothing is available, wait up to this long for a message to be sent,
   * become visible or come back from an expired lease. @default 0
   */
  waitMs?: number;
  /** Ends a long poll early (it then resolves with no messages). */
  signal?: AbortSignal;
}

/** One leased delivery of one message. */
export interface MemoryDelivery {
  queue: string;
  /** Broker-assigned ID. */
  messageId: string;
  /** The producer's `id`, when it set one. */
  producerMessageId?: string;
  /** Valid for this delivery only: a redelivery gets a new one. */
  receipt: string;
  body: unknown;
  attributes: Record<string, string>;
  groupId?: string;
  sequence: number;
  /** 1 on the first delivery. */
  deliveryCount: number;
  /** Epoch ms at which the lease runs out unless extended. */
  leaseExpiresAt: number;
  sentAt: number;
}

/** Options of `nack`. */
export interface NackOptions {
  /** Keep the message invisible this long before it can be received again. @default 0 */
  delayMs?: number;
  /** False gives the delivery back without it counting towards maxDeliveries. @default true */
  countAsDelivery?: boolean;
}

/** Counts of one queue. */
export interface QueueStats {
  /** Receivable now (FIFO messages blocked behind their group are included). */
  visible: number;
  /** Leased to a receiver. */
  inFlight: number;
  /** Waiting for a send delay or a delayed retry. */
  delayed: number;
  /** Messages that left this queue for its dead-letter list. */
  deadLettered: number;
}

/** One dead-lettered message and why. */
export interface DeadLetter {
  queue: string;
  messageId: string;
  producerMessageId?: string;
  body: unknown;
  attributes: Record<string, string>;
  groupId?: string;
  /** `max-deliveries` when the broker moved it, else the reason given to `deadLetter`. */
  reason: string;
  detail?: string;
  deliveryCount: number;
  /** Epoch ms. */
  at: number;
}

/** What a fault hook is told about the message it decides on. */
export interface FaultTarget {
  queue: string;
  messageId: string;
  producerMessageId?: string;
  /** The delivery count of the delivery concerned (0 for `duplicateSend`). */
  deliveryCount: number;
}

/**
 * Fault hooks, each deciding per message. `id` is the producer's message ID when set,
 * else the broker's.
 */
export interface BrokerFaults {
  /** The ack reports success but is lost: the message stays in flight and returns when its lease expires. */
  dropAck?: (id: string, target: FaultTarget) => boolean;
  /** A receive also makes an immediate second copy of the message visible (an at-least-once duplicate). */
  duplicateDelivery?: (id: string, target: FaultTarget) => boolean;
  /** A send stores the message twice, each with its own broker ID (a producer retry). */
  duplicateSend?: (id: string, target: FaultTarget) => boolean;
  /** A lease extension fails with a transient error (not a lost lease). */
  failExtend?: (id: string, target: FaultTarget) => boolean;
}
