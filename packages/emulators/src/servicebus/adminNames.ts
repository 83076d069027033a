// The service's rules for entity names, checked where the administration API creates an
// entity, so that a name the service would refuse does not work here only to fail in Azure.
import { CONDITIONS, ManagementError } from './model.js';

const ENTITY_NAME = /^[A-Za-z0-9._\-/]{1,260}$/;
const SHORT_NAME = /^[A-Za-z0-9._-]{1,50}$/;

/** A queue or topic name: at most 260 letters, digits, periods, hyphens, underscores, slashes. */
export function checkEntityName(name: string): void {
  if (!ENTITY_NAME.test(name)) {
    throw invalid(
      name,
      'a queue or topic name is 1 to 260 letters, digits, periods, hyphens, underscores and slashes',
    );
  }
}

/** A subscription name: at most 50 letters, digits, periods, hyphens and underscores. */
export function checkSubscriptionName(name: string): void {
  if (!SHORT_NAME.test(name)) {
    throw invalid(name, 'a subscription name is 1 to 50 letters, digits, periods, hyphens and underscores');
  }
}

/** A rule name: the same as a subscription's, and `$Default`, the rule every subscription starts with. */
export function checkRuleName(name: string): void {
  if (name !== '$Default' && !SHORT_NAME.test(name)) {
    throw invalid(name, 'a rule name is 1 to 50 letters, digits, periods, hyphens and underscores');
  }
}

function invalid(name: string, rule: string): ManagementError {
  const shown = name.length > 60 ? `${name.slice(0, 60)}… (${name.length} characters)` : name;
  return new ManagementError(400, CONDITIONS.argumentError, `The name '${shown}' is not valid: ${rule}.`);
}
