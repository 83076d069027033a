import type { IncomingMessage } from 'node:http';

/** The body is larger than `maxBodyBytes`: answered 413. */
export class BodyTooLarge extends Error {}

/** True when the request announces a body (a length above 0, or chunked). */
export function hasBody(req: IncomingMessage): boolean {
  return req.headers['transfer-encoding'] !== undefined || Number(req.headers['content-length'] ?? 0) > 0;
}

/** Reads the whole body, refusing more than `maxBytes` ({@link BodyTooLarge}). */
export async function readBody(req: IncomingMessage, maxBytes: number): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > maxBytes) throw new BodyTooLarge(`The body is larger than ${maxBytes} bytes.`);
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks);
}
