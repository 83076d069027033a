import { existsSync, readdirSync, readFileSync } from 'node:fs';
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
  for (const match of markdown.matchAll(
    /(?:<!-- snippet-context: (.*?) -->\n[ \t]*)?```ts\n([\s\S]*?)```/g,
  )) {
    const line = markdown.slice(0, match.index).split('\n').length;
    found.push({ line, source: `${match[1] ?? ''}\n${match[2]}\nexport {};\n` });
  }
  return found;
}

/**
 * Every markdown file a user reads: the READMEs (root, packages, examples), docs/ and the
 * packages' own docs/. A file without a ```ts block is simply not listed.
 */
function markdownFiles(): string[] {
  const files = ['README.md'];
  for (const dir of ['packages', 'examples']) {
    for (const name of readdirSync(join(root, dir))) {
      files.push(`${dir}/${name}/README.md`);
      const docs = join(root, dir, name, 'docs');
      if (existsSync(docs)) files.push(...readdirSync(docs).map((doc) => `${dir}/${name}/docs/${doc}`));
    }
  }
  files.push(...readdirSync(join(root, 'docs')).map((doc) => `docs/${doc}`));
  return files
    .filter((file) => file.endsWith('.md') && existsSync(join(root, file)))
    .filter((file) => snippets(readFileSync(join(root, file), 'utf8')).length > 0);
}

const FILES = markdownFiles();

it('covers every markdown file with TypeScript in it, and each block compiles under strict', () => {
  const programs = FILES.flatMap((file) =>
    snippets(readFileSync(join(root, file), 'utf8')).map((block) => ({
      // The file name says where a compiler error comes from: docs_outbox_md_line_13.mts
      name: `${file.replace(/[^A-Za-z0-9]/g, '_')}_line_${block.line}.mts`,
      source: block.source,
    })),
  );
  console.log(`${programs.length} ts blocks in ${FILES.length} markdown files`);
  expect(FILES).toContain('README.md');
  expect(FILES).toContain('docs/outbox.md');
  expect(programs.length).toBeGreaterThanOrEqual(50);
  // One tsc run over every block (a module each, as a user would paste it): one compiler
  // start instead of one a file.
  const result = typecheck(programs);
  expect(result.output).toBe('');
  expect(result.code).toBe(0);
}, 120_000);

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
