#!/usr/bin/env node
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

// In a clone of the Oncely repository after `npm ci` (nothing built yet), build this package
// and the two it imports (core, postgres) once; a published package ships dist.
const entry = new URL('../dist/index.js', import.meta.url);
if (!existsSync(fileURLToPath(entry))) {
  process.stderr.write('oncely: building @oncely/cli (a source checkout, first run)...\n');
  const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
  const packageDir = fileURLToPath(new URL('..', import.meta.url));
  const built = spawnSync(process.execPath, [tsc, '-b', packageDir], { stdio: 'inherit' });
  if (built.status !== 0) {
    process.stderr.write('oncely: the build failed; run `npm run build` at the repository root\n');
    process.exit(1);
  }
}
const { main } = await import(entry.href);
process.exitCode = await main(process.argv.slice(2), {
  out: process.stdout,
  err: process.stderr,
  env: process.env,
});
