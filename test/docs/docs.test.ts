import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describeEnvironmentVariables } from '@oncely/core';
import { describe, expect, it } from 'vitest';
import { DOC, DOCS, renderDocument } from '../../scripts/config-docs.mjs';

const root = join(import.meta.dirname, '..', '..');

describe('docs/configuration.md', () => {
  it.each(DOCS)(
    '%s holds the table the code describes (node scripts/config-docs.mjs regenerates it)',
    (file) => {
      const current = readFileSync(file, 'utf8');
      expect(current).toBe(renderDocument(current, file));
    },
  );

  it('lists every ONCELY_ variable the config code of the core mentions', () => {
    const source = ['config.ts', 'loadConfig.ts']
      .map((file) => readFileSync(join(root, 'packages/core/src', file), 'utf8'))
      .join('\n');
    const mentioned = new Set(source.match(/\bONCELY_[A-Z0-9_]*[A-Z0-9]_?/g));
    const documented = new Set(describeEnvironmentVariables().map((v) => v.variable));
    const table = readFileSync(DOC, 'utf8');
    expect(mentioned.size).toBeGreaterThan(10);
    for (const variable of mentioned) {
      // Broker options (ONCELY_BROKER_QUEUE_URL, the prefix itself) are the <OPTION> row.
      const row =
        variable.startsWith('ONCELY_BROKER_') && variable !== 'ONCELY_BROKER_TYPE'
          ? 'ONCELY_BROKER_<OPTION>'
          : variable;
      expect(documented, `${variable} is read in the core's config code but not described`).toContain(row);
      expect(table, `${variable} is missing from docs/configuration.md`).toContain(`| \`${row}\` |`);
    }
  });
});

describe('package READMEs', () => {
  it('link absolutely, or to a file the package itself ships: a README is read without the repository around it', () => {
    const offenders: string[] = [];
    for (const name of readdirSync(join(root, 'packages'))) {
      const shipped: string[] =
        JSON.parse(readFileSync(join(root, 'packages', name, 'package.json'), 'utf8')).files ?? [];
      let text: string;
      try {
        text = readFileSync(join(root, 'packages', name, 'README.md'), 'utf8');
      } catch {
        offenders.push(`${name}: no README.md`);
        continue;
      }
      for (const [, target] of text.matchAll(/\]\(([^)\s]+)\)/g)) {
        if (/^(https?:|mailto:|#)/.test(target!)) continue;
        // A relative link works in the installed package (node_modules/@oncely/x/README.md)
        // when it points at a file the package publishes, such as the emulators' docs/.
        const path = target!.split('#')[0]!.replace(/^\.\//, '');
        const inside = !path.startsWith('..') && shipped.includes(path.split('/')[0]!);
        if (!inside || !existsSync(join(root, 'packages', name, path))) offenders.push(`${name}: ${target}`);
      }
    }
    expect(offenders).toEqual([]);
  });
});
