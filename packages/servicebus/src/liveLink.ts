import type { ServiceBusReceivedMessage } from '@azure/service-bus';

/** How often a pending settlement checks whether its link died under it. */
const LINK_CHECK_MS = 250;

/**
 * Settles on the message's link while it lives. When the link dies before the answer
 * comes (the disposition was lost with the connection, and the SDK would wait a minute
 * for it), settles again through `$management` by lock token. If the first disposition
 * did arrive, the second finds the lock gone (`MessageLockLost`): counted, never a
 * second effect.
 */
export function onLiveLink(
  message: ServiceBusReceivedMessage,
  settle: (message: ServiceBusReceivedMessage) => Promise<void>,
): Promise<void> {
  const first = settle(viaLiveLink(message));
  if (message.sessionId !== undefined) return first;
  return new Promise<void>((resolve, reject) => {
    let done = false;
    const timer = setInterval(() => {
      if (done || !linkIsGone(message)) return;
      done = true;
      clearInterval(timer);
      first.catch(() => {});
      settle(viaLiveLink(message)).then(resolve, reject);
    }, LINK_CHECK_MS);
    timer.unref();
    first.then(
      () => {
        if (done) return;
        done = true;
        clearInterval(timer);
        resolve();
      },
      (error) => {
        if (done) return;
        done = true;
        clearInterval(timer);
        reject(error);
      },
    );
  });
}

function linkIsGone(message: ServiceBusReceivedMessage): boolean {
  const link = (message as unknown as { delivery?: { link?: { is_open?: () => boolean } } }).delivery?.link;
  return link !== undefined && typeof link.is_open === 'function' && !link.is_open();
}

/**
 * After a connection loss the SDK re-creates its receiver link under the same name, and
 * its settle path finds that new link by name and settles the old delivery on the old,
 * dead link: the call never gets an answer (it times out after a minute and is
 * retried). For a message whose link is gone the SDK itself settles through
 * `$management` by lock token when it finds no open receiver; this makes it take that
 * path. Session messages are left alone: their lock dies with their link
 * (`SessionLockLost`).
 */
function viaLiveLink(message: ServiceBusReceivedMessage): ServiceBusReceivedMessage {
  const holder = message as unknown as { delivery?: { remote_settled?: boolean } };
  if (message.sessionId === undefined && linkIsGone(message)) {
    holder.delivery = { remote_settled: holder.delivery?.remote_settled ?? false };
  }
  return message;
}
