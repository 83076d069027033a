import { BrokerMisconfiguredError, OncelyError } from '@oncely/core';

/**
 * The topic to consume (or the dead-letter topic, when it cannot be created) does not
 * exist on the cluster. Code `BROKER_MISCONFIGURED`.
 *
 * @example
 * ```ts
 * try { await consumer.start(); } catch (e) { if (e instanceof KafkaTopicMissingError) console.error(e.topic); }
 * ```
 */
export class KafkaTopicMissingError extends BrokerMisconfiguredError {
  constructor(
    readonly topic: string,
    message: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

/**
 * `send()` refused a record without an ID, or kafkajs gave up sending (the cause is
 * kept). Code `KAFKA_SEND_FAILED`.
 *
 * @example
 * ```ts
 * try { await send(producer, 'payments', { id: 'order-42', value: order }); } catch (e) { if (e instanceof KafkaSendError) console.error(e.cause); }
 * ```
 */
export class KafkaSendError extends OncelyError {
  constructor(message: string, options?: ErrorOptions) {
    // The core's code union has no entry for adapter-specific failures (as RabbitMQ's
    // RABBITMQ_OPERATION_FAILED): a stable, honest code instead of an unrelated one.
    super('KAFKA_SEND_FAILED' as never, message, options);
  }
}

/**
 * `oncely dlq` on Kafka could not do what was asked: another pass holds the lock, the pass
 * lost its lock, a re-send is in doubt, or a dead letter cannot be replayed as it is. Code
 * `KAFKA_DEAD_LETTERS`; the message says which and what the next pass does.
 *
 * @example
 * ```ts
 * try { await dlq.replay({}); } catch (e) { if (e instanceof KafkaDeadLetterError) console.error(e.message); }
 * ```
 */
export class KafkaDeadLetterError extends OncelyError {
  constructor(message: string, options?: ErrorOptions) {
    super('KAFKA_DEAD_LETTERS' as never, message, options);
  }
}
