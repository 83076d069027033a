import type { IncomingMessage, ServerResponse } from 'node:http';
import { BodyTooLarge, hasBody, readBody } from './requestBody.js';
import type { BindingHost } from './serverResponse.js';
import { sendResponse, serveServerResponse } from './serverResponse.js';
import type { IdempotentIncomingMessage } from './types.js';

/**
 * The Express (4, 5) binding: fingerprints the parsed `req.body` (without a body parser it
 * reads the raw body into `req.body`), then serves the request through the held-back
 * response; `next()` runs the route, and Express's error handler answers a throw.
 */
export function expressMiddleware(
  host: BindingHost,
): (req: IncomingMessage, res: ServerResponse, next: (error?: unknown) => void) => void {
  return (incoming, res, next) => {
    const req = incoming as IdempotentIncomingMessage & { body?: unknown; originalUrl?: string };
    const start = async () => {
      if (req.body === undefined && hasBody(req)) req.body = await readBody(req, host.maxBodyBytes);
      await serveServerResponse(
        host,
        req,
        res,
        {
          method: req.method ?? 'GET',
          url: req.originalUrl ?? req.url ?? '/',
          headers: req.headers,
          body: req.body,
          raw: req,
        },
        () => next(),
      );
    };
    start().catch((error: unknown) => {
      if (error instanceof BodyTooLarge)
        sendResponse(res, host.problems.answer('bodyTooLarge', error.message), false);
      else next(error);
    });
  };
}
