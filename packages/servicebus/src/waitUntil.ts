/**
 * Waits for `work` until `deadline` (epoch ms) at most, never rejects; `work` goes on
 * after that. For the waits of a stop or a close on the broker's answers: on a silent
 * connection (a black-holing network) the SDK waits a minute and more per link, or for
 * ever (a receive's drain).
 *
 * @example
 * ```ts
 * await waitUntil(receiver.close(), Date.now() + 10_000);
 * ```
 */
export async function waitUntil(work: Promise<unknown>, deadline: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, Math.max(0, deadline - Date.now()));
  });
  await Promise.race([work.then(noop, noop), late]).finally(() => clearTimeout(timer));
}

function noop(): void {}
