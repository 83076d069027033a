// Writes test/sequencer/durations.json (project:file -> milliseconds, rounded to seconds)
// from vitest's results cache after a full run (`npm test`), for the longest-first
// sequencer of vitest.config.ts. Run it on the machine CI runs on, after a green run.
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const root = join(import.meta.dirname, '..');
const cacheDir = join(root, 'node_modules', '.vite', 'vitest');
const durations = {};
for (const dir of readdirSync(cacheDir)) {
  let results;
  try {
    results = JSON.parse(readFileSync(join(cacheDir, dir, 'results.json'), 'utf8')).results;
  } catch {
    continue;
  }
  for (const [key, { duration }] of results) {
    if (duration > 0) durations[key] = Math.max(durations[key] ?? 0, Math.round(duration / 1000) * 1000);
  }
}
const sorted = Object.fromEntries(Object.entries(durations).sort(([a], [b]) => a.localeCompare(b)));
writeFileSync(join(root, 'test', 'sequencer', 'durations.json'), `${JSON.stringify(sorted, null, 2)}\n`);
console.log(`${Object.keys(sorted).length} files`);
