/**
 * Parser of Service Bus's SQL filter and rule action grammar (learn.microsoft.com,
 * "Subscription Rule SQL Filter Syntax" and "Subscription Rule SQL Action Syntax"):
 *
 *   predicate  := NOT predicate | predicate AND predicate | predicate OR predicate
 *               | expression { = | <> | != | > | >= | < | <= } expression
 *               | property IS [NOT] NULL | expression [NOT] IN ( expression, ... )
 *               | expression [NOT] LIKE pattern [ESCAPE escape_char]
 *               | EXISTS ( property ) | ( predicate )
 *   expression := constant | function | property | expression { + - * / % } expression
 *               | { + | - } expression | ( expression )
 *   property   := [ sys. | user. ] name
 *   action     := { SET property = expression | REMOVE property } [; ...]
 *
 * Keywords are case-insensitive. Precedence, loosest first: OR, AND, NOT, the predicates,
 * + and -, * / and %, unary signs.
 */
import { SqlError, type Token, tokenize } from './lexer.js';

export type SqlValue = string | number | boolean | null;

export interface PropertyRef {
  kind: 'property';
  scope: 'sys' | 'user';
  name: string;
  at: number;
}

export type SqlNode =
  | { kind: 'constant'; value: SqlValue }
  | PropertyRef
  | { kind: 'newid' }
  /** `property(name)`: the user or `sys.`-prefixed property a string expression names. */
  | { kind: 'propertyOf'; name: SqlNode }
  | { kind: 'negate'; operand: SqlNode }
  | { kind: 'not'; operand: SqlNode }
  | { kind: 'arithmetic'; op: '+' | '-' | '*' | '/' | '%'; left: SqlNode; right: SqlNode }
  | { kind: 'compare'; op: '=' | '<>' | '<' | '>' | '<=' | '>='; left: SqlNode; right: SqlNode }
  | { kind: 'logical'; op: 'and' | 'or'; left: SqlNode; right: SqlNode }
  | { kind: 'in'; negated: boolean; operand: SqlNode; list: SqlNode[] }
  | { kind: 'like'; negated: boolean; operand: SqlNode; pattern: SqlNode; escape?: SqlNode }
  | { kind: 'isNull'; negated: boolean; operand: SqlNode }
  | { kind: 'exists'; property: PropertyRef };

export type SqlStatement =
  | { kind: 'set'; property: PropertyRef; value: SqlNode }
  | { kind: 'remove'; property: PropertyRef };

const PREDICATES = new Set(['compare', 'logical', 'not', 'in', 'like', 'isNull', 'exists']);

/** Parses a filter; it must be a condition (`color = 'blue'`, not `color`). */
export function parseFilter(text: string): SqlNode {
  const parser = new Parser(text);
  const node = parser.expression();
  parser.expectEnd();
  if (!isCondition(node))
    throw new SqlError(
      'the filter is not a condition (a comparison, IN, LIKE, IS NULL, EXISTS, TRUE or FALSE)',
    );
  return node;
}

/** Parses a rule action: `SET` and `REMOVE` statements separated by `;`. */
export function parseAction(text: string): SqlStatement[] {
  const parser = new Parser(text);
  const statements: SqlStatement[] = [];
  while (!parser.atEnd()) {
    statements.push(parser.statement());
    if (!parser.atEnd()) parser.expectSymbol(';');
    while (parser.acceptSymbol(';'));
  }
  if (statements.length === 0) throw new SqlError('the action has no SET or REMOVE statement');
  return statements;
}

/**
 * AND, OR and NOT take predicates (the grammar's `<predicate> AND <predicate>`): a bare
 * value there (`a = 1 AND color`) would be unknown for every message, a rule that never
 * matches, so it is refused when the rule is added, as a bare top-level value is.
 */
function operand(node: SqlNode, keyword: string, at: number): SqlNode {
  if (!isCondition(node)) {
    throw new SqlError(
      `the operand of ${keyword} is not a condition (a comparison, IN, LIKE, IS NULL, EXISTS, TRUE or FALSE)`,
      at,
    );
  }
  return node;
}

function isCondition(node: SqlNode): boolean {
  if (node.kind === 'constant') return typeof node.value === 'boolean';
  return PREDICATES.has(node.kind);
}

class Parser {
  private readonly tokens: Token[];
  private index = 0;

  constructor(text: string) {
    if (text.trim() === '') throw new SqlError('the expression is empty');
    this.tokens = tokenize(text);
  }

  atEnd(): boolean {
    return this.peek().kind === 'end';
  }

  expectEnd(): void {
    const token = this.peek();
    if (token.kind !== 'end') throw new SqlError(`unexpected ${describe(token)}`, token.at);
  }

  statement(): SqlStatement {
    const token = this.peek();
    if (this.acceptKeyword('set')) {
      const property = this.property();
      this.expectSymbol('=');
      return { kind: 'set', property, value: this.expression() };
    }
    if (this.acceptKeyword('remove')) return { kind: 'remove', property: this.property() };
    throw new SqlError(`expected SET or REMOVE, found ${describe(token)}`, token.at);
  }

  expression(): SqlNode {
    return this.or();
  }

  private or(): SqlNode {
    let at = this.peek().at;
    let left = this.and();
    while (this.acceptKeyword('or')) {
      const rightAt = this.peek().at;
      const right = this.and();
      left = {
        kind: 'logical',
        op: 'or',
        left: operand(left, 'OR', at),
        right: operand(right, 'OR', rightAt),
      };
      at = rightAt;
    }
    return left;
  }

  private and(): SqlNode {
    let at = this.peek().at;
    let left = this.not();
    while (this.acceptKeyword('and')) {
      const rightAt = this.peek().at;
      const right = this.not();
      left = {
        kind: 'logical',
        op: 'and',
        left: operand(left, 'AND', at),
        right: operand(right, 'AND', rightAt),
      };
      at = rightAt;
    }
    return left;
  }

  private not(): SqlNode {
    if (this.acceptKeyword('not')) {
      const at = this.peek().at;
      return { kind: 'not', operand: operand(this.not(), 'NOT', at) };
    }
    return this.predicate();
  }

  private predicate(): SqlNode {
    const exists = this.peek();
    if (this.isKeyword(exists, 'exists')) {
      this.index++;
      this.expectSymbol('(');
      const property = this.property();
      this.expectSymbol(')');
      return { kind: 'exists', property };
    }
    const left = this.additive();
    const token = this.peek();
    if (token.kind === 'symbol' && ['=', '<>', '!=', '<', '>', '<=', '>='].includes(token.value)) {
      this.index++;
      const op = (token.value === '!=' ? '<>' : token.value) as '=' | '<>' | '<' | '>' | '<=' | '>=';
      return { kind: 'compare', op, left, right: this.additive() };
    }
    if (this.acceptKeyword('is')) {
      const negated = this.acceptKeyword('not');
      this.expectKeyword('null');
      if (left.kind !== 'property') throw new SqlError('IS NULL applies to a property', token.at);
      return { kind: 'isNull', negated, operand: left };
    }
    const negated = this.acceptKeyword('not');
    if (this.acceptKeyword('in')) {
      this.expectSymbol('(');
      const list = [this.additive()];
      while (this.acceptSymbol(',')) list.push(this.additive());
      this.expectSymbol(')');
      return { kind: 'in', negated, operand: left, list };
    }
    if (this.acceptKeyword('like')) {
      const pattern = this.additive();
      const escapeChar = this.acceptKeyword('escape') ? this.additive() : undefined;
      return { kind: 'like', negated, operand: left, pattern, escape: escapeChar };
    }
    if (negated)
      throw new SqlError(`expected IN or LIKE after NOT, found ${describe(this.peek())}`, this.peek().at);
    return left;
  }

  private additive(): SqlNode {
    let left = this.multiplicative();
    for (;;) {
      const token = this.peek();
      if (token.kind !== 'symbol' || (token.value !== '+' && token.value !== '-')) return left;
      this.index++;
      left = { kind: 'arithmetic', op: token.value, left, right: this.multiplicative() };
    }
  }

  private multiplicative(): SqlNode {
    let left = this.unary();
    for (;;) {
      const token = this.peek();
      if (token.kind !== 'symbol' || !['*', '/', '%'].includes(token.value)) return left;
      this.index++;
      left = { kind: 'arithmetic', op: token.value as '*' | '/' | '%', left, right: this.unary() };
    }
  }

  private unary(): SqlNode {
    if (this.acceptSymbol('-')) return { kind: 'negate', operand: this.unary() };
    if (this.acceptSymbol('+')) return this.unary();
    return this.primary();
  }

  private primary(): SqlNode {
    const token = this.peek();
    if (token.kind === 'number') {
      this.index++;
      return { kind: 'constant', value: token.value };
    }
    if (token.kind === 'string') {
      this.index++;
      return { kind: 'constant', value: token.value };
    }
    if (token.kind === 'symbol' && token.value === '(') {
      this.index++;
      const inner = this.expression();
      this.expectSymbol(')');
      return inner;
    }
    if (token.kind === 'identifier') {
      if (!token.quoted) {
        const word = token.value.toLowerCase();
        if (word === 'true' || word === 'false') {
          this.index++;
          return { kind: 'constant', value: word === 'true' };
        }
        if (word === 'null') {
          this.index++;
          return { kind: 'constant', value: null };
        }
        const next = this.tokens[this.index + 1];
        if (next?.kind === 'symbol' && next.value === '(') return this.call(word, token);
        if (KEYWORDS.has(word))
          throw new SqlError(`unexpected keyword ${token.value.toUpperCase()}`, token.at);
      }
      return this.property();
    }
    throw new SqlError(`expected a value, found ${describe(token)}`, token.at);
  }

  private call(name: string, token: Token): SqlNode {
    this.index += 2;
    if (name === 'newid') {
      this.expectSymbol(')');
      return { kind: 'newid' };
    }
    if (name === 'property') {
      const inner = this.additive();
      this.expectSymbol(')');
      return { kind: 'propertyOf', name: inner };
    }
    throw new SqlError(
      `unknown function ${name}() (newid() and property() are the functions there are)`,
      token.at,
    );
  }

  /** `[sys.|user.]name`, with any identifier form for either part. */
  private property(): PropertyRef {
    const first = this.peek();
    if (first.kind !== 'identifier')
      throw new SqlError(`expected a property name, found ${describe(first)}`, first.at);
    this.index++;
    if (!first.quoted && KEYWORDS.has(first.value.toLowerCase())) {
      throw new SqlError(`unexpected keyword ${first.value.toUpperCase()}`, first.at);
    }
    if (this.acceptSymbol('.')) {
      const scope = first.value.toLowerCase();
      if (scope !== 'sys' && scope !== 'user') {
        throw new SqlError(`unknown scope '${first.value}' (sys or user)`, first.at);
      }
      const name = this.peek();
      if (name.kind !== 'identifier')
        throw new SqlError(`expected a property name, found ${describe(name)}`, name.at);
      this.index++;
      return { kind: 'property', scope, name: name.value, at: first.at };
    }
    return { kind: 'property', scope: 'user', name: first.value, at: first.at };
  }

  private peek(): Token {
    return this.tokens[this.index]!;
  }

  private isKeyword(token: Token, word: string): boolean {
    return token.kind === 'identifier' && !token.quoted && token.value.toLowerCase() === word;
  }

  private acceptKeyword(word: string): boolean {
    if (!this.isKeyword(this.peek(), word)) return false;
    this.index++;
    return true;
  }

  private expectKeyword(word: string): void {
    const token = this.peek();
    if (!this.acceptKeyword(word))
      throw new SqlError(`expected ${word.toUpperCase()}, found ${describe(token)}`, token.at);
  }

  acceptSymbol(symbol: string): boolean {
    const token = this.peek();
    if (token.kind !== 'symbol' || token.value !== symbol) return false;
    this.index++;
    return true;
  }

  expectSymbol(symbol: string): void {
    const token = this.peek();
    if (!this.acceptSymbol(symbol))
      throw new SqlError(`expected '${symbol}', found ${describe(token)}`, token.at);
  }
}

const KEYWORDS = new Set([
  'and',
  'or',
  'not',
  'in',
  'like',
  'escape',
  'is',
  'null',
  'exists',
  'set',
  'remove',
  'true',
  'false',
]);

function describe(token: Token): string {
  switch (token.kind) {
    case 'end':
      return 'the end of the expression';
    case 'string':
      return `'${token.value}'`;
    default:
      return `'${token.value}'`;
  }
}
