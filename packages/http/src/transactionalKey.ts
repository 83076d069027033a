import type { SqlClient } from '@oncely/core';
import { HttpIdempotencyError, handlerTimedOut } from './errors.js';
import type { KeyContext, KeyRequest } from './keyContext.js';
import { deferred, replay, respond } from './keyContext.js';
import type { IdempotencyDecision, StoredResponse } from './types.js';

/** A failure response that is not stored (`failures: 'rerun'`): the transaction rolls back. */
class NotStored extends Error {
  constructor(readonly response: StoredResponse) {
    super('failure response not stored');
  }
}

/**
 * Transactional mode: the key's transaction takes the key's advisory lock, runs the
 * handler (through `tx`), and stores the response with the handler's writes; one commit
 * for both. The response is held back until that commit (`answer`). Past
 * `handlerTimeoutMs` the key is settled as a 504 without the handler: the transaction rolls
 * back and `tx` refuses further statements.
 */
export function decideTransactional(
  ctx: KeyContext,
  { scope, key, fingerprint }: KeyRequest,
): Promise<IdempotencyDecision> {
  const keys = ctx.keys;
  /** The handler's response, or the timeout's 504: whichever comes first settles the key. */
  const outcome = deferred<StoredResponse>();
  /** What to send, once the transaction has committed or rolled back. */
  const answer = deferred<StoredResponse>();
  // The handler's view of the transaction. Once the transaction has settled (a timeout, a
  // commit), a late statement must fail instead of running on a pooled connection that
  // may by then serve another request's transaction.
  let txEnded = false;
  let inner: SqlClient | undefined;
  const handlerTx: SqlClient = {
    query: (text, params) => {
      if (txEnded || !inner) {
        return Promise.reject(
          new HttpIdempotencyError(
            'HTTP_TRANSACTION_ENDED',
            "req.tx was used after the request's transaction ended (handlerTimeoutMs passed, or the response was already sent)",
          ),
        );
      }
      return params === undefined ? inner.query(text) : inner.query(text, params);
    },
  };
  return new Promise<IdempotencyDecision>((resolveDecision, rejectDecision) => {
    let running = false;
    const committed = ctx.store.transaction(async (tx) => {
      inner = tx;
      const { locked, record: peeked } = await keys.tryLock(tx, scope, key);
      // Replays (the common retry) never wait on or 409 each other.
      if (peeked?.status === 'completed') {
        return resolveDecision(
          peeked.fingerprint === fingerprint ? replay(peeked) : respond(ctx.problems.reused()),
        );
      }
      // Another request with this key holds its transaction open: it is in progress.
      if (!locked) {
        return resolveDecision(
          respond(
            peeked && peeked.fingerprint !== fingerprint ? ctx.problems.reused() : ctx.problems.inProgress(),
          ),
        );
      }
      // Read again under the lock: the first request may have committed in between.
      const row = await keys.read(tx, scope, key);
      if (row) {
        if (row.fingerprint !== fingerprint) return resolveDecision(respond(ctx.problems.reused()));
        if (row.status === 'completed') return resolveDecision(replay(row));
        // A leased-mode claim on the same table: taken over only once its deadline passed.
        if (row.live) return resolveDecision(respond(ctx.problems.inProgress()));
      }
      const runHandler = async (): Promise<StoredResponse> => {
        running = true;
        const timedOut = new AbortController();
        resolveDecision({
          kind: 'run',
          key,
          scope,
          tx: handlerTx,
          signal: timedOut.signal,
          finish: (response) => {
            outcome.resolve(response);
            return answer.promise;
          },
          answer: answer.promise,
        });
        // A handler that never answers must not hold the key's transaction (and a pooled
        // connection) forever, nor its client: past the budget it is settled as a 504.
        const timer = setTimeout(() => {
          timedOut.abort(handlerTimedOut());
          const timeout = ctx.problems.timedOut();
          outcome.resolve(timeout);
          // Answered now, not after the rollback: a handler stuck in a statement keeps the
          // connection busy until that statement ends, and the ROLLBACK queues behind it.
          // The 504 is a failure either way (the writes roll back, or with failures: 'store'
          // the 504 itself is what gets stored); a retry meanwhile gets 409.
          answer.resolve(timeout);
        }, ctx.handlerTimeoutMs);
        const response = await outcome.promise.finally(() => {
          clearTimeout(timer);
          txEnded = true;
        });
        // Nothing stored, nothing written: a retry runs the handler again.
        if (response.status >= 500) throw new NotStored(response);
        return response;
      };
      let response: StoredResponse;
      if (!ctx.storeFailures) response = await runHandler();
      else {
        // The store's savepoint (not raw SQL): it knows how its database undoes a failed
        // statement, so a failure's writes roll back while its response is still stored.
        try {
          response = await ctx.store.savepoint(tx, runHandler);
        } catch (error) {
          if (!(error instanceof NotStored)) throw error;
          response = error.response;
        }
      }
      await keys.saveCompleted(tx, {
        scope,
        key,
        fingerprint,
        response: { status: response.status, headers: ctx.storedHeaders(response), body: response.body },
        retentionMs: ctx.retentionMs,
      });
      return response;
    });
    committed.then(
      (response) => {
        if (response) answer.resolve(response);
      },
      (error: unknown) => {
        if (!running) return rejectDecision(error);
        if (error instanceof NotStored) return answer.resolve(error.response);
        // The handler's writes did not commit: its response must not be sent as a success.
        ctx.log.error('oncely/http: the transaction of a request failed to commit', { error, key });
        answer.resolve(ctx.problems.storeFailed(ctx.store.classifyError(error)));
      },
    );
  });
}
