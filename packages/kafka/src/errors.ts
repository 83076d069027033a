import { BrokerMisconfiguredError } from '@oncely/core';

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
