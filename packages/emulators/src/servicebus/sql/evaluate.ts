/**
 * Evaluation of parsed SQL filters and rule actions against an AMQP message, with SQL's
 * three-valued logic: a missing user property, or a null, is *unknown*; a comparison with
 * unknown is unknown; a filter matches only when it is true.
 *
 * System properties (`sys.`) map to the AMQP message's properties section and the
 * annotations the client sets; naming one that does not exist is an error when the rule is
 * added, as on the service.
 */
import { randomUUID } from 'node:crypto';
import { SqlError } from './lexer.js';
import type { PropertyRef, SqlNode, SqlStatement, SqlValue } from './parser.js';

/** A decoded AMQP message as rhea represents it. */
export type SqlMessage = Record<string, any> & {
  application_properties?: Record<string, unknown>;
  message_annotations?: Record<string, unknown>;
};

/** Unknown (SQL's third truth value, and a missing property). */
const UNKNOWN = undefined;
type Value = SqlValue | Date | undefined;

interface SystemProperty {
  read(message: SqlMessage): unknown;
  /** Absent: the property cannot be set or removed by an action. */
  field?: string;
  annotation?: string;
}

/** `sys.` properties, by lower-cased name. Names follow the .NET message (Label = Subject). */
const SYSTEM: Record<string, SystemProperty> = {
  messageid: { read: (m) => m.message_id, field: 'message_id' },
  correlationid: { read: (m) => m.correlation_id, field: 'correlation_id' },
  to: { read: (m) => m.to, field: 'to' },
  replyto: { read: (m) => m.reply_to, field: 'reply_to' },
  label: { read: (m) => m.subject, field: 'subject' },
  subject: { read: (m) => m.subject, field: 'subject' },
  sessionid: { read: (m) => m.group_id, field: 'group_id' },
  replytosessionid: { read: (m) => m.reply_to_group_id, field: 'reply_to_group_id' },
  contenttype: { read: (m) => m.content_type, field: 'content_type' },
  partitionkey: {
    read: (m) => m.message_annotations?.['x-opt-partition-key'],
    annotation: 'x-opt-partition-key',
  },
  scheduledenqueuetimeutc: {
    read: (m) => m.message_annotations?.['x-opt-scheduled-enqueue-time'],
    annotation: 'x-opt-scheduled-enqueue-time',
  },
  timetolive: { read: (m) => (typeof m.ttl === 'number' ? m.ttl : undefined) },
};

/** Throws when an expression names a system property that does not exist. */
export function checkProperties(nodes: Array<SqlNode | SqlStatement>, forAction = false): void {
  const visit = (node: SqlNode | SqlStatement | undefined): void => {
    if (!node) return;
    switch (node.kind) {
      case 'property':
        systemProperty(node);
        return;
      case 'set':
      case 'remove': {
        const target = node.property;
        const sys = systemProperty(target);
        if (forAction && sys && !sys.field && !sys.annotation) {
          throw new SqlError(`sys.${target.name} cannot be set or removed`, target.at);
        }
        if (node.kind === 'set') visit(node.value);
        return;
      }
      case 'exists':
        systemProperty(node.property);
        return;
      case 'not':
      case 'negate':
        visit(node.operand);
        return;
      case 'propertyOf':
        visit(node.name);
        return;
      case 'arithmetic':
      case 'compare':
      case 'logical':
        visit(node.left);
        visit(node.right);
        return;
      case 'in':
        visit(node.operand);
        node.list.forEach(visit);
        return;
      case 'like':
        visit(node.operand);
        visit(node.pattern);
        visit(node.escape);
        return;
      case 'isNull':
        visit(node.operand);
        return;
      default:
        return;
    }
  };
  nodes.forEach(visit);
}

function systemProperty(ref: PropertyRef): SystemProperty | undefined {
  if (ref.scope !== 'sys') return undefined;
  const sys = SYSTEM[ref.name.toLowerCase()];
  if (!sys) throw new SqlError(`sys.${ref.name} is not a system property`, ref.at);
  return sys;
}

/** True when the filter matches the message (unknown does not match). */
export function matchesFilter(filter: SqlNode, message: SqlMessage): boolean {
  return evaluate(filter, message) === true;
}

/** Applies an action's statements, in order, to the message (changed in place). */
export function applyAction(statements: SqlStatement[], message: SqlMessage): void {
  for (const statement of statements) {
    const target = statement.property;
    const sys = systemProperty(target);
    if (statement.kind === 'set') {
      const value = evaluate(statement.value, message);
      const stored = value === UNKNOWN ? null : value;
      if (!sys) {
        message.application_properties = { ...(message.application_properties ?? {}), [target.name]: stored };
      } else if (sys.field) {
        message[sys.field] = stored === null ? undefined : String(stored);
      } else if (sys.annotation) {
        message.message_annotations = { ...(message.message_annotations ?? {}), [sys.annotation]: stored };
      }
      continue;
    }
    if (!sys) {
      const props = { ...(message.application_properties ?? {}) };
      const key = userKey(props, target.name);
      if (key !== undefined) delete props[key];
      message.application_properties = props;
    } else if (sys.field) {
      delete message[sys.field];
    } else if (sys.annotation && message.message_annotations) {
      const annotations = { ...message.message_annotations };
      delete annotations[sys.annotation];
      message.message_annotations = annotations;
    }
  }
}

function evaluate(node: SqlNode, message: SqlMessage): Value {
  switch (node.kind) {
    case 'constant':
      return node.value;
    case 'property':
      return read(node, message);
    case 'newid':
      return randomUUID();
    case 'propertyOf': {
      const name = evaluate(node.name, message);
      if (typeof name !== 'string') return UNKNOWN;
      const dot = name.indexOf('.');
      const scope = dot > 0 ? name.slice(0, dot).toLowerCase() : '';
      if (scope === 'sys' || scope === 'user') {
        const ref: PropertyRef = { kind: 'property', scope, name: name.slice(dot + 1), at: 0 };
        if (scope === 'sys' && !SYSTEM[ref.name.toLowerCase()]) return UNKNOWN;
        return read(ref, message);
      }
      return read({ kind: 'property', scope: 'user', name, at: 0 }, message);
    }
    case 'negate': {
      const value = numeric(evaluate(node.operand, message));
      return value === UNKNOWN ? UNKNOWN : -value;
    }
    case 'not': {
      const value = evaluate(node.operand, message);
      return typeof value === 'boolean' ? !value : UNKNOWN;
    }
    case 'arithmetic':
      return arithmetic(node.op, evaluate(node.left, message), evaluate(node.right, message));
    case 'compare':
      return compare(node.op, evaluate(node.left, message), evaluate(node.right, message));
    case 'logical': {
      const left = truth(evaluate(node.left, message));
      // Short-circuit where SQL's truth tables allow it.
      if (node.op === 'and' && left === false) return false;
      if (node.op === 'or' && left === true) return true;
      const right = truth(evaluate(node.right, message));
      if (node.op === 'and')
        return right === false ? false : left === true && right === true ? true : UNKNOWN;
      return right === true ? true : left === false && right === false ? false : UNKNOWN;
    }
    case 'in': {
      const value = evaluate(node.operand, message);
      if (isUnknown(value)) return UNKNOWN;
      let unknown = false;
      for (const item of node.list) {
        const result = compare('=', value, evaluate(item, message));
        if (result === true) return !node.negated;
        if (result === UNKNOWN) unknown = true;
      }
      return unknown ? UNKNOWN : node.negated;
    }
    case 'like': {
      const value = evaluate(node.operand, message);
      const pattern = evaluate(node.pattern, message);
      const escapeChar = node.escape ? evaluate(node.escape, message) : undefined;
      if (typeof value !== 'string' || typeof pattern !== 'string') return UNKNOWN;
      if (node.escape && (typeof escapeChar !== 'string' || escapeChar.length !== 1)) {
        throw new SqlError('the ESCAPE character must be a string of length 1');
      }
      const matched = likeMatches(pattern, escapeChar as string | undefined, value);
      return node.negated ? !matched : matched;
    }
    case 'isNull': {
      const value = evaluate(node.operand, message);
      return isUnknown(value) !== node.negated;
    }
    case 'exists': {
      const ref = node.property;
      if (ref.scope === 'sys') return SYSTEM[ref.name.toLowerCase()]!.read(message) !== undefined;
      return userKey(message.application_properties ?? {}, ref.name) !== undefined;
    }
    default:
      return UNKNOWN;
  }
}

/** A user property by exact name, else by case-insensitive name. */
function userKey(props: Record<string, unknown>, name: string): string | undefined {
  if (Object.hasOwn(props, name)) return name;
  const lower = name.toLowerCase();
  return Object.keys(props).find((key) => key.toLowerCase() === lower);
}

function read(ref: PropertyRef, message: SqlMessage): Value {
  const raw =
    ref.scope === 'sys'
      ? SYSTEM[ref.name.toLowerCase()]!.read(message)
      : (() => {
          const props = message.application_properties ?? {};
          const key = userKey(props, ref.name);
          return key === undefined ? undefined : props[key];
        })();
  return normalize(raw);
}

/** rhea's decoded values as SQL values: numbers, strings, booleans, dates, null. */
function normalize(raw: unknown): Value {
  if (raw === undefined || raw === null) return raw === null ? null : UNKNOWN;
  if (typeof raw === 'string' || typeof raw === 'number' || typeof raw === 'boolean') return raw;
  if (typeof raw === 'bigint') return Number(raw);
  if (raw instanceof Date) return raw;
  if (Buffer.isBuffer(raw)) return raw.length === 8 ? Number(raw.readBigInt64BE()) : raw.toString('hex');
  if (typeof raw === 'object' && 'value' in (raw as object))
    return normalize((raw as { value: unknown }).value);
  return String(raw);
}

function isUnknown(value: Value): boolean {
  return value === UNKNOWN || value === null;
}

function truth(value: Value): boolean | undefined {
  return typeof value === 'boolean' ? value : UNKNOWN;
}

function numeric(value: Value): number | undefined {
  if (typeof value === 'number') return value;
  if (value instanceof Date) return value.getTime();
  return UNKNOWN;
}

function arithmetic(op: '+' | '-' | '*' | '/' | '%', left: Value, right: Value): Value {
  if (isUnknown(left) || isUnknown(right)) return UNKNOWN;
  if (op === '+' && typeof left === 'string' && typeof right === 'string') return left + right;
  const a = numeric(left);
  const b = numeric(right);
  if (a === UNKNOWN || b === UNKNOWN) return UNKNOWN;
  switch (op) {
    case '+':
      return a + b;
    case '-':
      return a - b;
    case '*':
      return a * b;
    case '/':
      if (b === 0) throw new SqlError('division by zero');
      return a / b;
    default:
      if (b === 0) throw new SqlError('division by zero');
      return a % b;
  }
}

/** Numbers with numbers, strings with strings (ordinal, case-sensitive), booleans by = and <> only; else unknown. */
function compare(op: '=' | '<>' | '<' | '>' | '<=' | '>=', left: Value, right: Value): Value {
  if (isUnknown(left) || isUnknown(right)) return UNKNOWN;
  let order: number;
  const a = left instanceof Date ? left.getTime() : left;
  const b = right instanceof Date ? right.getTime() : right;
  if (typeof a === 'number' && typeof b === 'number') order = a === b ? 0 : a < b ? -1 : 1;
  else if (typeof a === 'string' && typeof b === 'string') order = a === b ? 0 : a < b ? -1 : 1;
  else if (typeof a === 'boolean' && typeof b === 'boolean') {
    if (op !== '=' && op !== '<>') return UNKNOWN;
    order = a === b ? 0 : 1;
  } else return UNKNOWN;
  switch (op) {
    case '=':
      return order === 0;
    case '<>':
      return order !== 0;
    case '<':
      return order < 0;
    case '>':
      return order > 0;
    case '<=':
      return order <= 0;
    default:
      return order >= 0;
  }
}

/** A LIKE pattern's parts: one literal character, `_` (any one) or `%` (any run). */
const ANY_ONE = Symbol('_');
const ANY_RUN = Symbol('%');
type LikePart = string | typeof ANY_ONE | typeof ANY_RUN;

/**
 * LIKE (`%` any run, `_` one character, `escapeChar` making the next one literal), matched by
 * the greedy wildcard walk that backtracks only to the last `%`: at most pattern × value
 * steps. A backtracking RegExp (`^.*a.*a.*a…b$`) is exponential in the number of `%`s, and
 * one such filter on a long property would block the emulator's only thread.
 */
function likeMatches(pattern: string, escapeChar: string | undefined, value: string): boolean {
  const parts: LikePart[] = [];
  const chars = Array.from(pattern);
  for (let i = 0; i < chars.length; i++) {
    const c = chars[i]!;
    if (escapeChar !== undefined && c === escapeChar) {
      const next = chars[i + 1];
      if (next === undefined) throw new SqlError('the LIKE pattern ends with its ESCAPE character');
      parts.push(next);
      i++;
    } else if (c === '%') {
      if (parts[parts.length - 1] !== ANY_RUN) parts.push(ANY_RUN);
    } else parts.push(c === '_' ? ANY_ONE : c);
  }
  const text = Array.from(value);
  let t = 0;
  let p = 0;
  let runAt = -1; // the last % seen, and where in the text it currently ends
  let runEnd = 0;
  while (t < text.length) {
    const part = parts[p];
    if (part === ANY_RUN) {
      runAt = p++;
      runEnd = t;
    } else if (part !== undefined && (part === ANY_ONE || part === text[t])) {
      p++;
      t++;
    } else if (runAt >= 0) {
      p = runAt + 1;
      t = ++runEnd;
    } else return false;
  }
  while (parts[p] === ANY_RUN) p++;
  return p === parts.length;
}
