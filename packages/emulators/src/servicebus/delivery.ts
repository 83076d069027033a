/**
 * Delivering: the emulator-side sender links (outbounds) of each entity, session binding
 * and accept-next-session waiters, the pump that spends link credit on ready messages, and
 * the client's settlements (complete, abandon, defer, dead-letter) of what it received.
 */

import { EntityRegistry } from './entities.js';
import {
  dotNetGuidOrder,
  guidBytes,
  type MessageEntity,
  type SessionRecord,
  type StoredMessage,
} from './MessageEntity.js';
import {
  amqp,
  CONDITIONS,
  type LinkRole,
  type Outbound,
  plain,
  SESSION_FILTER,
  types,
  wireMessage,
} from './model.js';

const LOCKED_UNTIL_UTC = 'com.microsoft:locked-until-utc';
/** .NET ticks (100 ns since 0001-01-01) at the Unix epoch. */
const EPOCH_TICKS = 621_355_968_000_000_000n;

/** Hands entities' messages to client receivers and applies their settlements. */
export abstract class DeliveryEngine extends EntityRegistry {
  protected readonly roles = new WeakMap<object, LinkRole>();
  protected readonly sessionWaiters = new Set<{
    entity: MessageEntity;
    link: any;
    out: Outbound;
    timer: NodeJS.Timeout;
  }>();
  private readonly pumpQueued = new Set<MessageEntity>();

  protected bindSession(out: Outbound, sessionId: string, address: string): void {
    out.sessionId = sessionId;
    const record = out.entity.session(sessionId);
    out.link.set_source({ address, filter: { [SESSION_FILTER]: sessionId } });
    out.link.local.attach.properties = { [LOCKED_UNTIL_UTC]: types.wrap_long(ticksOf(record.lockedUntil)) };
    this.addOutbound(out);
  }

  /** Hands waiting accept-next-session links the sessions that have messages now. */
  private serveSessionWaiters(entity: MessageEntity): void {
    for (const waiter of [...this.sessionWaiters]) {
      if (waiter.entity !== entity) continue;
      const free = entity.nextFreeSession();
      if (free === undefined) return;
      if (!entity.acquireSession(free, waiter.out)) continue;
      clearTimeout(waiter.timer);
      this.sessionWaiters.delete(waiter);
      const address = String(waiter.link.remote.attach?.source?.address ?? entity.path);
      this.bindSession(waiter.out, free, address);
      waiter.link.open();
    }
  }

  protected addOutbound(out: Outbound): void {
    let set = this.outbounds.get(out.entity);
    if (!set) {
      set = new Set();
      this.outbounds.set(out.entity, set);
    }
    set.add(out);
    this.schedulePump(out.entity);
  }

  protected closeOutbound(out: Outbound): void {
    if (out.closed) return;
    out.closed = true;
    this.outbounds.get(out.entity)?.delete(out);
    if (out.sessionId !== undefined) {
      const record = out.entity.sessions.get(out.sessionId);
      if (record) out.entity.releaseSession(record, out);
    }
    // Locks of a non-session receiver outlive its link (the client may still settle
    // through $management) and expire on their own.
  }

  /** A session lock ran out: the holder's link is detached with `session-lock-lost`. */
  protected onSessionLockLost(entity: MessageEntity, session: SessionRecord): void {
    for (const out of [...(this.outbounds.get(entity) ?? [])]) {
      if (out.sessionId !== session.id || session.holder !== undefined) continue;
      out.link.close({
        condition: CONDITIONS.sessionLockLost,
        description: `The session lock of '${session.id}' expired.`,
      });
      this.closeOutbound(out);
    }
    this.schedulePump(entity);
  }

  protected schedulePump(entity: MessageEntity): void {
    if (this.pumpQueued.has(entity)) return;
    this.pumpQueued.add(entity);
    setImmediate(() => {
      this.pumpQueued.delete(entity);
      this.pump(entity);
    });
  }

  protected onSendable(link: any): void {
    const role = this.roles.get(link);
    if (role?.kind === 'outbound') this.pump(role.outbound.entity);
  }

  protected onDraining(link: any): void {
    const role = this.roles.get(link);
    if (role?.kind === 'outbound') this.pump(role.outbound.entity);
    echoDrain(link);
    link.set_drained(true);
  }

  /** Round-robin over the entity's receivers, one message each per turn, within link credit. */
  private pump(entity: MessageEntity): void {
    if (entity.settings.requiresSession) this.serveSessionWaiters(entity);
    const outs = [...(this.outbounds.get(entity) ?? [])];
    let progress = true;
    while (progress) {
      progress = false;
      for (const out of outs) {
        if (out.closed || creditOf(out.link) <= 0) continue;
        const stored = entity.takeNext(out.sessionId ?? '');
        if (!stored) continue;
        this.deliver(out, stored);
        progress = true;
      }
    }
  }

  private deliver(out: Outbound, stored: StoredMessage): void {
    const { entity, link } = out;
    if (out.receiveAndDelete) {
      entity.take(stored);
      link.send(wireMessage(stored, undefined));
      return;
    }
    const record = out.sessionId === undefined ? undefined : entity.sessions.get(out.sessionId);
    const until = record ? record.lockedUntil : Date.now() + entity.settings.lockDurationMs;
    const lock = entity.lock(stored, out, until, record === undefined);
    const delivery = link.send(wireMessage(stored, until), dotNetGuidOrder(guidBytes(lock.token)));
    delivery.serviceBusLock = lock.token;
  }

  /**
   * Settles one delivery in a disposition frame of its own. rhea 3.0.5 merges the
   * dispositions written in one pass when their delivery ids are consecutive, and its
   * check for equal outcomes skips the second delivery of a run: a lock-lost answer
   * written beside a success would reach the client as a success (or the reverse).
   * Node runs the nextTick queue (where rhea writes) between setImmediate callbacks.
   */
  protected settleDelivery(delivery: any, state: unknown): void {
    setImmediate(() => delivery.update(true, state));
  }

  /**
   * Settles a delivery we sent, in answer to the client's outcome: nothing more comes from
   * the client for it. In peek-lock (rcv-settle-mode second) the receiver settles on our
   * settled disposition without a frame of its own (AMQP 1.0, 2.6.12), and rhea drops an
   * outgoing delivery from the session's buffer only once the peer has settled it: marked
   * here, or the buffer's 2048 slots fill and the link stops sending for good.
   */
  private settleOutcome(delivery: any, state: unknown): void {
    setImmediate(() => {
      delivery.update(true, state);
      // After update(): it queues the disposition only for a delivery not yet remote-settled.
      delivery.remote_settled = true;
    });
  }

  /** A client settled a delivery: apply the outcome if the lock holds, then settle it. */
  protected onOutcome(
    link: any,
    delivery: any,
    outcome: 'accepted' | 'rejected' | 'modified' | 'released',
  ): void {
    const role = this.roles.get(link);
    const token: string | undefined = delivery.serviceBusLock;
    if (role?.kind !== 'outbound' || token === undefined) {
      this.settleOutcome(delivery, amqp.accepted().described());
      return;
    }
    const out = role.outbound;
    const { entity } = out;
    const stored = entity.lockedBy(token);
    const sessionLost = out.sessionId !== undefined && entity.sessions.get(out.sessionId)?.holder !== out;
    if (!stored || sessionLost) {
      const condition = out.sessionId === undefined ? CONDITIONS.messageLockLost : CONDITIONS.sessionLockLost;
      this.settleOutcome(
        delivery,
        amqp
          .rejected({
            error: {
              condition,
              description:
                'The lock supplied is invalid. Either the lock expired, or the message has already been removed from the queue.',
            },
          })
          .described(),
      );
      return;
    }
    const state = delivery.remote_state ?? {};
    switch (outcome) {
      case 'accepted':
        entity.complete(stored);
        this.settleOutcome(delivery, amqp.accepted().described());
        break;
      case 'released':
        entity.release(stored);
        this.settleOutcome(delivery, amqp.released().described());
        break;
      case 'modified':
        if (state.undeliverable_here) entity.defer(stored, plain(state.message_annotations));
        else entity.abandon(stored, plain(state.message_annotations));
        this.settleOutcome(
          delivery,
          amqp.modified({ undeliverable_here: Boolean(state.undeliverable_here) }).described(),
        );
        break;
      case 'rejected': {
        const error = state.error ?? {};
        const info = plain(error.info) ?? {};
        const { DeadLetterReason, DeadLetterErrorDescription, ...rest } = info as Record<string, unknown>;
        entity.deadLetter(
          stored,
          {
            reason: DeadLetterReason === undefined ? 'DeadLetteredByReceiver' : String(DeadLetterReason),
            description:
              DeadLetterErrorDescription === undefined ? undefined : String(DeadLetterErrorDescription),
          },
          rest,
        );
        // Settled without an error: the client treats an error in the settled state as a failure.
        this.settleOutcome(delivery, amqp.rejected({}).described());
        break;
      }
    }
    this.schedulePump(entity);
  }
}

/** Credit left on an emulator sender link, minus transfers rhea has queued but not written. */
function creditOf(link: any): number {
  if (!link.is_open()) return 0;
  const outgoing = link.session.outgoing;
  if (!outgoing.available()) return 0;
  const queued = outgoing.next_delivery_id - outgoing.next_pending_delivery;
  return link.credit - queued;
}

function ticksOf(ms: number): Buffer {
  const buf = Buffer.alloc(8);
  buf.writeBigInt64BE(BigInt(Math.floor(ms)) * 10_000n + EPOCH_TICKS);
  return buf;
}

/**
 * Makes the flow frame that answers this drain carry drain = true, with any credit left
 * consumed. AMQP 1.0 (2.6.7) wants the drain echoed whatever the credit; rhea's sender
 * sets it only while credit is left (`Sender._get_drain`), so a drain arriving after the
 * messages used every credit went unanswered: the SDK waits 200 ms for the echo, then
 * closes the link and strands the settlements of what it received on it. The answer
 * clears `_draining`, so only that one flow carries the flag; the client's next drain sets
 * it again.
 */
function echoDrain(link: any): void {
  link._get_drain = function getDrain(this: any): boolean {
    if (!(this._draining && this._drained)) return false;
    this.delivery_count += this.credit;
    this.credit = 0;
    this._draining = false;
    return true;
  };
}
