import type { Logger } from '@oncely/core';
import type { LogEntry } from 'kafkajs';

/**
 * kafkajs' `logLevel` values, spelled out: reading them from kafkajs would load it when
 * `@oncely/kafka` is imported, and a user of `broker.client: 'platformatic'` need not have it.
 */
export const KAFKAJS_LOG_LEVEL = { NOTHING: 0, ERROR: 1, WARN: 2, INFO: 4, DEBUG: 5 } as const;
const logLevel = KAFKAJS_LOG_LEVEL;

/**
 * Routes kafkajs's log lines to the consumer's logger. kafkajs logs every error
 * response of the protocol (`[Connection] Response Heartbeat ...` on each rebalance, a
 * coordinator move) at ERROR although it recovers from them: those become `info`, its
 * other ERROR lines `warn`, its WARN `info`, and the rest `debug`. What it cannot recover
 * from reaches the consumer as a crash, reported separately.
 *
 * @example
 * ```ts
 * new Kafka({ brokers, logCreator: kafkaLogCreator(logger), logLevel: logLevel.INFO });
 * ```
 */
export function kafkaLogCreator(log: Logger): () => (entry: LogEntry) => void {
  return () =>
    ({ level, log: line, namespace }: LogEntry) => {
      const { message, timestamp: _t, logger: _l, ...fields } = line;
      const text = `kafkajs ${namespace}: ${message}`;
      if (level === logLevel.ERROR && namespace !== 'Connection') log.warn(text, fields);
      else if (level === logLevel.ERROR) log.info(text, fields);
      else if (level === logLevel.WARN) log.info(text, fields);
      else log.debug(text, fields);
    };
}
