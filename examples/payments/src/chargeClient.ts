import { idempotentFetch } from '@oncely/http';
import type { Charge } from './FakePaymentProvider.js';
import type { Order } from './orders.js';

/** How a consumer calls the provider. */
export interface ChargeRequestOptions {
  /** Provider account (`x-account`): keys are scoped per account. */
  account: string;
  /**
   * Sent as `Idempotency-Key` (and kept on retries) through `idempotentFetch`. Without it
   * the request is a plain `fetch` and every call is a new charge.
   */
  idempotencyKey?: string;
  signal?: AbortSignal;
}

/**
 * `POST /v1/charges` over HTTP. Rejects on any non-2xx answer.
 *
 * @example
 * ```ts
 * await requestCharge(provider.url, order, { account: 'oncely', idempotencyKey: ctx.idempotencyKey('charge'), signal: ctx.signal });
 * ```
 */
export async function requestCharge(
  providerUrl: string,
  order: Pick<Order, 'orderId' | 'amountCents'>,
  options: ChargeRequestOptions,
): Promise<Charge> {
  const url = `${providerUrl}/v1/charges`;
  const init: RequestInit = {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-account': options.account },
    body: JSON.stringify({ orderId: order.orderId, amountCents: order.amountCents }),
    signal: options.signal,
  };
  const response =
    options.idempotencyKey === undefined
      ? await fetch(url, init)
      : await idempotentFetch(options.idempotencyKey, url, init);
  const answer = (await response.json()) as Charge & { error?: string; title?: string };
  if (!response.ok) {
    throw new Error(`provider refused the charge (${response.status}): ${answer.error ?? answer.title}`);
  }
  return answer;
}
