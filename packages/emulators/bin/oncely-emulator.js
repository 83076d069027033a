#!/usr/bin/env node
// The `oncely-emulator` command. A checked-in file rather than `dist/cli.js` itself: npm
// links a workspace's bin at `npm ci`, before anything is built, and skips a bin whose file
// does not exist yet, so `npx oncely-emulator` would not be found on a fresh clone. In a
// source checkout that was never built, this builds the package once (it imports no other
// Oncely package, so that is one `tsc -b`, a few seconds); a published package ships dist.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const packageDir = fileURLToPath(new URL('..', import.meta.url));
const cli = new URL('../dist/cli.js', import.meta.url);
if (!existsSync(fileURLToPath(cli))) {
  process.stderr.write('oncely-emulator: building @oncely/emulators (a source checkout, first run)...\n');
  const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
  const built = spawnSync(process.execPath, [tsc, '-b', packageDir], { stdio: 'inherit' });
  if (built.status !== 0) {
    process.stderr.write('oncely-emulator: the build failed; run `npm run build` at the repository root\n');
    process.exit(1);
  }
}
await import(cli.href);
