import type { ServerResponse } from 'node:http';
import type { Logger } from '@oncely/core';
import { isOncelyError } from '@oncely/core';
import { HttpIdempotencyError } from './errors.js';
import type { Problems } from './problems.js';
import type {
  IdempotencyDecision,
  IdempotentIncomingMessage,
  IdempotentRequest,
  StoredResponse,
} from './types.js';
import { REPLAY_HEADER } from './types.js';

/** What the bindings need of {@link HttpIdempotency}. */
export interface BindingHost {
  decide(request: IdempotentRequest): Promise<IdempotencyDecision>;
  readonly maxBodyBytes: number;
  readonly maxResponseBytes: number;
  readonly problems: Problems;
  readonly log: Logger;
}

/** Writes a whole response (a replay, a problem) on a response nothing was written to. */
export function sendResponse(res: ServerResponse, response: StoredResponse, replayed: boolean): void {
  res.statusCode = response.status;
  for (const [name, value] of Object.entries(response.headers)) res.setHeader(name, value);
  if (replayed) res.setHeader(REPLAY_HEADER, 'true');
  res.setHeader('content-length', response.body.length);
  res.end(response.body);
}

/**
 * The node:http wrapper's and Express's path for one request: decide; a bypassed request
 * runs as it is; a decided one is answered at once; a run captures the handler's response,
 * settles the key with it, and sends what the key's `answer` says. The handler is not
 * awaited before that send (a handler may itself await the response's end: `pipeline`, the
 * `end` callback); the answer comes by `handlerTimeoutMs` at the latest.
 *
 * `start` runs the handler (or Express's `next()`); if what it returns rejects, the
 * request answers 500.
 */
export async function serveServerResponse(
  host: BindingHost,
  req: IdempotentIncomingMessage,
  res: ServerResponse,
  request: IdempotentRequest,
  start: () => unknown,
): Promise<void> {
  const decision = await host.decide(request);
  if (decision.kind === 'bypass') {
    try {
      await start();
    } catch (error) {
      host.log.error('oncely/http: the request handler threw', { error });
      if (res.writableEnded) return;
      // Its head is out: a 500 cannot follow, and a body ended here would look complete.
      if (res.headersSent) res.destroy();
      else sendResponse(res, host.problems.answer('failed', 'The request failed.'), false);
    }
    return;
  }
  if (decision.kind === 'respond') return sendResponse(res, decision.response, decision.replayed);
  req.tx = decision.tx;
  req.idempotency = { key: decision.key, scope: decision.scope, signal: decision.signal };
  const capture = new ResponseCapture(res, host.maxResponseBytes, {
    timedOut: () => isOncelyError(decision.signal.reason, 'HTTP_HANDLER_TIMEOUT'),
    ended: (response) => void decision.finish(response),
    overflowed: () =>
      void decision.finish(
        host.problems.answer(
          'tooLarge',
          `The response is larger than maxResponseBytes (${host.maxResponseBytes}).`,
        ),
      ),
  });
  Promise.resolve()
    .then(start)
    .catch((error: unknown) => {
      host.log.error('oncely/http: the request handler threw', { error });
      // A throw before the response ended fails the request; after, it changes nothing.
      if (!capture.ended) void decision.finish(host.problems.answer('failed', 'The request failed.'));
    });
  capture.send(await decision.answer);
}

type Callback = (error?: Error | null) => void;

/**
 * Holds a response's head and body back until the key is settled (committed, or stored):
 * nothing reaches the client before the commit, so a client never sees a success whose
 * writes were rolled back. Up to `maxBytes` of body are kept; beyond, `overflowed`.
 * After {@link send}, late writes go nowhere (their callbacks get an error) instead of
 * failing on an ended response.
 */
class ResponseCapture {
  ended = false;
  private response: StoredResponse | undefined;
  private chunks: Buffer[] = [];
  private size = 0;
  private overflowed = false;
  private sent = false;
  private readonly original: Pick<ServerResponse, 'writeHead' | 'write' | 'end' | 'flushHeaders'>;

  constructor(
    private readonly res: ServerResponse,
    private readonly maxBytes: number,
    private readonly on: {
      /** True once the request is answered without the handler (its writes reach no one). */
      timedOut(): boolean;
      ended(response: StoredResponse): void;
      overflowed(): void;
    },
  ) {
    this.original = {
      writeHead: res.writeHead,
      write: res.write,
      end: res.end,
      flushHeaders: res.flushHeaders,
    };
    const patched = res as unknown as Record<string, unknown>;
    patched.writeHead = (status: number, reason?: unknown, headers?: unknown) => {
      if (!this.ended) applyHead(res, status, reason, headers);
      return res;
    };
    patched.write = (chunk: unknown, encoding?: unknown, callback?: unknown) => {
      const done = (typeof encoding === 'function' ? encoding : callback) as Callback | undefined;
      if (this.ended || this.on.timedOut()) return this.late(done);
      this.push(chunk, encoding);
      if (done) queueMicrotask(() => done());
      return true;
    };
    patched.end = (chunk?: unknown, encoding?: unknown, callback?: unknown) => {
      const done = [chunk, encoding, callback].find((arg) => typeof arg === 'function') as
        | Callback
        | undefined;
      if (this.ended) {
        if (done) queueMicrotask(() => done());
        return res;
      }
      this.push(chunk, encoding);
      this.ended = true;
      // Called back when the real response has gone out (or, after a 504, at once), or
      // with HTTP_CLIENT_GONE once its client has left: the real response then never
      // finishes, and a handler awaiting this callback would wait forever.
      if (done) this.callWhenOut(done);
      if (this.overflowed) return res;
      this.response = {
        status: res.statusCode,
        headers: res.getHeaders() as StoredResponse['headers'],
        body: Buffer.concat(this.chunks),
      };
      this.on.ended(this.response);
      return res;
    };
    patched.flushHeaders = () => {};
  }

  /** Sends the key's answer: the handler's own response as captured, or another one in its place. */
  send(answer: StoredResponse): void {
    if (this.sent) return;
    this.sent = true;
    const { res } = this;
    // Node ends a response through its own writeHead (implicit headers): the originals must be back.
    Object.assign(res, this.original);
    if (answer !== this.response) {
      for (const name of res.getHeaderNames()) res.removeHeader(name);
      for (const [name, value] of Object.entries(answer.headers)) res.setHeader(name, value);
    }
    res.statusCode = answer.status;
    res.removeHeader('transfer-encoding');
    res.setHeader('content-length', answer.body.length);
    res.end(answer.body);
    // Answered without the handler's end (a timeout): a throw from it now changes nothing.
    this.ended = true;
    const patched = res as unknown as Record<string, unknown>;
    patched.writeHead = () => res;
    patched.flushHeaders = () => {};
    // Header calls on the sent response would throw ERR_HTTP_HEADERS_SENT into a late handler
    // (Express's res.status().json()), and Express answers that by destroying the keep-alive socket.
    patched.setHeader = () => res;
    patched.appendHeader = () => res;
    patched.removeHeader = () => {};
    patched.write = (_chunk: unknown, encoding?: unknown, callback?: unknown) =>
      this.late((typeof encoding === 'function' ? encoding : callback) as Callback | undefined);
    patched.end = (chunk?: unknown, encoding?: unknown, callback?: unknown) => {
      const done = [chunk, encoding, callback].find((arg) => typeof arg === 'function') as
        | Callback
        | undefined;
      if (done) queueMicrotask(() => done());
      return res;
    };
  }

  /** Calls `done` when the real response finished, or with an error if its connection closed first. */
  private callWhenOut(done: Callback): void {
    const { res } = this;
    const gone = () =>
      new HttpIdempotencyError('HTTP_CLIENT_GONE', 'the client disconnected before the response was sent');
    if (res.writableFinished) return void queueMicrotask(() => done());
    if (res.destroyed || res.socket?.destroyed === true || res.closed) {
      return void queueMicrotask(() => done(gone()));
    }
    let called = false;
    const once = (error?: Error) => {
      if (called) return;
      called = true;
      res.off('finish', onFinish);
      res.off('close', onClose);
      done(error);
    };
    const onFinish = () => once();
    // 'close' also follows a normal 'finish'; only a close before it means the client left.
    const onClose = () => once(res.writableFinished ? undefined : gone());
    res.once('finish', onFinish);
    res.once('close', onClose);
  }

  /** A write after the response ended or was answered: dropped, and its callback told so. */
  private late(callback: Callback | undefined): boolean {
    if (callback) {
      queueMicrotask(() =>
        callback(new HttpIdempotencyError('HTTP_RESPONSE_SENT', 'the response was already sent')),
      );
    }
    return false;
  }

  private push(chunk: unknown, encoding: unknown): void {
    if (chunk === undefined || chunk === null || typeof chunk === 'function' || this.overflowed) return;
    const bytes =
      typeof chunk === 'string'
        ? Buffer.from(chunk, (typeof encoding === 'string' ? encoding : 'utf8') as BufferEncoding)
        : Buffer.from(chunk as Uint8Array);
    this.size += bytes.length;
    if (this.size > this.maxBytes) {
      this.overflowed = true;
      this.chunks = [];
      this.on.overflowed();
      return;
    }
    this.chunks.push(bytes);
  }
}

/** `res.writeHead(status, [reason], [headers])` as headers set on the held-back response. */
function applyHead(res: ServerResponse, status: number, reason: unknown, headers: unknown): void {
  res.statusCode = status;
  if (typeof reason === 'string') res.statusMessage = reason;
  else headers = reason;
  if (Array.isArray(headers)) {
    for (let i = 0; i + 1 < headers.length; i += 2)
      res.setHeader(String(headers[i]), headers[i + 1] as string);
  } else if (headers && typeof headers === 'object') {
    for (const [name, value] of Object.entries(headers)) {
      if (value !== undefined) res.setHeader(name, value as string);
    }
  }
}
