import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const tscBin = createRequire(import.meta.url).resolve('typescript/bin/tsc');

/** The settings the package READMEs tell users they need: strict, ES2022, NodeNext. */
export const USER_COMPILER_OPTIONS = {
  strict: true,
  target: 'ES2022',
  module: 'NodeNext',
  moduleResolution: 'NodeNext',
  lib: ['ES2023'],
  types: ['node'],
  noEmit: true,
  skipLibCheck: true,
};

export interface TscResult {
  code: number | null;
  output: string;
}

/**
 * Runs `tsc --noEmit` on one program made of `files` (absolute paths, or sources to
 * write, keyed by file name), resolved against the repository's node_modules, so
 * `@oncely/*` are the built packages (dist).
 */
export function typecheck(
  files: Array<string | { name: string; source: string }>,
  compilerOptions: Record<string, unknown> = {},
): TscResult {
  mkdirSync(join(here, '.tmp'), { recursive: true });
  const dir = mkdtempSync(join(here, '.tmp', 'program-'));
  try {
    const paths = files.map((file) => {
      if (typeof file === 'string') return relative(dir, file);
      writeFileSync(join(dir, file.name), file.source);
      return file.name;
    });
    writeFileSync(
      join(dir, 'tsconfig.json'),
      JSON.stringify({ compilerOptions: { ...USER_COMPILER_OPTIONS, ...compilerOptions }, files: paths }),
    );
    const result = spawnSync(
      process.execPath,
      [tscBin, '-p', join(dir, 'tsconfig.json'), '--pretty', 'false'],
      {
        encoding: 'utf8',
      },
    );
    return { code: result.status, output: `${result.stdout}${result.stderr}`.replaceAll(`${dir}/`, '') };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
