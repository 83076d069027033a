/**
 * The relay's bound on one producer's send (`sendTimeoutMs`): a send that never settles
 * must not hold a round, its claim and its transaction for ever (#26 review).
 */

/**
 * `sending`, or a rejection once `timeoutMs` passed without an answer. A late answer or
 * failure is dropped: the rows were counted as failed already and go out again later.
 *
 * @example
 * ```ts
 * const results = await withinSendTimeout(Promise.resolve(producer.send(messages)), 'payments', 120_000);
 * ```
 */
export function withinSendTimeout<T>(
  sending: Promise<T>,
  destination: string,
  timeoutMs: number,
): Promise<T> {
  sending.catch(() => {});
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () =>
        reject(
          new Error(
            `the producer for '${destination}' did not answer within ${timeoutMs} ms (sendTimeoutMs): its messages are sent again later, with the same IDs`,
          ),
        ),
      timeoutMs,
    );
  });
  return Promise.race([sending, timeout]).finally(() => clearTimeout(timer));
}
