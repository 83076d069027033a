/**
 * Tokens of Service Bus's SQL filter and rule action language (a SQL-92 subset): numbers,
 * 'strings' ('' escapes a quote), identifiers (regular, [delimited] with ]] escaping a
 * bracket, or "quoted" with "" escaping a quote) and operators.
 */

export type Token =
  | { kind: 'number'; value: number; integer: boolean; at: number }
  | { kind: 'string'; value: string; at: number }
  /** `quoted` identifiers are never keywords. */
  | { kind: 'identifier'; value: string; quoted: boolean; at: number }
  | { kind: 'symbol'; value: string; at: number }
  | { kind: 'end'; at: number };

/** A SQL expression that cannot be parsed or evaluated; `at` is the offending character. */
export class SqlError extends Error {
  constructor(
    message: string,
    readonly at?: number,
  ) {
    super(at === undefined ? message : `${message} (at character ${at + 1})`);
  }
}

const SYMBOLS = ['<>', '!=', '<=', '>=', '=', '<', '>', '(', ')', ',', '.', ';', '+', '-', '*', '/', '%'];

/** Splits an expression into tokens, ending with an `end` token. */
export function tokenize(text: string): Token[] {
  const tokens: Token[] = [];
  let i = 0;
  while (i < text.length) {
    const c = text[i]!;
    if (/\s/.test(c)) {
      i++;
      continue;
    }
    const start = i;
    if (/[0-9]/.test(c) || (c === '.' && /[0-9]/.test(text[i + 1] ?? ''))) {
      const match = /^(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?/.exec(text.slice(i))!;
      const raw = match[0];
      tokens.push({ kind: 'number', value: Number(raw), integer: /^\d+$/.test(raw), at: start });
      i += raw.length;
      continue;
    }
    if (c === "'") {
      const [value, next] = readQuoted(text, i, "'", 'string');
      tokens.push({ kind: 'string', value, at: start });
      i = next;
      continue;
    }
    if (c === '"') {
      const [value, next] = readQuoted(text, i, '"', 'quoted identifier');
      tokens.push({ kind: 'identifier', value, quoted: true, at: start });
      i = next;
      continue;
    }
    if (c === '[') {
      const [value, next] = readQuoted(text, i, ']', 'delimited identifier');
      tokens.push({ kind: 'identifier', value, quoted: true, at: start });
      i = next;
      continue;
    }
    // A regular identifier starts with a (Unicode) letter, as on the service
    // ([[:IsLetter:]][_[:IsLetter:][:IsDigit:]]*): `café`, `größe`, `数量`.
    const identifier = /^[\p{L}_$@#][\p{L}\p{Nd}_$@#]*/u.exec(text.slice(i));
    if (identifier) {
      const raw = identifier[0];
      // `@name` is a parameter (SqlRuleFilter/SqlRuleAction Parameters). The rule manager
      // does not even send parameters over AMQP; read as a property it would be unknown, so
      // the rule would silently never match (or SET null). Refused instead.
      if (raw.startsWith('@')) {
        throw new SqlError(
          `${raw} is a SQL parameter; parameters are not emulated (write the value into the expression)`,
          start,
        );
      }
      tokens.push({ kind: 'identifier', value: raw, quoted: false, at: start });
      i += raw.length;
      continue;
    }
    const symbol = SYMBOLS.find((s) => text.startsWith(s, i));
    if (!symbol) throw new SqlError(`unexpected character '${c}'`, i);
    tokens.push({ kind: 'symbol', value: symbol, at: start });
    i += symbol.length;
  }
  tokens.push({ kind: 'end', at: text.length });
  return tokens;
}

/** Reads from an opening quote (or `[`) to its closing one; a doubled closing character escapes it. */
function readQuoted(text: string, start: number, close: string, what: string): [string, number] {
  let value = '';
  let i = start + 1;
  for (;;) {
    if (i >= text.length) throw new SqlError(`unterminated ${what}`, start);
    const c = text[i]!;
    if (c === close) {
      if (text[i + 1] === close) {
        value += close;
        i += 2;
        continue;
      }
      return [value, i + 1];
    }
    value += c;
    i++;
  }
}
