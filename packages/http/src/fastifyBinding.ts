import type { BindingHost } from './serverResponse.js';
import type {
  FastifyInstanceLike,
  FastifyPluginLike,
  FastifyReplyLike,
  FastifyRequestLike,
  IdempotencyDecision,
  StoredResponse,
} from './types.js';
import { REPLAY_HEADER } from './types.js';

type RunDecision = Extract<IdempotencyDecision, { kind: 'run' }>;

/** A request the handler runs for; `replying` once its reply reached `onSend`. */
interface Running {
  decision: RunDecision;
  replying: boolean;
}

/**
 * The Fastify (4, 5) binding. `preHandler` decides; the handler's reply is held in
 * `onSend` until the key is settled; a key settled without the handler (its
 * `handlerTimeoutMs` passed) is answered from `preHandler`'s watch on `answer`. A hijacked
 * reply bypasses `onSend`: it is settled as a failure in `onResponse`.
 */
export function fastifyPlugin(host: BindingHost): FastifyPluginLike {
  const running = new WeakMap<object, Running>();
  const plugin = async (app: FastifyInstanceLike) => {
    if (!app.hasRequestDecorator('tx')) app.decorateRequest('tx', null);
    if (!app.hasRequestDecorator('idempotency')) app.decorateRequest('idempotency', null);
    app.addHook('preHandler', async (request: FastifyRequestLike, reply: FastifyReplyLike) => {
      const decision = await host.decide({
        method: request.method,
        url: request.url,
        headers: request.headers,
        body: request.body,
        raw: request,
      });
      if (decision.kind === 'bypass') return;
      if (decision.kind === 'respond') return sendReply(reply, decision.response, decision.replayed);
      request.tx = decision.tx;
      request.idempotency = { key: decision.key, scope: decision.scope, signal: decision.signal };
      const entry: Running = { decision, replying: false };
      running.set(request, entry);
      void decision.answer.then((answer) => {
        // Settled before the handler replied: the answer goes out here (onSend lets it through).
        if (entry.replying || running.get(request) !== entry) return;
        running.delete(request);
        if (reply.sent) return;
        replaceHead(reply, answer);
        reply.send(answer.body);
      });
    });
    app.addHook('onSend', async (request: FastifyRequestLike, reply: FastifyReplyLike, payload: unknown) => {
      const entry = running.get(request);
      if (!entry || entry.replying) return payload;
      entry.replying = true;
      const collected = collectPayload(host, reply, payload);
      // A stream that never ends must not hold the answer back past the key's settlement.
      const first = await Promise.race([collected, entry.decision.answer.then((answer) => ({ answer }))]);
      const response = 'response' in first ? first.response : undefined;
      const answer = response
        ? await entry.decision.finish(response)
        : (first as { answer: StoredResponse }).answer;
      running.delete(request);
      // The handler's own reply goes out as it is; anything else replaces its head.
      if (answer === response && 'asReplied' in first) return response.body;
      if (!response) (payload as { destroy?: () => void } | null)?.destroy?.();
      replaceHead(reply, answer);
      return answer.body;
    });
    app.addHook('onResponse', async (request: FastifyRequestLike, reply: FastifyReplyLike) => {
      // onSend never ran (the reply was hijacked): settle as a failure so nothing stays held.
      const entry = running.get(request);
      if (!entry || entry.replying) return;
      running.delete(request);
      await entry.decision.finish({
        status: Math.max(500, reply.statusCode),
        headers: {},
        body: Buffer.alloc(0),
      });
    });
  };
  const marked = plugin as FastifyPluginLike;
  // What fastify-plugin does: the hooks apply to the parent scope, not an encapsulated child.
  (marked as unknown as Record<symbol, unknown>)[Symbol.for('skip-override')] = true;
  (marked as unknown as Record<symbol, unknown>)[Symbol.for('fastify.display-name')] = '@oncely/http';
  return marked;
}

/**
 * The handler's reply as a stored response (`asReplied`), or the failure it is when its
 * body cannot be taken.
 */
async function collectPayload(
  host: BindingHost,
  reply: FastifyReplyLike,
  payload: unknown,
): Promise<{ response: StoredResponse; asReplied?: true }> {
  try {
    const body = await payloadBytes(payload, host.maxResponseBytes);
    if (body === undefined) {
      return {
        response: host.problems.answer(
          'tooLarge',
          `The response is larger than maxResponseBytes (${host.maxResponseBytes}).`,
        ),
      };
    }
    return {
      response: { status: reply.statusCode, headers: reply.getHeaders() as StoredResponse['headers'], body },
      asReplied: true,
    };
  } catch (error) {
    // A streamed body that failed midway: what was sent so far is no response.
    host.log.error('oncely/http: the response body failed', { error });
    return { response: host.problems.answer('failed', 'The request failed.') };
  }
}

/** Sends a decided response (a replay, a problem) on a reply the handler never touched. */
function sendReply(reply: FastifyReplyLike, response: StoredResponse, replayed: boolean): FastifyReplyLike {
  reply.code(response.status);
  for (const [name, value] of Object.entries(response.headers)) reply.header(name, value);
  if (replayed) reply.header(REPLAY_HEADER, 'true');
  return reply.send(response.body);
}

/** The key's answer in place of what the handler set on the reply. */
function replaceHead(reply: FastifyReplyLike, response: StoredResponse): void {
  for (const name of Object.keys(reply.getHeaders())) reply.removeHeader(name);
  reply.code(response.status);
  for (const [name, value] of Object.entries(response.headers)) reply.header(name, value);
}

/** The payload's bytes; undefined past `maxBytes` (a stream is then destroyed). */
async function payloadBytes(payload: unknown, maxBytes: number): Promise<Buffer | undefined> {
  if (payload === undefined || payload === null) return Buffer.alloc(0);
  let body: Buffer;
  if (Buffer.isBuffer(payload)) body = payload;
  else if (typeof payload === 'string') body = Buffer.from(payload);
  else if (payload instanceof Uint8Array) body = Buffer.from(payload);
  else if (typeof (payload as AsyncIterable<unknown>)[Symbol.asyncIterator] === 'function') {
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const chunk of payload as AsyncIterable<Uint8Array | string>) {
      const bytes = Buffer.from(chunk);
      size += bytes.length;
      if (size > maxBytes) {
        (payload as { destroy?: () => void }).destroy?.();
        return undefined;
      }
      chunks.push(bytes);
    }
    body = Buffer.concat(chunks);
  } else body = Buffer.from(String(payload));
  return body.length > maxBytes ? undefined : body;
}
