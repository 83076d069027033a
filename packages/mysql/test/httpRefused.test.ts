import { HttpIdempotency } from '@oncely/http';
import { expect, it } from 'vitest';
import { MySqlStore } from '../src/index.js';

// @oncely/http's SQL is PostgreSQL's (advisory locks, ON CONFLICT, RETURNING, jsonb): on a
// MySqlStore every request would fail at its first statement. It refuses the store up front.
it('@oncely/http refuses a MySqlStore with a clear error instead of failing every request', () => {
  const store = new MySqlStore({ url: 'mysql://root@127.0.0.1:3306/test' });
  expect(() => new HttpIdempotency({ store, scope: 'tests' })).toThrow(
    /store is a MySQL store: @oncely\/http works on the PostgreSQL store only/,
  );
});
