import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { typecheck } from './tsc.js';

const root = join(import.meta.dirname, '..', '..');

/**
 * The ```ts blocks of a markdown file, each with the context an HTML comment right above
 * it declares (`<!-- snippet-context: declare const store: PostgresStore; -->`): what a
 * fragment takes from the surrounding prose.
 */
function snippets(markdown: string): Array<{ line: number; source: string }> {
  const found: Array<{ line: number; source: string }> = [];
  for (const match of markdown.matchAll(/(?:<!-- snippet-context: (.*?) -->\n)?```ts\n([\s\S]*?)```/g)) {
    const line = markdown.slice(0, match.index).split('\n').length;
    found.push({ line, source: `${match[1] ?? ''}\n${match[2]}\nexport {};\n` });
  }
  return found;
}

describe.each([
  'README.md',
  'packages/core/README.md',
  'packages/http/README.md',
  'packages/lambda/README.md',
  'packages/memory/README.md',
  'packages/mysql/README.md',
  'docs/production.md',
])('%s', (file) => {
  it('has ts snippets that compile under strict against the built packages', () => {
    const blocks = snippets(readFileSync(join(root, file), 'utf8'));
    expect(blocks.length).toBeGreaterThan(0);
    // One program per snippet: each is a module of its own, as a user would paste it.
    const result = typecheck(
      blocks.map((block) => ({ name: `snippet_line_${block.line}.mts`, source: block.source })),
    );
    expect(result.output).toBe('');
    expect(result.code).toBe(0);
  });
});

describe('the snippet check', () => {
  it('fails on the strict errors the old README snippet had', () => {
    const result = typecheck([
      {
        name: 'old.mts',
        source: `import { createConsumer } from '@oncely/core';
import { PostgresStore } from '@oncely/postgres';
const store = new PostgresStore({ connectionString: process.env.DATABASE_URL });
await createConsumer({
  name: 'payments',
  broker: { type: 'rabbitmq', url: 'amqp://localhost', queue: 'payments' },
  store,
  handler: async (message, ctx) => {
    await ctx.tx.query('SELECT $1', [message.body.orderId]);
  },
});
export {};
`,
      },
    ]);
    expect(result.code).not.toBe(0);
    expect(result.output).toMatch(
      /error TS2322: Type 'string \| undefined' is not assignable to type 'string'/,
    );
    expect(result.output).toMatch(/error TS18046: 'message.body' is of type 'unknown'/);
  });
});
