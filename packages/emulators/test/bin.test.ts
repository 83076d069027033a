import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';

// `oncely-emulator` is bin/oncely-emulator.js, a checked-in file: npm links a workspace's
// bin at `npm ci`, before the build, and skips one whose file is missing (dist/cli.js was),
// so on a fresh clone `npx oncely-emulator` was "command not found".
const packageDir = fileURLToPath(new URL('..', import.meta.url));
const repoRoot = join(packageDir, '..', '..');
const bin = join(packageDir, 'bin', 'oncely-emulator.js');

function run(file: string, ...args: string[]) {
  return spawnSync(process.execPath, [file, ...args], { encoding: 'utf8', timeout: 120_000 });
}

describe('the oncely-emulator command', () => {
  it('is a file that exists before any build, as package.json says', async () => {
    const manifest = (await import('../package.json', { with: { type: 'json' } })).default;
    expect(manifest.bin['oncely-emulator']).toBe('./bin/oncely-emulator.js');
    expect(manifest.files).toContain('bin');
  });

  it('--help lists the emulators with exit 0; an unknown one exits 2 naming it', () => {
    const help = run(bin, '--help');
    expect(help.status).toBe(0);
    expect(help.stdout).toMatch(/^usage: oncely-emulator <pubsub\|servicebus>/);
    const sub = run(bin, 'servicebus', '--help');
    expect(sub.status).toBe(0);
    expect(sub.stdout).toMatch(/usage: oncely-emulator servicebus/);
    const unknown = run(bin, 'kinesis');
    expect(unknown.status).toBe(2);
    expect(unknown.stderr).toMatch(/unknown emulator 'kinesis'/);
  });

  describe('in a source checkout that was never built', () => {
    const scratch = mkdtempSync(join(tmpdir(), 'oncely-emulator-bin-'));
    afterAll(() => rmSync(scratch, { recursive: true, force: true }));

    it('builds itself once, then runs', () => {
      // The package's sources, without dist, laid out as in the repository.
      cpSync(join(repoRoot, 'tsconfig.base.json'), join(scratch, 'tsconfig.base.json'));
      const copy = join(scratch, 'packages', 'emulators');
      for (const part of ['bin', 'src', 'package.json', 'tsconfig.json'])
        cpSync(join(packageDir, part), join(copy, part), { recursive: true });
      symlinkSync(join(repoRoot, 'node_modules'), join(scratch, 'node_modules'), 'dir');
      expect(existsSync(join(copy, 'dist'))).toBe(false);

      const first = run(join(copy, 'bin', 'oncely-emulator.js'), '--help');
      expect(first.stderr).toContain('building @oncely/emulators');
      expect(first.status).toBe(0);
      expect(first.stdout).toMatch(/^usage: oncely-emulator/);
      expect(existsSync(join(copy, 'dist', 'cli.js'))).toBe(true);

      const second = run(join(copy, 'bin', 'oncely-emulator.js'), '--help');
      expect(second.stderr).not.toContain('building');
      expect(second.status).toBe(0);
    }, 180_000);
  });
});
