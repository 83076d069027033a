/**
 * The broker side of a chaos run: one backend per broker provisions an isolated queue
 * or topic, publishes, reports backlog and dead letters, and performs the broker faults
 * it can (connection drops, restarts). Types only.
 */

/**
 * @typedef {object} ChaosMessage
 * @property {string} [id] omitted for a poison message without an ID
 * @property {unknown} [body] JSON-encoded where the broker carries bytes
 * @property {string} [rawBody] sent as is (an unparseable body)
 */

/**
 * @typedef {object} Backend
 * @property {string} name
 * @property {boolean} crossProcess false: the broker lives in the runner, consumers are virtual processes
 * @property {import('@oncely/core').AdapterModule} [adapterModule] for virtual processes
 * @property {number | undefined} leaseMs the broker lease (undefined: the broker has none, RabbitMQ)
 * @property {number} stallMs how long a stalled handler stalls (longer than the lease)
 * @property {boolean} leaseLossSlot slot 0 runs without lease renewal, so its stalls lose the lease
 * @property {Record<string, string>} notes what each fault means on this broker, for the report
 * @property {import('@oncely/core').IdStrategy} [idStrategy] the consumers' ID strategy (default: the adapter's)
 * @property {number} [failFirstRate] share of first attempts whose handler throws (a delayed retry)
 * @property {(consumer: { slot: number, generation: number, label: string, concurrency: number }) => Promise<import('@oncely/core').BrokerConfig>} consumerBroker
 * @property {(messages: ChaosMessage[]) => Promise<void>} publish
 * @property {() => Promise<number>} backlog messages not yet settled (ready, in flight, waiting for a retry)
 * @property {() => Promise<Array<{ id?: string, reason: string }>>} deadLetters
 * @property {() => Promise<string>} [disconnect] drops every consumer connection; resolves with what it did
 * @property {(label: string) => Promise<void>} [ackLost] a consumer dropped an ack: make the broker notice (RabbitMQ: its connection goes)
 * @property {() => Promise<string>} [restart] restarts the broker; resolves with what it did
 * @property {() => Promise<void>} [flush] nudges deliveries stuck on a live connection back (end of run)
 * @property {(label: string) => Promise<void>} [retire] a consumer is gone for good: free what the backend kept for it
 * @property {() => Promise<void>} teardown
 */

export {};
