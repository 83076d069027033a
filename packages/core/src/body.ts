import type { BodyFormat } from './types.js';

/** Decodes a raw body. Throws on bad input; the pipeline dead-letters with `invalid-body`. */
export function decodeBody(format: BodyFormat, raw: unknown): unknown {
  if (typeof format === 'function') return format(raw);
  const isBytes = Buffer.isBuffer(raw) || raw instanceof Uint8Array;
  switch (format) {
    case 'buffer':
      return isBytes ? Buffer.from(raw as Uint8Array) : Buffer.from(String(raw));
    case 'text':
      return isBytes ? utf8(raw as Uint8Array) : String(raw);
    case 'json':
      // Adapters that already decoded (the memory broker) hand over a value, not text.
      if (typeof raw === 'string') return JSON.parse(raw);
      if (isBytes) return JSON.parse(utf8(raw as Uint8Array));
      return raw;
  }
}

/** The bytes as UTF-8 text, read through a view: only the text is kept, so no copy of the bytes. */
function utf8(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('utf8');
}
