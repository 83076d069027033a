/**
 * The Idempotency-Key field as the draft defines it: an Item Structured Field whose value is
 * an sf-string (RFC 8941 / RFC 9651 §3.3.3), sent once. On node:http, Express 5 and
 * Fastify 5 with the real PostgreSQL.
 */
import type { PostgresStore } from '@oncely/postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseIdempotencyKey } from '../src/idempotencyKeyField.js';
import { HttpIdempotency } from '../src/index.js';
import type { Framework, RunningServer } from './support.js';
import { admin, openStore, postgresAvailable, rawRequest, startServer, uniqueSchema } from './support.js';

const hasPostgres = await postgresAvailable();
const frameworks: Framework[] = ['node', 'express', 'fastify'];

describe("parseIdempotencyKey (RFC 9651 sf-string, the draft's Item)", () => {
  const parse = (value: string | string[] | undefined, bareKeys = true) =>
    parseIdempotencyKey(value, { maxLength: 255, bareKeys });

  it.each([
    ['"abc"', 'abc'],
    ['"8e03978e-40d5-43e8-bc93-6894a57f9324"', '8e03978e-40d5-43e8-bc93-6894a57f9324'],
    ['"with space"', 'with space'],
    ['"a\\"b"', 'a"b'],
    ['"a\\\\b"', 'a\\b'],
    ['"~!#$%&\'()*+,-./:;<=>?@[]^_`{|}"', "~!#$%&'()*+,-./:;<=>?@[]^_`{|}"],
    ['"abc";v=1', 'abc'],
    ['"abc";a;b=?0;c=:aGk=:;d=-2.5;e=tok/en:x;f="x;y";g=@1700000000;h=%"caf%c3%a9"', 'abc'],
    ['"abc";  a=1', 'abc'],
    ['  "abc"  ', 'abc'],
    ['abc', 'abc'],
    ['8e03978e-40d5-43e8-bc93-6894a57f9324', '8e03978e-40d5-43e8-bc93-6894a57f9324'],
    ['K:9/x=y', 'K:9/x=y'],
  ])('accepts %s as the key %s', (value, key) => {
    expect(parse(value)).toEqual({ kind: 'ok', key });
  });

  it.each([
    ['the field sent twice, joined', '"k1", "k1"'],
    ['the field sent twice, as lines', ['"k1"', '"k1"']],
    ['a bare key sent twice', 'k1, k1'],
    ['an unterminated string', '"abc'],
    ['a space before the parameters', '"abc" ;a=1'],
    ['an empty parameter', '"abc";'],
    ['an upper-case parameter key', '"abc";A=1'],
    ['a parameter key starting with a digit', '"abc";1=1'],
    ['a bad parameter value', '"abc";a=?2'],
    ['an unterminated byte sequence parameter', '"abc";a=:aGk='],
    ['a decimal with four fractional digits', '"abc";a=1.2345'],
    ['a bad escape', '"a\\nb"'],
    ['a trailing backslash', '"abc\\'],
    ['a tab in the string', '"a\tb"'],
    ['a control character', '"a\u0001b"'],
    ['a non-ASCII character', '"caf\u00e9"'],
    ['an empty string', '""'],
    ['a key past maxKeyLength', `"${'x'.repeat(256)}"`],
    ['a bare key with a space', 'a b'],
    ['a bare key with a quote', 'a"b'],
    ['a bare key with a backslash', 'a\\b'],
    ['a bare key with a semicolon (a token with parameters)', 'abc;v=1'],
    ['a bare key with non-ASCII', 'caf\u00e9'],
    ['an empty field', ''],
  ])('refuses %s', (_, value) => {
    expect(parse(value as string | string[]).kind).toBe('malformed');
  });

  it('refuses any bare item but a String without bareKeys: a token, an integer, a byte sequence, a boolean, a date, a display string', () => {
    for (const value of ['abc', '42', '-1.5', ':aGk=:', '?1', '@1700000000', '%"abc"', '*abc']) {
      expect(parse(value, false)).toMatchObject({ kind: 'malformed' });
    }
    expect(parse('"abc";x', false)).toEqual({ kind: 'ok', key: 'abc' });
  });

  it('says the field is missing when it is', () => {
    expect(parse(undefined)).toEqual({ kind: 'missing' });
  });
});

describe.skipIf(!hasPostgres)('the Idempotency-Key field (real PostgreSQL)', () => {
  describe.each(frameworks)('%s', (framework) => {
    const schema = uniqueSchema(`http_key_${framework}`);
    let store: PostgresStore;
    let server: RunningServer;
    const keys: string[] = [];

    beforeAll(async () => {
      store = await openStore('postgres', schema);
      server = await startServer(
        framework,
        new HttpIdempotency({ store, scope: () => 'tests' }),
        async ({ tx, body }) => {
          await tx!.query(`INSERT INTO "${schema}".orders (id) VALUES ($1)`, [body!.id]);
          return { status: 201, body: { id: body!.id } };
        },
      );
    });
    afterAll(async () => {
      await server?.close();
      await store?.close();
      await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    });

    /** POSTs an order with the given field value(s); an array is sent as that many field lines. */
    const send = (id: string, key: string | string[]) =>
      rawRequest(server.url, {
        headers: { 'content-type': 'application/json', 'idempotency-key': key },
        body: JSON.stringify({ id }),
      });
    const storedKeys = async () =>
      (
        await admin.query<{ idempotency_key: string }>(
          `SELECT idempotency_key FROM "${schema}".http_idempotency_keys ORDER BY created_at`,
        )
      ).rows.map((row) => row.idempotency_key);

    it('answers 400 to the field sent twice (Node joins the lines as "k1, k1"), without running the handler', async () => {
      for (const lines of [
        ['k1', 'k1'],
        ['"k2"', '"k2"'],
        ['"k3"', 'k3'],
      ]) {
        const outcome = await send(`twice-${lines[0]}`, lines);
        expect(outcome.kind === 'response' && outcome.status).toBe(400);
        expect(outcome.kind === 'response' && outcome.headers['content-type']).toBe(
          'application/problem+json',
        );
      }
      const { rows } = await admin.query(`SELECT id FROM "${schema}".orders WHERE id LIKE 'twice-%'`);
      expect(rows).toEqual([]);
    });

    it('accepts an sf-string with parameters (ignored: the draft defines none) as the same key', async () => {
      const first = await send('params', '"p-1";v=1');
      const again = await send('params', '"p-1"');
      const spaced = await send('params', '"p-1"; a; b=?0; c=:aGk=:; d=2.5; e=tok/en; f="x"');
      expect([first, again, spaced].map((o) => o.kind === 'response' && o.status)).toEqual([201, 201, 201]);
      expect(again.kind === 'response' && again.headers['idempotent-replayed']).toBe('true');
      expect(spaced.kind === 'response' && spaced.headers['idempotent-replayed']).toBe('true');
      keys.push('p-1');
    });

    it('decodes escaped quotes and backslashes: the key is the decoded string', async () => {
      const first = await send('escaped', '"a\\"b\\\\c"');
      expect(first.kind === 'response' && first.status).toBe(201);
      expect(await storedKeys()).toContain('a"b\\c');
    });

    it('keeps accepting the bare form most clients send, as the same key as its quoted form', async () => {
      const bare = await send('bare', '8e03978e-40d5-43e8-bc93-6894a57f9324');
      const quoted = await send('bare', '"8e03978e-40d5-43e8-bc93-6894a57f9324"');
      expect([bare, quoted].map((o) => o.kind === 'response' && o.status)).toEqual([201, 201]);
      expect(quoted.kind === 'response' && quoted.headers['idempotent-replayed']).toBe('true');
    });

    it.each([
      ['an unterminated string', '"abc'],
      ['text after the string', '"abc" x'],
      ['a list of two strings', '"a", "b"'],
      ['an empty parameter', '"abc";'],
      ['an upper-case parameter key', '"abc";V=1'],
      ['a bad escape', '"a\\nb"'],
      ['a control character', '"a\tb"'],
      ['a non-ASCII character', '"caf\u00e9"'],
      ['an empty string', '""'],
      ['a bare key with a space', 'a b'],
      ['a bare key with a quote', 'a"b'],
      ['a bare key with a comma', 'a,b'],
      ['a bare key with a semicolon', 'a;b'],
      ['a key longer than maxKeyLength', `"${'x'.repeat(256)}"`],
    ])('answers 400 to %s', async (_, value) => {
      const outcome = await send('invalid', value);
      expect(outcome.kind === 'response' && outcome.status).toBe(400);
      expect(outcome.kind === 'response' && outcome.headers['content-type']).toBe('application/problem+json');
    });
  });

  describe("bareKeys: false (the draft's grammar only)", () => {
    const schema = uniqueSchema('http_key_strict');
    let store: PostgresStore;
    let server: RunningServer;
    beforeAll(async () => {
      store = await openStore('postgres', schema);
      server = await startServer(
        'node',
        new HttpIdempotency({ store, scope: () => 'tests', bareKeys: false }),
        async () => ({ status: 201, body: {} }),
      );
    });
    afterAll(async () => {
      await server?.close();
      await store?.close();
      await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    });

    it.each([
      ['a bare token', 'abc', 400],
      ['a bare UUID', '8e03978e-40d5-43e8-bc93-6894a57f9324', 400],
      ['an integer', '42', 400],
      ['a byte sequence', ':aGk=:', 400],
      ['a boolean', '?1', 400],
      ['an sf-string', '"abc"', 201],
      ['an sf-string with parameters', '"abd";x=1', 201],
    ])('%s (%s) answers %i', async (_, value, status) => {
      const outcome = await rawRequest(server.url, {
        headers: { 'content-type': 'application/json', 'idempotency-key': value },
        body: '{}',
      });
      expect(outcome.kind === 'response' && outcome.status).toBe(status);
    });
  });
});
