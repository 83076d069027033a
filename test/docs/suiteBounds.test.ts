import { readdirSync } from 'node:fs';
import { join, relative } from 'node:path';
import { expect, it } from 'vitest';
import type { TestSpecification } from 'vitest/node';
import LongestFirstSequencer from '../sequencer/longestFirst.js';

// Every vitest project bounds its tests and hooks for a busy machine. vitest's defaults
// (5 s a test, 10 s a hook) are measures of speed, not bounds for a hang: CI refused a
// landing when the packaging test's afterAll, deleting a scratch project with its
// node_modules, took over 10 s on a loaded runner while every test had passed. A project
// may set longer bounds; a test waits on observable state with its own deadline, so a
// long bound costs nothing on a healthy run and only delays a report of a real hang.
const MIN_TEST_MS = 30_000;
const MIN_HOOK_MS = 60_000;
const root = join(import.meta.dirname, '..', '..');

function projectConfigs(): string[] {
  const configs: string[] = [];
  for (const group of ['packages', 'test', 'examples']) {
    for (const entry of readdirSync(join(root, group), { withFileTypes: true })) {
      if (!entry.isDirectory()) continue;
      for (const file of readdirSync(join(root, group, entry.name))) {
        if (/^vitest(\.[a-z0-9-]+)?\.config\.m?ts$/.test(file))
          configs.push(join(root, group, entry.name, file));
      }
    }
  }
  return configs.sort();
}

it('every vitest project sets test and hook bounds a loaded 2-core runner keeps', async () => {
  const configs = projectConfigs();
  expect(configs.length).toBeGreaterThan(20);
  const tooTight: string[] = [];
  for (const path of configs) {
    const { test } = (await import(path)).default as { test: { testTimeout?: number; hookTimeout?: number } };
    const name = relative(root, path);
    if ((test.testTimeout ?? 5_000) < MIN_TEST_MS)
      tooTight.push(`${name}: testTimeout ${test.testTimeout ?? 'default 5 s'}`);
    if ((test.hookTimeout ?? 10_000) < MIN_HOOK_MS)
      tooTight.push(`${name}: hookTimeout ${test.hookTimeout ?? 'default 10 s'}`);
  }
  expect(tooTight).toEqual([]);
});

it('the sequencer starts the longest known files first, and files it does not know before them', async () => {
  const spec = (project: string, path: string) =>
    ({ project: { name: project }, moduleId: join(root, path) }) as unknown as TestSpecification;
  const files = [
    spec('docs', 'test/docs/docs.test.ts'),
    spec('chaos', 'test/chaos/chaos.test.ts'),
    spec('docs', 'test/docs/a-new-file.test.ts'),
    spec('rabbitmq', 'packages/rabbitmq/test/conformance.test.ts'),
  ];
  const sorted = await new LongestFirstSequencer({} as never).sort(files);
  expect(sorted.map((file) => file.moduleId.slice(root.length + 1))).toEqual([
    'test/docs/a-new-file.test.ts',
    'test/chaos/chaos.test.ts',
    'packages/rabbitmq/test/conformance.test.ts',
    'test/docs/docs.test.ts',
  ]);
});
