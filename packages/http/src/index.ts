export type { HttpIdempotencyErrorCode } from './errors.js';
export { HttpIdempotencyError } from './errors.js';
export { canonicalBody, requestFingerprint } from './fingerprint.js';
export type {
  FastifyInstanceLike,
  FastifyPluginLike,
  FastifyReplyLike,
  FastifyRequestLike,
  HttpIdempotencyOptions,
  IdempotencyDecision,
  IdempotencyInfo,
  IdempotentIncomingMessage,
  IdempotentRequest,
  StoredResponse,
} from './HttpIdempotency.js';
export { HttpIdempotency, REPLAY_HEADER } from './HttpIdempotency.js';
export type { IdempotentFetchOptions } from './outbound.js';
export { idempotencyKey, idempotentFetch } from './outbound.js';
