// The SQL filter and action language on its own (rules.test.ts drives it through the real
// client): three-valued logic, LIKE, literals, identifiers, and the errors' wording.
import { describe, expect, it } from 'vitest';
import {
  applyAction,
  compileAction,
  compileFilter,
  matchesFilter,
  type SqlMessage,
} from '../../dist/servicebus/sql/index.js';

const message: SqlMessage = {
  message_id: 'id-1',
  subject: 'order',
  to: 'warehouse',
  message_annotations: { 'x-opt-partition-key': 'p-1' },
  application_properties: { color: 'blue', quantity: 12, price: 2.5, vip: false, note: null, 'my prop': 'x' },
};

const matches = (sql: string, m: SqlMessage = message) => matchesFilter(compileFilter(sql), m);

describe('SQL filters', () => {
  it.each([
    ["color = 'blue'", true],
    ["COLOR = 'blue'", true], // a user property by case-insensitive name
    ["color = 'Blue'", false], // string comparison is case-sensitive
    ['quantity >= 12 AND quantity < 13', true],
    ['quantity * price = 30', true],
    ['-quantity + 2 = -10', true],
    ['quantity / 4 = 3 AND quantity % 5 = 2', true],
    ["missing = 'x'", false], // unknown
    ["NOT missing = 'x'", false], // NOT unknown is unknown
    ["missing = 'x' OR color = 'blue'", true],
    ["missing = 'x' AND color = 'red'", false],
    ['missing IS NULL AND note IS NULL AND color IS NOT NULL', true],
    ['EXISTS(note) AND NOT EXISTS(missing) AND EXISTS(sys.Label)', true],
    ["color NOT IN ('red', 'green')", true],
    ["missing NOT IN ('red')", false],
    ["sys.Label LIKE 'or%' AND sys.To LIKE '_arehouse'", true],
    ["sys.MessageId LIKE 'id!-%' ESCAPE '!'", true],
    ["color LIKE 'BL%'", false],
    ['vip = FALSE', true],
    ["[my prop] = 'x' AND \"my prop\" = 'x'", true],
    ["quantity = '12'", false], // no conversion between strings and numbers
    ['1.5e1 = 15 AND .5 = 0.5', true],
    ["'it''s' = 'it''s'", true],
    ["property('color') = 'blue' AND property('sys.Label') = 'order'", true],
    ['quantity / 0 = 1', 'error'],
    ["newid() <> newid() AND newid() LIKE '%-%-%-%-%'", true],
    ["sys.PartitionKey = 'p-1' AND sys.ScheduledEnqueueTimeUtc IS NULL", true],
  ])('%s → %s', (sql, expected) => {
    if (expected === 'error') expect(() => matches(sql)).toThrow(/division by zero/);
    else expect(matches(sql)).toBe(expected);
  });

  it.each([
    ["color = = 'x'", "expected a value, found '=' (at character 9)"],
    ["color = 'x", 'unterminated string (at character 9)'],
    ['color', 'not a condition'],
    ['sys.Nope = 1', 'sys.Nope is not a system property'],
    ['other.x = 1', "unknown scope 'other'"],
    ["color IS 'x'", 'expected NULL'],
    ['now() = 1', 'unknown function now()'],
    ['(a = 1', "expected ')'"],
    ['a = 1 b', "unexpected 'b'"],
    ['', 'the expression is empty'],
  ])('refuses %j: %s', (sql, message) => {
    expect(() => compileFilter(sql)).toThrow(message);
  });
});

describe('SQL actions', () => {
  it('SET and REMOVE user and system properties, in order, each seeing the previous', () => {
    const copy: SqlMessage = structuredClone(message);
    applyAction(
      compileAction(
        "SET total = quantity * price; SET doubled = total * 2; REMOVE color; SET sys.Label = 'big-' + sys.Label; REMOVE sys.To;",
      ),
      copy,
    );
    expect(copy.application_properties).toMatchObject({ total: 30, doubled: 60 });
    expect(copy.application_properties).not.toHaveProperty('color');
    expect(copy.subject).toBe('big-order');
    expect(copy.to).toBeUndefined();
    expect(message.application_properties?.color).toBe('blue');
  });

  it.each([
    ['SET x = 1 SET y = 2', "expected ';', found 'SET'"],
    ['DROP x', 'expected SET or REMOVE'],
    ['SET sys.TimeToLive = 1', 'sys.TimeToLive cannot be set or removed'],
    [';', "expected SET or REMOVE, found ';'"],
  ])('refuses %j: %s', (sql, message) => {
    expect(() => compileAction(sql)).toThrow(message);
  });
});
