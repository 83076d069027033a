import { readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

// vitest's default order on a fresh clone (CI has no results cache) is project by project in
// name order, larger files first: the conformance files are small (they call the testkit)
// and among the longest, so the 'rabbitmq', 'readmes' and 'sqs' ones ran last and the run
// ended with a few of them side by side and the other workers idle. Longest first, from the
// file durations of a measured run (test/sequencer/durations.json, written by
// `node scripts/test-durations.mjs` after a full run): the long files start at once and the
// short ones fill the workers at the end. Files the table does not know run first, since a
// new file may be long. Order only: the files stay independent of each other. It takes the
// place of vitest's own order, so `--sequence.shuffle` does not shuffle files with it.
const root = join(import.meta.dirname, '..', '..');
const durations: Record<string, number> = JSON.parse(
  readFileSync(join(import.meta.dirname, 'durations.json'), 'utf8'),
);

export function durationKey(projectName: string, moduleId: string): string {
  return `${projectName}:${relative(root, moduleId)}`;
}

export default class LongestFirstSequencer extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const estimate = (file: TestSpecification) =>
      durations[durationKey(file.project.name, file.moduleId)] ?? Number.MAX_SAFE_INTEGER;
    return [...files].sort((a, b) => estimate(b) - estimate(a));
  }
}
