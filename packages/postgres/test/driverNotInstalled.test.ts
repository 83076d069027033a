import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

// The store loads its driver package (pg, or @electric-sql/pglite for the embedded store)
// only when first used, so an application that uses one need not install the other. When
// the one it uses is missing, the first call says which package to install. Checked in a
// child process where Node cannot resolve that package (a resolve hook), on the built
// package as an application imports it.

const run = promisify(execFile);
const CHILD = fileURLToPath(new URL('./fixtures/missingDriver.mjs', import.meta.url));
const PACKAGE_DIR = fileURLToPath(new URL('..', import.meta.url));

async function firstCallWithout(pkg: string) {
  const { stdout } = await run(process.execPath, [CHILD, pkg], { cwd: PACKAGE_DIR });
  return JSON.parse(stdout.trim().split('\n').at(-1)!) as Record<string, unknown>;
}

describe('DriverNotInstalledError', () => {
  it.each([
    ['pg', 'a server store'],
    ['@electric-sql/pglite', 'the embedded store'],
  ])(
    'names %s when %s is used without it',
    async (pkg) => {
      expect(await firstCallWithout(pkg)).toEqual({
        name: 'DriverNotInstalledError',
        code: 'ADAPTER_NOT_INSTALLED',
        message: `@oncely/postgres needs the package ${pkg} for this store: run \`npm install ${pkg}\` in your application`,
        cause: 'ERR_MODULE_NOT_FOUND',
      });
    },
    30_000,
  );
});
