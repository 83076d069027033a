import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { typecheck } from './tsc.js';

const fixtures = join(dirname(fileURLToPath(import.meta.url)), 'fixtures');

describe('typed createConsumer (declaration merging from the adapter packages)', () => {
  it('compiles the fixture, each @ts-expect-error meeting its error', () => {
    const result = typecheck([join(fixtures, 'typedBroker.ts')]);
    expect(result.output).toBe('');
    expect(result.code).toBe(0);
  });

  it('reports the misspelled option by name once the expectation is taken away', () => {
    const source = readFileSync(join(fixtures, 'typedBroker.ts'), 'utf8').replace(
      /^\s*\/\/ @ts-expect-error `queu`.*\n/m,
      '\n',
    );
    const result = typecheck([{ name: 'typedBrokerNoExpect.ts', source }]);
    expect(result.code).not.toBe(0);
    expect(result.output).toMatch(
      /error TS2561: .*'queu' does not exist in type 'RabbitMqBrokerOptions.*Did you mean to write 'queue'\?/,
    );
  });

  it('keeps the loose BrokerConfig when no adapter types are imported', () => {
    const result = typecheck([join(fixtures, 'looseBroker.ts')]);
    expect(result.output).toBe('');
    expect(result.code).toBe(0);
  });
});
