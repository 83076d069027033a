export type { HttpIdempotencyErrorCode } from './errors.js';
export { HttpIdempotencyError } from './errors.js';
export { canonicalBody, requestFingerprint } from './fingerprint.js';
export { HttpIdempotency } from './HttpIdempotency.js';
export type { IdempotentFetchOptions } from './outbound.js';
export { idempotencyKey, idempotentFetch } from './outbound.js';
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
} from './types.js';
export { REPLAY_HEADER } from './types.js';
