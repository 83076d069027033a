/**
 * The emulator's configuration, in the shape of the official emulator's `Config.json`
 * (Azure/azure-service-bus-emulator-installer, `ServiceBus-Emulator/Schema/Config-schema.json`):
 * namespaces with queues and topics, topics with subscriptions and rules, each with
 * PascalCase `Properties` whose durations are ISO 8601 strings (`PT1M`).
 *
 * Limits follow the Service Bus **service** (BROKERS.md §3), not the official emulator's
 * narrower ones, with one deliberate difference: lock durations and duplicate-detection
 * windows below the service minimums are accepted, so tests can use leases of a second.
 */

/** `Properties` of a queue or a subscription in `Config.json`. */
export interface QueueProperties {
  /** Peek-lock duration. Service default `PT1M`, maximum `PT5M`. */
  LockDuration?: string | number;
  /** Deliveries before the message is dead-lettered with `MaxDeliveryCountExceeded`. Service default 10. */
  MaxDeliveryCount?: number;
  /** Messages must carry a session ID and are received through sessions. */
  RequiresSession?: boolean;
  /** Queues only: drop a message whose `MessageId` was seen within the window. */
  RequiresDuplicateDetection?: boolean;
  /** Duplicate-detection window. Service default 10 minutes (the docs conflict; set it). */
  DuplicateDetectionHistoryTimeWindow?: string | number;
  /** Time to live of messages that set none. Default: unlimited. */
  DefaultMessageTimeToLive?: string | number;
  /** Expired messages go to `$DeadLetterQueue` (reason `TTLExpiredException`) instead of being dropped. */
  DeadLetteringOnMessageExpiration?: boolean;
  /** Accepted for compatibility; auto-forwarding is not emulated. */
  ForwardTo?: string;
  /** Accepted for compatibility; not emulated. */
  ForwardDeadLetteredMessagesTo?: string;
}

/** `Properties` of a topic in `Config.json`. */
export interface TopicProperties {
  RequiresDuplicateDetection?: boolean;
  DuplicateDetectionHistoryTimeWindow?: string | number;
  DefaultMessageTimeToLive?: string | number;
}

/** A correlation filter: every property set must equal the message's. */
export interface CorrelationFilter {
  CorrelationId?: string;
  MessageId?: string;
  To?: string;
  ReplyTo?: string;
  /** The message's `subject` (called Label in older SDKs). */
  Label?: string;
  Subject?: string;
  SessionId?: string;
  ReplyToSessionId?: string;
  ContentType?: string;
  /** Application properties that must be present with these values. */
  Properties?: Record<string, string | number | boolean>;
}

/**
 * A subscription rule: a SQL or correlation filter and an optional SQL action
 * (`SET prop = expr; REMOVE prop`), as in the official emulator's `Config.json`.
 */
export interface RuleConfig {
  Name: string;
  Properties: {
    FilterType: 'Correlation' | 'Sql';
    CorrelationFilter?: CorrelationFilter;
    /** The SQL-92 subset of Service Bus filters, e.g. `color = 'blue' AND quantity > 10`. */
    SqlFilter?: { SqlExpression: string };
    /** Applied to the subscription's copy of a matching message, e.g. `SET sys.Label = 'big'`. */
    Action?: { SqlExpression: string };
  };
}

export interface QueueConfig {
  Name: string;
  Properties?: QueueProperties;
}

export interface SubscriptionConfig {
  Name: string;
  Properties?: QueueProperties;
  /** No rules (or none given) means the `$Default` rule: every message matches. */
  Rules?: RuleConfig[];
}

export interface TopicConfig {
  Name: string;
  Properties?: TopicProperties;
  Subscriptions?: SubscriptionConfig[];
}

export interface NamespaceConfig {
  Name: string;
  Queues?: QueueConfig[];
  Topics?: TopicConfig[];
}

/**
 * The whole configuration: `Config.json` itself (`{ UserConfig: { Namespaces: [...] } }`)
 * or its `UserConfig` object.
 *
 * @example
 * ```ts
 * const config: EmulatorConfig = {
 *   UserConfig: {
 *     Namespaces: [{ Name: 'sbemulatorns', Queues: [{ Name: 'orders', Properties: { LockDuration: 'PT30S', MaxDeliveryCount: 10 } }] }],
 *   },
 * };
 * ```
 */
export type EmulatorConfig = { UserConfig: UserConfig } | UserConfig;

export interface UserConfig {
  Namespaces?: NamespaceConfig[];
  /** Accepted for compatibility with `Config.json`; the emulator logs to its `log` option. */
  Logging?: unknown;
}

/** Entity settings in milliseconds, after defaults and limits. */
export interface EntitySettings {
  lockDurationMs: number;
  maxDeliveryCount: number;
  requiresSession: boolean;
  requiresDuplicateDetection: boolean;
  duplicateDetectionWindowMs: number;
  defaultTtlMs: number;
  deadLetteringOnMessageExpiration: boolean;
}

/** The service's maximum lock duration. */
export const MAX_LOCK_DURATION_MS = 5 * 60_000;
const DEFAULT_LOCK_DURATION_MS = 60_000;
const DEFAULT_MAX_DELIVERY_COUNT = 10;
const DEFAULT_DUPLICATE_WINDOW_MS = 10 * 60_000;

/**
 * Parses an ISO 8601 duration (`PT1M`, `PT0.5S`, `P1DT2H`) to milliseconds; a number is
 * taken as milliseconds already.
 *
 * @example
 * ```ts
 * parseDuration('PT1M30S'); // 90000
 * ```
 */
export function parseDuration(value: string | number, field = 'duration'): number {
  if (typeof value === 'number') {
    if (!Number.isFinite(value) || value < 0) throw new Error(`${field}: ${value} is not a duration`);
    return value;
  }
  const match =
    /^P(?:(\d+(?:\.\d+)?)D)?(?:T(?:(\d+(?:\.\d+)?)H)?(?:(\d+(?:\.\d+)?)M)?(?:(\d+(?:\.\d+)?)S)?)?$/.exec(
      value.trim(),
    );
  if (!match || value.trim() === 'P' || value.trim().endsWith('T')) {
    throw new Error(`${field}: '${value}' is not an ISO 8601 duration such as PT1M`);
  }
  const [, d, h, m, s] = match;
  const ms = (Number(d ?? 0) * 86_400 + Number(h ?? 0) * 3_600 + Number(m ?? 0) * 60 + Number(s ?? 0)) * 1000;
  return Math.round(ms);
}

/**
 * Settings of a queue or subscription from its `Properties`, with the service defaults.
 *
 * @example
 * ```ts
 * queueSettings({ LockDuration: 'PT5S', MaxDeliveryCount: 3 }, 'orders').lockDurationMs; // 5000
 * ```
 */
export function queueSettings(properties: QueueProperties = {}, name = 'entity'): EntitySettings {
  const lockDurationMs =
    properties.LockDuration === undefined
      ? DEFAULT_LOCK_DURATION_MS
      : parseDuration(properties.LockDuration, `${name}.LockDuration`);
  if (lockDurationMs <= 0 || lockDurationMs > MAX_LOCK_DURATION_MS) {
    throw new Error(`${name}.LockDuration must be above 0 and at most PT5M (got ${lockDurationMs} ms)`);
  }
  const maxDeliveryCount = properties.MaxDeliveryCount ?? DEFAULT_MAX_DELIVERY_COUNT;
  if (!Number.isInteger(maxDeliveryCount) || maxDeliveryCount < 1) {
    throw new Error(`${name}.MaxDeliveryCount must be an integer of at least 1 (got ${maxDeliveryCount})`);
  }
  return {
    lockDurationMs,
    maxDeliveryCount,
    requiresSession: properties.RequiresSession ?? false,
    requiresDuplicateDetection: properties.RequiresDuplicateDetection ?? false,
    duplicateDetectionWindowMs:
      properties.DuplicateDetectionHistoryTimeWindow === undefined
        ? DEFAULT_DUPLICATE_WINDOW_MS
        : parseDuration(
            properties.DuplicateDetectionHistoryTimeWindow,
            `${name}.DuplicateDetectionHistoryTimeWindow`,
          ),
    defaultTtlMs:
      properties.DefaultMessageTimeToLive === undefined
        ? Number.POSITIVE_INFINITY
        : parseDuration(properties.DefaultMessageTimeToLive, `${name}.DefaultMessageTimeToLive`),
    deadLetteringOnMessageExpiration: properties.DeadLetteringOnMessageExpiration ?? false,
  };
}

/** The namespaces of a configuration (either shape). */
export function namespacesOf(config: EmulatorConfig | undefined): NamespaceConfig[] {
  if (!config) return [];
  const user = 'UserConfig' in config ? config.UserConfig : config;
  return user.Namespaces ?? [];
}
