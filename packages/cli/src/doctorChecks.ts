import type { DiagnoseFinding } from '@oncely/core';

const MINUTE = 60_000;
const HOUR = 60 * MINUTE;
const DAY = 24 * HOUR;

/** The part of a loaded consumer config the checks read. */
export interface CheckedConfig {
  broker: { type: string; [option: string]: unknown };
  handlerTimeoutMs?: number;
  leaseRenewal?: boolean;
}

/**
 * How long after a message was first processed each broker can still deliver it again,
 * from the vendors' documents. `ms` is the longest such time where the broker caps it
 * (or its default where the cap is a setting you choose); the text says where it comes from.
 */
export const REDELIVERY_HORIZONS: Readonly<Record<string, { ms: number | undefined; why: string }>> = {
  sqs: {
    ms: 14 * DAY,
    why: 'a message stays in the queue up to its MessageRetentionPeriod (at most 14 days), and a DLQ redrive sends it back within its original retention',
  },
  pubsub: {
    ms: 31 * DAY,
    why: "a seek replays messages within the topic's retention (at most 31 days); unacked ones stay up to the subscription's retention (at most 7 days)",
  },
  kafka: {
    ms: 7 * DAY,
    why: "an offset reset or seek replays any record within the topic's retention.ms (7 days by default, unlimited with -1)",
  },
  servicebus: {
    ms: undefined,
    why: 'a message lives until its time to live (DefaultMessageTimeToLive, unlimited unless set) and its dead-letter queue never expires it',
  },
  rabbitmq: {
    ms: undefined,
    why: 'a queue and its dead-letter queue keep a message until it is consumed, unless the queue sets message-ttl',
  },
  memory: { ms: 0, why: 'the in-process broker loses every message with its process' },
};

/**
 * Warns when markers are pruned sooner than the broker can redeliver: a message that comes
 * back (queue retention, a DLQ replay, a producer retry) after its marker is gone runs again.
 * `retentionMs` is the age the prune schedule uses (`oncely prune --older-than`).
 */
export function retentionFindings(config: CheckedConfig, retentionMs: number | undefined): DiagnoseFinding[] {
  const type = config.broker.type;
  const horizon = REDELIVERY_HORIZONS[type];
  if (horizon === undefined) return [];
  if (retentionMs === undefined) {
    return [
      {
        level: 'warn',
        message: `retention: not checked; pass --retention with the age your prune schedule uses (oncely prune --older-than): ${type}: ${horizon.why}`,
      },
    ];
  }
  const age = formatMs(retentionMs);
  if (horizon.ms === undefined) {
    return [
      {
        level: 'warn',
        message: `retention ${age}: ${type} has no redelivery horizon of its own: ${horizon.why}; keep the retention above the queue's message TTL and above the time you would replay a dead letter`,
      },
    ];
  }
  if (retentionMs < horizon.ms) {
    return [
      {
        level: 'warn',
        message: `retention ${age} is shorter than ${type}'s redelivery horizon (${formatMs(horizon.ms)}): ${horizon.why}. A message redelivered after its marker is pruned runs again; prune later, or shorten the broker's retention to match`,
      },
    ];
  }
  return [
    {
      level: 'ok',
      message: `retention ${age} covers ${type}'s redelivery horizon (${formatMs(horizon.ms)})`,
    },
  ];
}

/**
 * Compares `handlerTimeoutMs` with the longest a broker lets one delivery be held: past
 * it the broker hands the message to another consumer while the handler still runs.
 */
export function leaseLimitFindings(config: CheckedConfig): DiagnoseFinding[] {
  const timeout = config.handlerTimeoutMs ?? 30_000;
  const renewal = config.leaseRenewal !== false;
  const broker = config.broker;
  const over = (limit: number, what: string, fix: string): DiagnoseFinding => ({
    level: 'error',
    message: `handlerTimeoutMs ${timeout} exceeds ${what} (${limit} ms): the message is redelivered while the handler still runs; ${fix}`,
  });
  const within = (limit: number, what: string): DiagnoseFinding => ({
    level: 'ok',
    message: `handlerTimeoutMs ${timeout} is within ${what} (${limit} ms)`,
  });
  switch (broker.type) {
    case 'sqs': {
      // ChangeMessageVisibility cannot extend past 12 hours from the receipt.
      const limit = 12 * HOUR;
      if (timeout > limit)
        return [over(limit, "SQS's 12-hour total visibility per receipt", 'lower handlerTimeoutMs')];
      if (!renewal && typeof broker.visibilityTimeoutMs === 'number' && timeout > broker.visibilityTimeoutMs)
        return [
          over(
            broker.visibilityTimeoutMs,
            'broker.visibilityTimeoutMs with leaseRenewal off',
            'turn leaseRenewal on',
          ),
        ];
      return [within(limit, "SQS's 12-hour total visibility")];
    }
    case 'servicebus': {
      // One lock lasts at most 5 minutes; only renewal (per lock token) goes beyond it.
      const lock = typeof broker.lockDurationMs === 'number' ? broker.lockDurationMs : 5 * MINUTE;
      if (!renewal && timeout > lock)
        return [
          over(
            lock,
            'the Service Bus lock with leaseRenewal off (5 minutes at most per lock)',
            'turn leaseRenewal on',
          ),
        ];
      return [
        renewal
          ? {
              level: 'ok',
              message: `handlerTimeoutMs ${timeout}: the Service Bus lock is renewed per lock token while the handler runs`,
            }
          : within(lock, 'the Service Bus lock'),
      ];
    }
    case 'pubsub': {
      // One ack deadline is at most 600 s; the adapter's lease keeper extends it while held.
      const limit = 600_000;
      if (!renewal && timeout > limit)
        return [
          over(limit, 'the Pub/Sub maximum ack deadline with leaseRenewal off', 'turn leaseRenewal on'),
        ];
      return [
        {
          level: 'ok',
          message: `handlerTimeoutMs ${timeout}: the lease keeper extends the Pub/Sub ack deadline (600 s at most per extension) while the handler runs`,
        },
      ];
    }
    case 'rabbitmq': {
      // consumer_timeout: 30 minutes by default since RabbitMQ 3.8.17; no renewal exists.
      const configured = broker.consumerTimeoutMs;
      if (configured === false)
        return [
          { level: 'ok', message: 'RabbitMQ consumer_timeout is disabled (broker.consumerTimeoutMs: false)' },
        ];
      const limit = typeof configured === 'number' ? configured : 30 * MINUTE;
      const what =
        typeof configured === 'number' ? 'broker.consumerTimeoutMs' : "RabbitMQ's default consumer_timeout";
      if (timeout >= limit)
        return [
          over(
            limit,
            what,
            'lower handlerTimeoutMs or raise consumer_timeout on the server (and broker.consumerTimeoutMs)',
          ),
        ];
      return [within(limit, what)];
    }
    case 'kafka': {
      const session = typeof broker.sessionTimeout === 'number' ? broker.sessionTimeout : 30_000;
      const rebalance = typeof broker.rebalanceTimeout === 'number' ? broker.rebalanceTimeout : 60_000;
      // kafkajs heartbeats only between records: without the lease keeper's heartbeats, a
      // record longer than sessionTimeout loses the partition.
      if (!renewal && timeout >= session)
        return [over(session, 'the Kafka sessionTimeout with leaseRenewal off', 'turn leaseRenewal on')];
      if (timeout > rebalance) {
        return [
          {
            level: 'warn',
            message: `handlerTimeoutMs ${timeout} exceeds the Kafka rebalanceTimeout (${rebalance} ms): a rebalance during a long handler removes this member from the group and the record runs again elsewhere; raise broker.rebalanceTimeout`,
          },
        ];
      }
      return [within(rebalance, 'the Kafka rebalanceTimeout')];
    }
    default:
      return [];
  }
}

/** `1209600000` → `14d`, `5400000` → `90m`: the largest unit that divides it. */
export function formatMs(ms: number): string {
  for (const [unit, size] of [
    ['d', DAY],
    ['h', HOUR],
    ['m', MINUTE],
    ['s', 1000],
  ] as const) {
    if (ms >= size && ms % size === 0) return `${ms / size}${unit}`;
  }
  return `${ms}ms`;
}
