// Subscription filters (https://cloud.google.com/pubsub/docs/subscription-message-filter):
// on attributes only, `attributes.k = "v"`, `attributes.k != "v"`, `attributes:k` (has the
// key), `hasPrefix(attributes.k, "p")`, `NOT` (or `-`), `AND`, `OR` and parentheses. Applied
// when a message is published: a message that does not match never reaches the subscription.

import { invalidArgument } from './apiError.js';

export type AttributeFilter = (attributes: Record<string, string>) => boolean;

const MAX_FILTER_BYTES = 256;

type Token = { kind: 'word' | 'string' | 'op'; text: string };

function tokenize(source: string): Token[] {
  const tokens: Token[] = [];
  let i = 0;
  while (i < source.length) {
    const c = source[i]!;
    if (/\s/.test(c)) {
      i++;
    } else if (c === '"') {
      let text = '';
      i++;
      while (i < source.length && source[i] !== '"') {
        if (source[i] === '\\' && i + 1 < source.length) i++;
        text += source[i++];
      }
      if (i >= source.length) throw invalid(source, 'unterminated string');
      i++;
      tokens.push({ kind: 'string', text });
    } else if (source.startsWith('!=', i)) {
      tokens.push({ kind: 'op', text: '!=' });
      i += 2;
    } else if ('=():,-.'.includes(c)) {
      tokens.push({ kind: 'op', text: c });
      i++;
    } else {
      const word = /^[A-Za-z0-9_]+/.exec(source.slice(i))?.[0];
      if (!word) throw invalid(source, `unexpected "${c}"`);
      tokens.push({ kind: 'word', text: word });
      i += word.length;
    }
  }
  return tokens;
}

function invalid(source: string, why: string) {
  return invalidArgument(`Invalid filter expression "${source}": ${why}.`);
}

/** Compiles a filter; INVALID_ARGUMENT, as the service answers CreateSubscription, if it is not valid. */
export function compileFilter(source: string): AttributeFilter {
  if (Buffer.byteLength(source) > MAX_FILTER_BYTES) {
    throw invalidArgument(`The filter is longer than ${MAX_FILTER_BYTES} bytes.`);
  }
  const tokens = tokenize(source);
  let at = 0;
  const peek = () => tokens[at];
  const isOp = (text: string) => peek()?.kind === 'op' && peek()!.text === text;
  const isWord = (text: string) => peek()?.kind === 'word' && peek()!.text === text;
  const expect = (text: string) => {
    if (!isOp(text)) throw invalid(source, `expected "${text}"`);
    at++;
  };
  const key = (): string => {
    // `attributes` `.` or `:` comes before the key, so the caller has consumed it.
    const token = tokens[at++];
    if (!token || (token.kind !== 'word' && token.kind !== 'string')) throw invalid(source, 'expected a key');
    return token.text;
  };
  const value = (): string => {
    const token = tokens[at++];
    if (token?.kind !== 'string') throw invalid(source, 'expected a quoted value');
    return token.text;
  };
  const or = (): AttributeFilter => {
    const parts = [and()];
    while (isWord('OR')) {
      at++;
      parts.push(and());
    }
    return parts.length === 1 ? parts[0]! : (a) => parts.some((p) => p(a));
  };
  const and = (): AttributeFilter => {
    const parts = [unaryExpr()];
    while (isWord('AND')) {
      at++;
      parts.push(unaryExpr());
    }
    return parts.length === 1 ? parts[0]! : (a) => parts.every((p) => p(a));
  };
  const unaryExpr = (): AttributeFilter => {
    if (isWord('NOT') || isOp('-')) {
      at++;
      const inner = unaryExpr();
      return (a) => !inner(a);
    }
    return primary();
  };
  const primary = (): AttributeFilter => {
    if (isOp('(')) {
      at++;
      const inner = or();
      expect(')');
      return inner;
    }
    if (isWord('hasPrefix')) {
      at++;
      expect('(');
      if (!isWord('attributes')) throw invalid(source, 'hasPrefix takes an attribute');
      at++;
      expect('.');
      const k = key();
      expect(',');
      const prefix = value();
      expect(')');
      return (a) => Object.hasOwn(a, k) && a[k]!.startsWith(prefix);
    }
    if (!isWord('attributes')) throw invalid(source, 'expected attributes');
    at++;
    if (isOp(':')) {
      at++;
      const k = key();
      return (a) => Object.hasOwn(a, k);
    }
    expect('.');
    const k = key();
    if (isOp('=')) {
      at++;
      const v = value();
      return (a) => Object.hasOwn(a, k) && a[k] === v;
    }
    if (isOp('!=')) {
      at++;
      const v = value();
      return (a) => !(Object.hasOwn(a, k) && a[k] === v);
    }
    throw invalid(source, 'expected =, != after an attribute');
  };
  const filter = or();
  if (at !== tokens.length) throw invalid(source, `unexpected "${tokens[at]!.text}"`);
  return filter;
}
