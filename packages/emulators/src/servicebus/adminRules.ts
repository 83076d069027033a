/**
 * Rules in the administration API: a `RuleDescription` entry from a PUT (SQL or
 * correlation filter, SQL or empty action) to a subscription rule, and a rule back to the
 * entry `ServiceBusAdministrationClient` reads.
 */
import { CONNECT, entry, escapeXml, leaves, STARTED, unescapeXml } from './adminXml.js';
import { CONDITIONS, ManagementError } from './model.js';
import { ruleFromAmqp, type SubscriptionRule } from './rules.js';

const XSD = 'http://www.w3.org/2001/XMLSchema';

/** The rule a PUT body describes; an expression that does not parse is a 400. */
export function adminRule(name: string, body: string): SubscriptionRule {
  const filter = section(body, 'Filter');
  const action = section(body, 'Action');
  if (!filter)
    throw new ManagementError(400, CONDITIONS.argumentError, 'The rule description has no Filter.');
  if (/<(?:\w+:)?Parameters>\s*<(?:\w+:)?KeyValueOfstringanyType/.test(body)) {
    throw new ManagementError(
      400,
      CONDITIONS.argumentError,
      'SQL filter and action parameters are not emulated.',
    );
  }
  const description: Record<string, unknown> = {};
  const fields = leaves(filter.inner);
  if (filter.type === 'SqlFilter' || filter.type === 'TrueFilter' || filter.type === 'FalseFilter') {
    const fallback = filter.type === 'FalseFilter' ? '1=0' : '1=1';
    description['sql-filter'] = { expression: fields.SqlExpression ?? fallback };
  } else if (filter.type === 'CorrelationFilter') {
    description['correlation-filter'] = {
      'correlation-id': fields.CorrelationId,
      'message-id': fields.MessageId,
      to: fields.To,
      'reply-to': fields.ReplyTo,
      label: fields.Label,
      'session-id': fields.SessionId,
      'reply-to-session-id': fields.ReplyToSessionId,
      'content-type': fields.ContentType,
      properties: properties(filter.inner),
    };
  } else {
    throw new ManagementError(400, CONDITIONS.argumentError, `Filter type '${filter.type}' is not emulated.`);
  }
  if (action?.type === 'SqlRuleAction') {
    description['sql-rule-action'] = { expression: leaves(action.inner).SqlExpression ?? '' };
  }
  return ruleFromAmqp(name, description);
}

/** An element's `i:type` and inner XML (`<Filter p4:type="SqlFilter" …>…</Filter>` or self-closed). */
function section(body: string, tag: string): { type: string; inner: string } | undefined {
  const match = new RegExp(`<(?:\\w+:)?${tag}\\b([^>]*?)(/>|>([\\s\\S]*?)</(?:\\w+:)?${tag}>)`).exec(body);
  if (!match) return undefined;
  const type = /\w+:type="(?:\w+:)?(\w+)"/.exec(match[1]!)?.[1] ?? '';
  return { type, inner: match[3] ?? '' };
}

/** A correlation filter's `Properties`: key-value pairs typed by XML Schema. */
function properties(inner: string): Record<string, string | number | boolean> | undefined {
  const out: Record<string, string | number | boolean> = {};
  const pairs = inner.matchAll(
    /<(?:\w+:)?Key>([\s\S]*?)<\/(?:\w+:)?Key>\s*<(?:\w+:)?Value\b[^>]*?type="(?:\w+:)?(\w+)"[^>]*>([\s\S]*?)<\/(?:\w+:)?Value>/g,
  );
  for (const [, key, type, raw] of pairs) {
    const text = unescapeXml(raw!);
    out[unescapeXml(key!)] =
      type === 'double' || type === 'int' || type === 'long'
        ? Number(text)
        : type === 'boolean'
          ? text === 'true'
          : text;
  }
  return Object.keys(out).length > 0 ? out : undefined;
}

/** A rule as the administration client reads it. */
export function ruleEntry(base: string, path: string, rule: SubscriptionRule, root = false): string {
  let filter: string;
  const f = rule.filter;
  if (f.type === 'true' || f.type === 'false') {
    const type = f.type === 'true' ? 'TrueFilter' : 'FalseFilter';
    filter = `<Filter i:type="${type}"><SqlExpression>${f.type === 'true' ? '1=1' : '1=0'}</SqlExpression><CompatibilityLevel>20</CompatibilityLevel></Filter>`;
  } else if (f.type === 'sql') {
    filter = `<Filter i:type="SqlFilter"><SqlExpression>${escapeXml(f.expression)}</SqlExpression><CompatibilityLevel>20</CompatibilityLevel></Filter>`;
  } else {
    const c = f.correlation;
    const field = (tag: string, value: string | undefined) =>
      value === undefined || value === '' ? '' : `<${tag}>${escapeXml(value)}</${tag}>`;
    const props = Object.entries(c.Properties ?? {})
      .map(([key, value]) => {
        const type =
          typeof value === 'number'
            ? Number.isInteger(value)
              ? 'int'
              : 'double'
            : typeof value === 'boolean'
              ? 'boolean'
              : 'string';
        return `<KeyValueOfstringanyType><Key>${escapeXml(key)}</Key><Value i:type="d6p1:${type}" xmlns:d6p1="${XSD}">${escapeXml(String(value))}</Value></KeyValueOfstringanyType>`;
      })
      .join('');
    filter =
      '<Filter i:type="CorrelationFilter">' +
      field('CorrelationId', c.CorrelationId) +
      field('MessageId', c.MessageId) +
      field('To', c.To) +
      field('ReplyTo', c.ReplyTo) +
      field('Label', c.Subject ?? c.Label) +
      field('SessionId', c.SessionId) +
      field('ReplyToSessionId', c.ReplyToSessionId) +
      field('ContentType', c.ContentType) +
      `<Properties>${props}</Properties></Filter>`;
  }
  const action = rule.action
    ? `<Action i:type="SqlRuleAction"><SqlExpression>${escapeXml(rule.action.expression)}</SqlExpression><CompatibilityLevel>20</CompatibilityLevel></Action>`
    : '<Action i:type="EmptyRuleAction"/>';
  const description =
    `<RuleDescription xmlns="${CONNECT}" xmlns:i="http://www.w3.org/2001/XMLSchema-instance">` +
    `${filter}${action}<CreatedAt>${STARTED}</CreatedAt><Name>${escapeXml(rule.name)}</Name></RuleDescription>`;
  return entry(base, path, description, root);
}
