import { describe, expect, it } from 'vitest';
import { main } from '../src/index.js';

// Usage is checked before any database is opened: no DATABASE_URL here, so a command that
// got as far as the store would answer "no database" instead of naming the bad argument.
async function run(...argv: string[]): Promise<{ code: number; out: string; err: string }> {
  let out = '';
  let err = '';
  const code = await main(argv, {
    out: { write: (t: string) => (out += t) },
    err: { write: (t: string) => (err += t) },
    env: {},
  });
  return { code, out, err };
}

const COMMANDS = ['migrate', 'prune', 'stats', 'inspect', 'doctor', 'outbox'];

describe('oncely <command> --help', () => {
  for (const command of COMMANDS) {
    it(`${command}: prints its own usage and exits 0`, async () => {
      for (const argv of [
        [command, '--help'],
        [command, '-h'],
        ['help', command],
      ]) {
        const { code, out, err } = await run(...argv);
        expect({ argv, code, err }).toEqual({ argv, code: 0, err: '' });
        expect(out).toMatch(new RegExp(`^usage: oncely ${command}`));
        expect(out).toContain('--database-url URL');
        // Only this command's options, not the whole list.
        for (const other of COMMANDS.filter((c) => c !== command))
          expect(out).not.toMatch(new RegExp(`^  ${other}\\b`, 'm'));
        expect(out).toMatch(new RegExp(`^  ${command}\\b`, 'm'));
      }
    });
  }
});

describe('malformed arguments exit 2 with a message naming the argument', () => {
  const cases: Array<[string[], RegExp]> = [
    [['prune', '--older-than', 'banana'], /--older-than: 'banana' is not a duration/],
    [
      ['prune', '--older-than', '2d', '--batch-size', '0'],
      /--batch-size must be a positive integer, got '0'/,
    ],
    [['prune'], /--older-than is required/],
    [['doctor', '--retention', 'x'], /--retention: 'x' is not a duration/],
    [['stats', 'extra'], /unexpected argument 'extra'/],
    [['migrate', 'now'], /unexpected argument 'now'/],
    [['inspect', 'payments'], /needs CONSUMER and MESSAGE_ID/],
    [['inspect', 'payments', 'm-1', 'm-2'], /unexpected argument 'm-2'/],
    [['inspect', 'payments', ''], /oncely inspect: MESSAGE_ID must not be empty; got ''/],
    [['inspect', '', 'm-1'], /oncely inspect: CONSUMER must not be empty; got ''/],
    [['migrate', '--frobnicate'], /Unknown option '--frobnicate'/],
    [['frobnicate'], /unknown command 'frobnicate'/],
    // An empty ID or group selects nothing a broker or the outbox could hold: a usage error,
    // not a selection that reports "not found" (or, read as no selection, all of them).
    [['dlq', 'replay', 'payments', '--id', ''], /--id needs a message ID; got ''/],
    [['dlq', 'replay', 'payments', '--id', 'm-1', '--id', ''], /--id needs a message ID; got ''/],
    [['dlq', 'discard', 'payments', '--id', '', '--yes'], /--id needs a message ID; got ''/],
    [['dlq', 'replay', 'payments', '--group', ''], /--group needs a group or a reason; got ''/],
    [['outbox', '--retry', '--id', ''], /--id needs a row ID; got ''/],
    [['outbox', '--retry', ''], /--retry needs row IDs; got ''/],
    [['outbox', '--discard', '--yes', '--id', 'r-1', '--id', ''], /--id needs a row ID; got ''/],
    [['outbox', '--discard', '--yes', ''], /--discard needs row IDs; got ''/],
    [['outbox', '--retry', '--group', ''], /--group needs a group or a destination; got ''/],
  ];
  for (const [argv, message] of cases) {
    it(argv.join(' '), async () => {
      const { code, err } = await run(...argv);
      expect(code).toBe(2);
      expect(err).toMatch(message);
      expect(err).not.toMatch(/no database/);
    });
  }

  it('a well-formed command without a database says so, with exit 2', async () => {
    const { code, err } = await run('prune', '--older-than', '14d');
    expect(code).toBe(2);
    expect(err).toMatch(/no database: pass --database-url or set DATABASE_URL/);
  });
});
