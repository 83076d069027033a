import type { IncomingMessage, ServerResponse } from 'node:http';
import { BodyTooLarge, readBody } from './requestBody.js';
import type { BindingHost } from './serverResponse.js';
import { sendResponse, serveServerResponse } from './serverResponse.js';
import type { IdempotentIncomingMessage } from './types.js';

/**
 * The node:http binding: reads the body (up to `maxBodyBytes`, 413 beyond) into
 * `req.rawBody`, then serves the request through the held-back response.
 */
export function nodeHandler(
  host: BindingHost,
  handle: (req: IdempotentIncomingMessage, res: ServerResponse) => unknown,
): (req: IncomingMessage, res: ServerResponse) => Promise<void> {
  return async (incoming, res) => {
    const req = incoming as IdempotentIncomingMessage;
    let body: Buffer;
    try {
      body = await readBody(req, host.maxBodyBytes);
    } catch (error) {
      const kind = error instanceof BodyTooLarge ? 'bodyTooLarge' : 'bodyUnreadable';
      sendResponse(res, host.problems.answer(kind, (error as Error).message), false);
      return;
    }
    req.rawBody = body;
    await serveServerResponse(
      host,
      req,
      res,
      { method: req.method ?? 'GET', url: req.url ?? '/', headers: req.headers, body, raw: req },
      () => handle(req, res),
    );
  };
}
