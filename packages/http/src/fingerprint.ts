import { createHash } from 'node:crypto';

/**
 * A stable text for a parsed body: object keys sorted, so `{"a":1,"b":2}` and
 * `{"b":2,"a":1}` are the same payload. Buffers and strings are taken byte for byte.
 *
 * @example
 * ```ts
 * canonicalBody({ b: 2, a: 1 }).toString(); // '{"a":1,"b":2}'
 * ```
 */
export function canonicalBody(body: unknown): Buffer {
  if (body === undefined || body === null) return Buffer.alloc(0);
  if (Buffer.isBuffer(body)) return body;
  if (body instanceof Uint8Array) return Buffer.from(body);
  if (typeof body === 'string') return Buffer.from(body, 'utf8');
  return Buffer.from(JSON.stringify(sortKeys(body)) ?? '', 'utf8');
}

function sortKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sortKeys);
  if (value === null || typeof value !== 'object') return value;
  if (Buffer.isBuffer(value) || value instanceof Date) return value;
  const sorted: Record<string, unknown> = {};
  for (const key of Object.keys(value).sort())
    sorted[key] = sortKeys((value as Record<string, unknown>)[key]);
  return sorted;
}

/**
 * The default request fingerprint: SHA-256 over method, path, query string and the
 * canonical body. The query's parameters are sorted by name (a stable sort: the values of
 * a repeated name keep their order), so `?a=1&b=2` and `?b=2&a=1` are the same request;
 * `includeQuery: false` leaves it out. Parts are length-prefixed so no two different
 * requests concatenate to the same bytes; a request without a query string hashes exactly
 * as it did before the query was part of the fingerprint.
 *
 * @example
 * ```ts
 * requestFingerprint({ method: 'POST', url: '/payments?x=1', body: { amount: 40 } });
 * ```
 */
export function requestFingerprint(
  request: { method: string; url: string; body: unknown },
  options: { includeQuery?: boolean } = {},
): string {
  const at = request.url.indexOf('?');
  const path = at === -1 ? request.url : request.url.slice(0, at);
  const query = at === -1 || options.includeQuery === false ? '' : canonicalQuery(request.url.slice(at + 1));
  const hash = createHash('sha256');
  const parts = [Buffer.from(request.method.toUpperCase()), Buffer.from(path), canonicalBody(request.body)];
  if (query !== '') parts.push(Buffer.from(query));
  for (const part of parts) {
    hash.update(`${part.length}:`);
    hash.update(part);
  }
  return `sha256:${hash.digest('hex')}`;
}

/** The query string with its parameters sorted by name; '' when it has none. */
function canonicalQuery(query: string): string {
  const params = new URLSearchParams(query);
  params.sort();
  return params.toString();
}
