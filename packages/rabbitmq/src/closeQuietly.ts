import type { EventEmitter } from 'node:events';

/**
 * Closes an amqplib channel or connection and resolves once it is closed, whichever way
 * that happens; never rejects (a close that fails found it closed already).
 *
 * amqplib's `close()` resolves on the broker's close-ok only. When the connection dies
 * after the close frame went out (a broker restart, a server-side close, a network cut, a
 * missed heartbeat), no close-ok ever comes: the channel or connection moves to closed and
 * emits `'close'`, and the promise of `close()` never settles. Awaited bare, that hung
 * `oncely dlq replay` and a consumer's `stop()` for good. Here the `'close'` event ends
 * the wait too.
 *
 * @example
 * ```ts
 * await closeQuietly(channel);
 * await closeQuietly(connection);
 * ```
 */
export function closeQuietly(closable: EventEmitter & { close(): Promise<void> }): Promise<void> {
  return new Promise<void>((resolve) => {
    const closed = () => {
      closable.off('close', closed);
      resolve();
    };
    closable.once('close', closed);
    let closing: Promise<void>;
    try {
      closing = closable.close();
    } catch {
      // Already closed: amqplib throws (IllegalOperationError) for some states.
      closed();
      return;
    }
    closing.then(closed, closed);
  });
}
