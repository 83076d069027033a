import type { StoredResponse } from './types.js';

/**
 * The problems this middleware answers with, each with its fragment of the API's
 * documentation (`documentationUrl#fragment` is the problem's `type`).
 */
const PROBLEMS = {
  missing: { status: 400, fragment: 'idempotency-key-missing', title: 'Idempotency-Key is missing' },
  malformed: { status: 400, fragment: 'idempotency-key-malformed', title: 'Idempotency-Key is malformed' },
  inProgress: {
    status: 409,
    fragment: 'idempotency-key-in-progress',
    title: 'A request is outstanding for this Idempotency-Key',
  },
  reused: { status: 422, fragment: 'idempotency-key-reused', title: 'Idempotency-Key is already used' },
  timedOut: { status: 504, fragment: 'idempotency-timed-out', title: 'The request did not complete in time' },
  tooLarge: {
    status: 500,
    fragment: 'idempotency-response-too-large',
    title: 'The response is too large to store for replay',
  },
  unavailable: {
    status: 503,
    fragment: 'idempotency-store-unavailable',
    title: 'Service Unavailable',
  },
  failed: { status: 500, fragment: 'idempotency-request-failed', title: 'Internal Server Error' },
  bodyTooLarge: { status: 413, fragment: 'request-body-too-large', title: 'Content Too Large' },
  bodyUnreadable: { status: 400, fragment: 'request-body-unreadable', title: 'Bad Request' },
} as const;

/** The kind of a problem answer. */
export type ProblemKind = keyof typeof PROBLEMS;

/**
 * RFC 9457 problem details, as the draft's examples use: `type` links to the API's
 * idempotency documentation when `documentationUrl` is set (with a `Link: <url>;
 * rel="describedby"` header, the draft's alternative form), `about:blank` otherwise.
 */
export class Problems {
  constructor(private readonly documentationUrl: string | undefined) {}

  answer(kind: ProblemKind, detail: string, headers: Record<string, string> = {}): StoredResponse {
    const { status, fragment, title } = PROBLEMS[kind];
    const type = this.documentationUrl === undefined ? 'about:blank' : `${this.documentationUrl}#${fragment}`;
    const link: Record<string, string> =
      this.documentationUrl === undefined ? {} : { link: `<${this.documentationUrl}>; rel="describedby"` };
    return {
      status,
      headers: { 'content-type': 'application/problem+json', ...link, ...headers },
      body: Buffer.from(JSON.stringify({ type, title, status, detail })),
    };
  }

  inProgress(): StoredResponse {
    return this.answer('inProgress', 'Retry after the first request completes.', { 'retry-after': '1' });
  }

  reused(): StoredResponse {
    return this.answer(
      'reused',
      'This key was used with a different request payload. Use a new key for a new request.',
    );
  }

  timedOut(): StoredResponse {
    return this.answer('timedOut', 'The request did not complete in time; retry with the same key.');
  }

  /** The store failed: 503 (retry) when it is unreachable, 500 for any other error. */
  storeFailed(kind: string): StoredResponse {
    return kind === 'other'
      ? this.answer('failed', 'The request could not be recorded.')
      : this.answer('unavailable', 'The idempotency store is unavailable; retry with the same key.', {
          'retry-after': '1',
        });
  }
}
