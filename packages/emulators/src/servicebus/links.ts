/**
 * Connection and link handling: the rhea container and its events, what each attached link
 * is for (cbs, management, reply, inbound, outbound, refused), and where its frames go.
 */
import rhea from 'rhea';
import type { AmqpMessage } from './MessageEntity.js';
import { ManagementService } from './management.js';
import {
  amqp,
  BATCH_MESSAGE_FORMAT,
  CONDITIONS,
  ManagementError,
  type Outbound,
  SESSION_FILTER,
  stripAddress,
} from './model.js';

const SERVER_TIMEOUT = 'com.microsoft:timeout';
/** The service's message size limit on the Standard tier. */
const MAX_MESSAGE_SIZE = 256 * 1024;
/** How long accept-next-session waits for a session when the client names no timeout. */
const DEFAULT_ACCEPT_SESSION_WAIT_MS = 60_000;

/** Accepts connections and links and routes each link's frames to its layer. */
export abstract class LinkRouter extends ManagementService {
  protected readonly container: any;
  protected readonly connections = new Set<any>();
  /** Where one-line logs go (the emulator's `log` option). */
  protected log: (line: string) => void = () => {};
  private nextOutboundId = 1;

  constructor() {
    super();
    this.container = rhea.create_container({ id: `oncely-servicebus-emulator-${process.pid}` });
    // PLAIN accepts any key: the emulator checks no credentials (nor does the official one).
    this.container.sasl_server_mechanisms.enable_anonymous();
    this.container.sasl_server_mechanisms.enable_plain(() => true);
    this.wireEvents();
  }

  private wireEvents(): void {
    const c = this.container;
    c.on('connection_open', (context: any) => this.connections.add(context.connection));
    c.on('connection_close', (context: any) => this.onConnectionGone(context.connection));
    c.on('disconnected', (context: any) => this.onConnectionGone(context.connection));
    c.on('session_close', (context: any) => this.onSessionEnded(context.session));
    c.on('error', () => {});
    // Without a listener rhea prints the whole first frame as hex to the console (~1.9 KB
    // for a TLS ClientHello); one line says what happened instead.
    c.on('protocol_error', (error: Error) => this.log(describeProtocolError(error)));
    c.on('connection_error', () => {});
    c.on('session_error', () => {});
    c.on('sender_error', () => {});
    c.on('receiver_error', () => {});
    c.on('sender_open', (context: any) => this.onSenderOpen(context.sender));
    c.on('receiver_open', (context: any) => this.onReceiverOpen(context.receiver));
    c.on('sender_close', (context: any) => this.onLinkClosed(context.sender));
    c.on('receiver_close', (context: any) => this.onLinkClosed(context.receiver));
    c.on('sendable', (context: any) => this.onSendable(context.sender));
    c.on('sender_draining', (context: any) => this.onDraining(context.sender));
    c.on('message', (context: any) => this.onMessage(context));
    for (const outcome of ['accepted', 'rejected', 'modified', 'released'] as const) {
      c.on(outcome, (context: any) => this.onOutcome(context.sender, context.delivery, outcome));
    }
  }

  protected onConnectionGone(connection: any): void {
    if (!this.connections.delete(connection)) return;
    for (const outs of this.outbounds.values()) {
      for (const out of [...outs]) if (out.link.connection === connection) this.closeOutbound(out);
    }
    for (const waiter of [...this.sessionWaiters]) {
      if (waiter.link.connection === connection) {
        clearTimeout(waiter.timer);
        this.sessionWaiters.delete(waiter);
      }
    }
  }

  private onLinkClosed(link: any): void {
    const role = this.roles.get(link);
    if (role?.kind === 'outbound') this.closeOutbound(role.outbound);
    for (const waiter of [...this.sessionWaiters]) {
      if (waiter.link === link) {
        clearTimeout(waiter.timer);
        this.sessionWaiters.delete(waiter);
      }
    }
  }

  /**
   * The client ended an AMQP session: its links are detached with it (AMQP 1.0, 2.7.7),
   * though rhea reports no link closing. Without this an accept-next-session waiter of
   * that session would be handed a session no one can receive, and a session receiver
   * would keep its session locked until the lock ran out.
   */
  private onSessionEnded(session: any): void {
    for (const link of Object.values<any>(session.links ?? {})) this.onLinkClosed(link);
  }

  /** A client receiver attached: the emulator sends on this link. */
  private onSenderOpen(link: any): void {
    const source = link.remote.attach?.source ?? {};
    const target = link.remote.attach?.target ?? {};
    const address = String(source.address ?? '');
    link.local.attach.snd_settle_mode = link.remote.attach?.snd_settle_mode ?? 0;
    link.local.attach.rcv_settle_mode = link.remote.attach?.rcv_settle_mode ?? 0;
    link.set_target({ address: target.address });
    if (address === '$cbs' || /\/\$management$/i.test(address)) {
      link.set_source({ address });
      this.roles.set(link, { kind: 'reply', address });
      return;
    }
    const entity = this.resolveEntity(address);
    if (!entity) {
      this.refuse(link, CONDITIONS.entityNotFound, `The messaging entity '${address}' could not be found.`);
      return;
    }
    const filter = source.filter ?? undefined;
    const wantsSession = filter !== undefined && filter !== null && SESSION_FILTER in filter;
    if (entity.settings.requiresSession && !wantsSession) {
      this.refuse(
        link,
        CONDITIONS.notAllowed,
        `It is not possible for an entity that requires sessions (${entity.path}) to create a non-sessionful message receiver.`,
      );
      return;
    }
    if (wantsSession && !entity.settings.requiresSession) {
      this.refuse(
        link,
        CONDITIONS.notAllowed,
        `${entity.path} does not require sessions: receive without a session.`,
      );
      return;
    }
    const out: Outbound = {
      id: this.nextOutboundId++,
      link,
      entity,
      receiveAndDelete: link.local.attach.snd_settle_mode === 1,
      closed: false,
    };
    this.roles.set(link, { kind: 'outbound', outbound: out });
    if (!wantsSession) {
      link.set_source({ address });
      this.addOutbound(out);
      return;
    }
    const requested = filter[SESSION_FILTER];
    if (typeof requested === 'string') {
      if (!entity.acquireSession(requested, out)) {
        this.refuse(
          link,
          CONDITIONS.sessionCannotBeLocked,
          `The requested session '${requested}' cannot be accepted. It may be locked by another receiver.`,
          address,
        );
        return;
      }
      this.bindSession(out, requested, address);
      return;
    }
    const free = entity.nextFreeSession();
    if (free !== undefined && entity.acquireSession(free, out)) {
      this.bindSession(out, free, address);
      return;
    }
    // Accept-next-session with nothing available: hold the attach back (the client
    // long-polls) until a session has messages or the client's timeout is near.
    link.state.local_open = false;
    link.state.open_requests = 0;
    const timeoutMs = Number(
      link.remote.attach?.properties?.[SERVER_TIMEOUT] ?? DEFAULT_ACCEPT_SESSION_WAIT_MS,
    );
    const waiter = {
      entity,
      link,
      out,
      timer: setTimeout(
        () => {
          this.sessionWaiters.delete(waiter);
          link.set_source({ address });
          link.open();
          link.close({ condition: CONDITIONS.timeout, description: 'No session became available in time.' });
        },
        Math.max(0, Math.min(timeoutMs, DEFAULT_ACCEPT_SESSION_WAIT_MS) - 100),
      ),
    };
    waiter.timer.unref();
    this.sessionWaiters.add(waiter);
  }

  /** Attaches and at once detaches a link with an error: how the service refuses a link. */
  private refuse(link: any, condition: string, description: string, address?: string): void {
    this.roles.set(link, { kind: 'rejected' });
    if (address !== undefined) link.set_source({ address });
    link.close({ condition, description });
  }

  /** A client sender (or a request link) attached: the emulator receives on this link. */
  private onReceiverOpen(link: any): void {
    const target = link.remote.attach?.target ?? {};
    const address = String(target.address ?? '');
    link.set_target({ address });
    link.set_source(link.remote.attach?.source ?? {});
    link.local.attach.max_message_size = MAX_MESSAGE_SIZE;
    if (address === '$cbs') {
      this.roles.set(link, { kind: 'cbs' });
      return;
    }
    if (/\/\$management$/i.test(address)) {
      this.roles.set(link, { kind: 'management', address });
      return;
    }
    const path = stripAddress(address);
    if (!this.queues.has(path.toLowerCase()) && !this.topics.has(path.toLowerCase())) {
      this.refuse(link, CONDITIONS.entityNotFound, `The messaging entity '${address}' could not be found.`);
      return;
    }
    this.roles.set(link, { kind: 'inbound', address: path });
  }

  private onMessage(context: any): void {
    const link = context.receiver;
    const delivery = context.delivery;
    const role = this.roles.get(link);
    if (!role) return;
    try {
      switch (role.kind) {
        case 'cbs':
          this.reply(link, '$cbs', context.message, { 'status-code': 202, 'status-description': 'Accepted' });
          break;
        case 'management':
          this.onManagementRequest(link, role.address, context.message);
          break;
        case 'inbound': {
          const messages =
            context.format === BATCH_MESSAGE_FORMAT
              ? unbatch(context.message as Buffer)
              : [context.message as AmqpMessage];
          for (const message of messages) this.accept(role.address, message);
          break;
        }
        default:
          break;
      }
      this.settleDelivery(delivery, amqp.accepted().described());
    } catch (error) {
      const { condition, message } =
        error instanceof ManagementError
          ? { condition: error.condition, message: error.message }
          : { condition: 'amqp:internal-error', message: (error as Error).message };
      this.settleDelivery(
        delivery,
        amqp.rejected({ error: { condition, description: message } }).described(),
      );
    }
  }
}

/**
 * One line for a connection that did not speak AMQP: a TLS handshake on the plain port
 * (its first byte is 0x16, a TLS handshake record) or anything else that is not an AMQP
 * protocol header.
 */
function describeProtocolError(error: Error): string {
  const header = /Invalid protocol header for AMQP: ([0-9a-f]+)/i.exec(error.message)?.[1];
  if (header === undefined) return `closed a connection on a protocol error: ${error.message.slice(0, 200)}`;
  if (header.startsWith('16030')) {
    return 'closed a connection that began a TLS handshake: this port speaks plain AMQP only (no TLS); use a connection string with UseDevelopmentEmulator=true';
  }
  const text = Buffer.from(header, 'hex')
    .toString('latin1')
    .replace(/[^\x20-\x7e]/g, '.');
  return `closed a connection whose first bytes (0x${header} '${text}') are not an AMQP protocol header`;
}

/** The messages inside a batched transfer (format 0x80013700): one data section each. */
function unbatch(payload: Buffer): AmqpMessage[] {
  const envelope = amqp.decode(payload) as AmqpMessage;
  const body = envelope.body;
  const contents: Buffer[] = body?.multiple
    ? (body.content as Buffer[])
    : body?.content
      ? [body.content as Buffer]
      : [];
  return contents.map((content) => amqp.decode(Buffer.from(content)) as AmqpMessage);
}
