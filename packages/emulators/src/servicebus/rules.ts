/**
 * Subscription rules: a filter (true, false, SQL or correlation) and an optional SQL action,
 * from `Config.json` or from the `$management` rule operations (`add-rule`, `remove-rule`,
 * `enumerate-rules`), and what a message sent to the topic becomes on a subscription:
 *
 * - rules without an action are OR-ed: one copy when any of them matches;
 * - each matching rule with an action yields a copy of its own, the action applied and
 *   the rule's name in the `RuleName` application property (learn.microsoft.com, "Topic
 *   filters and actions").
 *
 * A new subscription has the `$Default` rule (the true filter); a subscription without
 * rules gets nothing.
 */
import type { CorrelationFilter, RuleConfig } from './config.js';
import type { AmqpMessage } from './MessageEntity.js';
import { amqp, CONDITIONS, ManagementError, types } from './model.js';
import {
  applyAction,
  compileAction,
  compileFilter,
  matchesFilter,
  SqlError,
  type SqlNode,
  type SqlStatement,
} from './sql/index.js';

export const DEFAULT_RULE_NAME = '$Default';

export type RuleFilter =
  | { type: 'true' }
  | { type: 'false' }
  | { type: 'sql'; expression: string; node: SqlNode }
  | { type: 'correlation'; correlation: CorrelationFilter };

export interface SubscriptionRule {
  name: string;
  filter: RuleFilter;
  action?: { expression: string; statements: SqlStatement[] };
}

/** Descriptor codes of the AMQP rule description (the client's `Constants.descriptorCodes`). */
const DESCRIPTORS = {
  ruleDescription: 1335734829060,
  sqlFilter: 83483426822,
  trueFilter: 83483426823,
  falseFilter: 83483426824,
  correlationFilter: 83483426825,
  emptyRuleAction: 1335734829061,
  sqlRuleAction: 1335734829062,
};

/** The rule every new subscription starts with: all messages. */
export function defaultRule(): SubscriptionRule {
  return { name: DEFAULT_RULE_NAME, filter: { type: 'true' } };
}

/** A rule from `Config.json` (or `createSubscription`); throws an Error naming the rule. */
export function ruleFromConfig(config: RuleConfig): SubscriptionRule {
  const props = config.Properties ?? ({} as RuleConfig['Properties']);
  try {
    let filter: RuleFilter;
    if (props.FilterType === 'Sql') {
      const expression = props.SqlFilter?.SqlExpression;
      if (typeof expression !== 'string') throw new SqlError('SqlFilter.SqlExpression is missing');
      filter = { type: 'sql', expression, node: compileFilter(expression) };
    } else if (props.FilterType === 'Correlation') {
      filter = { type: 'correlation', correlation: props.CorrelationFilter ?? {} };
    } else {
      throw new SqlError(`FilterType must be 'Sql' or 'Correlation' (got ${String(props.FilterType)})`);
    }
    const action = props.Action?.SqlExpression;
    return {
      name: config.Name,
      filter,
      ...(action ? { action: { expression: action, statements: compileAction(action) } } : {}),
    };
  } catch (error) {
    throw new Error(`rule ${config.Name}: ${(error as Error).message}`);
  }
}

/** A rule from an `add-rule` request's `rule-description` map; a bad one is a 400. */
export function ruleFromAmqp(name: string, description: Record<string, any> | undefined): SubscriptionRule {
  if (!name) throw argumentError('rule-name is missing.');
  if (name.length > 50) throw argumentError(`The rule name '${name}' is longer than 50 characters.`);
  const sql = description?.['sql-filter'];
  const correlation = description?.['correlation-filter'];
  const actionText = description?.['sql-rule-action']?.expression;
  try {
    let filter: RuleFilter;
    if (sql) {
      const expression = String(sql.expression ?? '');
      filter = { type: 'sql', expression, node: compileFilter(expression) };
    } else if (correlation) {
      filter = { type: 'correlation', correlation: correlationFromAmqp(correlation) };
    } else {
      throw new SqlError('the rule description has neither sql-filter nor correlation-filter');
    }
    const rule: SubscriptionRule = { name, filter };
    if (actionText !== undefined && actionText !== null && String(actionText).trim() !== '') {
      rule.action = { expression: String(actionText), statements: compileAction(String(actionText)) };
    }
    return rule;
  } catch (error) {
    if (error instanceof SqlError) throw argumentError(`Rule '${name}': ${error.message}`);
    throw error;
  }
}

function correlationFromAmqp(map: Record<string, any>): CorrelationFilter {
  const text = (value: unknown) => (value === undefined || value === null ? undefined : String(value));
  const filter: CorrelationFilter = {
    CorrelationId: text(map['correlation-id']),
    MessageId: text(map['message-id']),
    To: text(map.to),
    ReplyTo: text(map['reply-to']),
    Subject: text(map.label),
    SessionId: text(map['session-id']),
    ReplyToSessionId: text(map['reply-to-session-id']),
    ContentType: text(map['content-type']),
  };
  const properties = map.properties;
  if (properties && typeof properties === 'object') filter.Properties = { ...properties };
  return filter;
}

function argumentError(message: string): ManagementError {
  return new ManagementError(400, CONDITIONS.argumentError, message);
}

/** The copies of `message` a subscription with these rules stores (none when nothing matches). */
export function copiesFor(rules: SubscriptionRule[], message: AmqpMessage): AmqpMessage[] {
  const copies: AmqpMessage[] = [];
  let plainMatch = false;
  for (const rule of rules) {
    if (!rule.action && plainMatch) continue;
    if (!filterMatches(rule.filter, message)) continue;
    if (!rule.action) {
      plainMatch = true;
      continue;
    }
    let copy = structuredCopy(message);
    try {
      applyAction(rule.action.statements, copy);
    } catch {
      // An action that fails on this message (division by zero, say) leaves it as sent:
      // not with the statements before the failing one applied.
      copy = structuredCopy(message);
    }
    copy.application_properties = { ...(copy.application_properties ?? {}), RuleName: rule.name };
    copies.push(copy);
  }
  if (plainMatch) copies.unshift(structuredCopy(message));
  return copies;
}

function filterMatches(filter: RuleFilter, message: AmqpMessage): boolean {
  switch (filter.type) {
    case 'true':
      return true;
    case 'false':
      return false;
    case 'sql':
      try {
        return matchesFilter(filter.node, message);
      } catch {
        // An expression that fails on this message (division by zero, say) does not match.
        return false;
      }
    default:
      return correlationMatches(filter.correlation, message);
  }
}

function correlationMatches(f: CorrelationFilter, message: AmqpMessage): boolean {
  const checks: Array<[unknown, unknown]> = [
    [f.CorrelationId, message.correlation_id],
    [f.MessageId, message.message_id],
    [f.To, message.to],
    [f.ReplyTo, message.reply_to],
    [f.Subject ?? f.Label, message.subject],
    [f.SessionId, message.group_id],
    [f.ReplyToSessionId, message.reply_to_group_id],
    [f.ContentType, message.content_type],
  ];
  for (const [want, have] of checks) {
    if (want !== undefined && want !== '' && String(have) !== String(want)) return false;
  }
  for (const [name, want] of Object.entries(f.Properties ?? {})) {
    if (String(message.application_properties?.[name]) !== String(want)) return false;
  }
  return true;
}

/** `enumerate-rules`' entry for a rule: `{ 'rule-description': described list [filter, action, name] }`. */
export function encodeRule(rule: SubscriptionRule): Record<string, unknown> {
  const text = (value: unknown) => (value === undefined ? null : types.wrap_string(String(value)));
  let filter: unknown;
  switch (rule.filter.type) {
    case 'true':
      filter = types.wrap_described(types.wrap_list([types.wrap_string('1=1')]), DESCRIPTORS.trueFilter);
      break;
    case 'false':
      filter = types.wrap_described(types.wrap_list([types.wrap_string('1=0')]), DESCRIPTORS.falseFilter);
      break;
    case 'sql':
      filter = types.wrap_described(
        types.wrap_list([types.wrap_string(rule.filter.expression), null]),
        DESCRIPTORS.sqlFilter,
      );
      break;
    default: {
      const c = rule.filter.correlation;
      filter = types.wrap_described(
        types.wrap_list([
          text(c.CorrelationId),
          text(c.MessageId),
          text(c.To),
          text(c.ReplyTo),
          text(c.Subject ?? c.Label),
          text(c.SessionId),
          text(c.ReplyToSessionId),
          text(c.ContentType),
          types.wrap_map(c.Properties ?? {}),
        ]),
        DESCRIPTORS.correlationFilter,
      );
    }
  }
  const action = rule.action
    ? types.wrap_described(
        types.wrap_list([types.wrap_string(rule.action.expression), null]),
        DESCRIPTORS.sqlRuleAction,
      )
    : types.wrap_described(types.wrap_list([]), DESCRIPTORS.emptyRuleAction);
  return {
    'rule-description': types.wrap_described(
      types.wrap_list([filter, action, types.wrap_string(rule.name)]),
      DESCRIPTORS.ruleDescription,
    ),
  };
}

function structuredCopy(message: AmqpMessage): AmqpMessage {
  return amqp.decode(amqp.encode(message)) as AmqpMessage;
}
