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
 * The default request fingerprint: SHA-256 over method, path (without the query string
 * unless `includeQuery`), and the canonical body. Parts are length-prefixed so no two
 * different requests concatenate to the same bytes.
 *
 * @example
 * ```ts
 * requestFingerprint({ method: 'POST', url: '/payments?x=1', body: { amount: 40 } });
 * ```
 */
export function requestFingerprint(request: { method: string; url: string; body: unknown }): string {
  const path = request.url.split('?')[0] ?? '';
  const hash = createHash('sha256');
  for (const part of [
    Buffer.from(request.method.toUpperCase()),
    Buffer.from(path),
    canonicalBody(request.body),
  ]) {
    hash.update(`${part.length}:`);
    hash.update(part);
  }
  return `sha256:${hash.digest('hex')}`;
}
