/**
 * Service Bus's SQL filter and rule action language: parse once (when the rule is added,
 * so a bad expression is refused there), evaluate per message.
 */
import { applyAction, checkProperties, matchesFilter, type SqlMessage } from './evaluate.js';
import { SqlError } from './lexer.js';
import { parseAction, parseFilter, type SqlNode, type SqlStatement } from './parser.js';

export { applyAction, matchesFilter, SqlError, type SqlMessage, type SqlNode, type SqlStatement };

/** Maximum length of an action's text (the client's `maximumSqlRuleActionStatementLength`). */
const MAX_ACTION_LENGTH = 1024;
/** Maximum length of a filter's text (the service's quota). */
const MAX_FILTER_LENGTH = 1024;

/**
 * Parses and checks a filter expression; throws {@link SqlError} saying what is wrong.
 *
 * @example
 * ```ts
 * const filter = compileFilter("color = 'blue' AND quantity > 10");
 * matchesFilter(filter, { application_properties: { color: 'blue', quantity: 12 } }); // true
 * ```
 */
export function compileFilter(expression: string): SqlNode {
  if (expression.length > MAX_FILTER_LENGTH) {
    throw new SqlError(`the filter is longer than ${MAX_FILTER_LENGTH} characters`);
  }
  const node = parseFilter(expression);
  checkProperties([node]);
  return node;
}

/**
 * Parses and checks a rule action (`SET x = expr; REMOVE y`); throws {@link SqlError}.
 *
 * @example
 * ```ts
 * applyAction(compileAction("SET priority = 'high'; REMOVE internal"), message);
 * ```
 */
export function compileAction(expression: string): SqlStatement[] {
  if (expression.length > MAX_ACTION_LENGTH) {
    throw new SqlError(`the action is longer than ${MAX_ACTION_LENGTH} characters`);
  }
  const statements = parseAction(expression);
  checkProperties(statements, true);
  return statements;
}
