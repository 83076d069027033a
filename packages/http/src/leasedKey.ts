import { randomUUID } from 'node:crypto';
import { HttpIdempotencyError, handlerTimedOut } from './errors.js';
import type { KeyContext, KeyRequest } from './keyContext.js';
import { deferred, replay, respond } from './keyContext.js';
import type { IdempotencyDecision, StoredResponse } from './types.js';

/**
 * Leased mode: the key is claimed `in_progress` with an owner token and a database-time
 * deadline in a short transaction of its own, renewed while the handler runs; the response
 * is stored only if the claim is still this request's. Past `handlerTimeoutMs` the client
 * gets a 504 and the claim is no longer renewed: it expires like a crashed request's.
 */
export async function decideLeased(
  ctx: KeyContext,
  { scope, key, fingerprint }: KeyRequest,
): Promise<IdempotencyDecision> {
  const keys = ctx.keys;
  const owner = randomUUID();
  const claim = await ctx.store.transaction(async (tx): Promise<IdempotencyDecision | 'acquired'> => {
    const acquired = await keys.acquire(tx, {
      scope,
      key,
      fingerprint,
      owner,
      leaseMs: ctx.leaseMs,
      retentionMs: ctx.retentionMs,
    });
    if (acquired) return 'acquired';
    const record = await keys.read(tx, scope, key);
    if (!record) return respond(ctx.problems.inProgress()); // changed under us; the client retries
    if (record.fingerprint !== fingerprint) return respond(ctx.problems.reused());
    if (record.status === 'completed') return replay(record);
    return respond(ctx.problems.inProgress());
  });
  if (claim !== 'acquired') return claim;
  const stop = new AbortController();
  const claimed = { scope, key, owner };
  const renewal = setInterval(
    () => {
      ctx.store
        .transaction((tx) => keys.renew(tx, { ...claimed, leaseMs: ctx.leaseMs }))
        .then(
          (renewed) => {
            if (!renewed && !stop.signal.aborted)
              stop.abort(
                new HttpIdempotencyError(
                  'HTTP_CLAIM_LOST',
                  'the idempotency key was taken over by another request',
                ),
              );
          },
          (error) => ctx.log.warn('oncely/http: renewing a key claim failed', { error, key }),
        );
    },
    Math.max(1, Math.floor(ctx.leaseMs / 3)),
  );
  renewal.unref();
  const answer = deferred<StoredResponse>();
  let timedOut = false;
  // Past the budget the client is answered and the claim left to expire, as a crashed
  // request's: the handler may still be running, so a retry must not run it again before
  // the deadline, and its late response (its client already has the 504) is not stored.
  const timer = setTimeout(() => {
    timedOut = true;
    clearInterval(renewal);
    stop.abort(handlerTimedOut());
    answer.resolve(ctx.problems.timedOut());
  }, ctx.handlerTimeoutMs);
  let finishing: Promise<StoredResponse> | undefined;
  const settle = async (response: StoredResponse): Promise<StoredResponse> => {
    clearTimeout(timer);
    clearInterval(renewal);
    if (timedOut) {
      ctx.log.warn(
        'oncely/http: a handler answered after handlerTimeoutMs; its response is not stored and the claim expires at its deadline',
        { key },
      );
      return answer.promise;
    }
    try {
      if (response.status >= 500 && !ctx.storeFailures) {
        await ctx.store.transaction((tx) => keys.release(tx, claimed));
      } else {
        const done = await ctx.store.transaction((tx) =>
          keys.complete(tx, {
            ...claimed,
            response: { status: response.status, headers: ctx.storedHeaders(response), body: response.body },
            retentionMs: ctx.retentionMs,
          }),
        );
        if (!done) {
          ctx.log.warn(
            'oncely/http: the key was taken over before this request completed; its response is not stored',
            { key },
          );
        }
      }
    } catch (error) {
      // The handler's effects happened; the claim stays in progress until its deadline,
      // after which a retry takes it over.
      ctx.log.error('oncely/http: storing the response failed', { error, key });
    }
    answer.resolve(response);
    return answer.promise;
  };
  return {
    kind: 'run',
    key,
    scope,
    tx: undefined,
    signal: stop.signal,
    finish: (response) => {
      finishing ??= settle(response);
      return finishing;
    },
    answer: answer.promise,
  };
}
