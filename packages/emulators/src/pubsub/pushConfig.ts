import { invalidArgument } from './apiError.js';

/**
 * A subscription's push config as the service keeps it: the request's fields when it
 * names a push endpoint (an http or https URL), else `{}`, the empty config the service
 * returns for a pull subscription (the official samples read `metadata.pushConfig`).
 * Messages of a push subscription are not delivered by HTTP here, nor pullable: Pull and
 * StreamingPull are refused with FAILED_PRECONDITION, as the service refuses them.
 *
 * @example
 * ```ts
 * pushConfigOf({ pushEndpoint: 'https://example.com/push' }); // kept as given
 * pushConfigOf(undefined); // {}: a pull subscription
 * ```
 */
export function pushConfigOf(value: unknown): Record<string, unknown> {
  if (typeof value !== 'object' || value === null) return {};
  const config = value as { pushEndpoint?: unknown };
  const endpoint = config.pushEndpoint ?? '';
  if (endpoint === '') return {};
  let protocol: string | undefined;
  try {
    protocol = new URL(String(endpoint)).protocol;
  } catch {
    protocol = undefined;
  }
  if (protocol !== 'https:' && protocol !== 'http:') {
    throw invalidArgument(`Invalid push_endpoint: ${String(endpoint)}; must be an http or https URL.`);
  }
  return { ...config };
}
