import { randomUUID } from 'node:crypto';
import type { AddressInfo, Server, Socket } from 'node:net';
import rhea from 'rhea';
import {
  type CorrelationFilter,
  type EmulatorConfig,
  type EntitySettings,
  namespacesOf,
  type QueueProperties,
  queueSettings,
  type RuleConfig,
  type TopicProperties,
} from './config.js';
import {
  type AmqpMessage,
  dotNetGuidOrder,
  type EntityHooks,
  formatGuid,
  guidBytes,
  type LockHolder,
  MessageEntity,
  type SessionRecord,
  type StoredMessage,
} from './MessageEntity.js';

const amqp = rhea.message as any;
const types = rhea.types as any;

/** Message format of a batched send (`ServiceBusMessageBatch`): data sections of encoded messages. */
export const BATCH_MESSAGE_FORMAT = 0x80013700;
const SESSION_FILTER = 'com.microsoft:session-filter';
const LOCKED_UNTIL_UTC = 'com.microsoft:locked-until-utc';
const SERVER_TIMEOUT = 'com.microsoft:timeout';
/** .NET ticks (100 ns since 0001-01-01) at the Unix epoch. */
const EPOCH_TICKS = 621_355_968_000_000_000n;
/** The service's message size limit on the Standard tier. */
const MAX_MESSAGE_SIZE = 256 * 1024;
/** How long accept-next-session waits for a session when the client names no timeout. */
const DEFAULT_ACCEPT_SESSION_WAIT_MS = 60_000;

/** Error conditions the client maps to its error codes (`ServiceBusError.code`). */
export const CONDITIONS = {
  messageLockLost: 'com.microsoft:message-lock-lost',
  sessionLockLost: 'com.microsoft:session-lock-lost',
  sessionCannotBeLocked: 'com.microsoft:session-cannot-be-locked',
  messageNotFound: 'com.microsoft:message-not-found',
  timeout: 'com.microsoft:timeout',
  entityNotFound: 'amqp:not-found',
  notAllowed: 'amqp:not-allowed',
  notImplemented: 'amqp:not-implemented',
  argumentError: 'com.microsoft:argument-error',
  deadLetter: 'com.microsoft:dead-letter',
} as const;

/**
 * Options of {@link startServiceBusEmulator}.
 *
 * @example
 * ```ts
 * const options: ServiceBusEmulatorOptions = { port: 0, config: { Namespaces: [{ Name: 'sbemulatorns', Queues: [{ Name: 'orders' }] }] } };
 * ```
 */
export interface ServiceBusEmulatorOptions {
  /** TCP port; 0 picks a free one. @default 5672 */
  port?: number;
  /** @default '127.0.0.1' */
  host?: string;
  /** Entities to create at start, in the shape of the official emulator's `Config.json`. */
  config?: EmulatorConfig;
  /** Where to write one-line logs (the CLI passes console.log). @default silent */
  log?: (line: string) => void;
}

/**
 * Counts of an entity's messages, for tests and inspection.
 *
 * @example
 * ```ts
 * const { active, locked } = emulator.inspect('orders');
 * ```
 */
export interface EntitySnapshot {
  /** Ready to be received (not locked, not deferred, not scheduled). */
  active: number;
  locked: number;
  deferred: number;
  scheduled: number;
  /** Everything still stored on the entity. */
  total: number;
  /** Messages in its `$DeadLetterQueue`. */
  deadLettered: number;
  /** Accept-next-session requests held back until a session has messages (the client long-polls). */
  waitingForSession: number;
}

interface Subscription {
  name: string;
  entity: MessageEntity;
  rules: RuleConfig[];
}

interface Topic {
  name: string;
  ttlMs: number;
  requiresDuplicateDetection: boolean;
  duplicateDetectionWindowMs: number;
  subscriptions: Map<string, Subscription>;
}

/** An emulator-side sender link delivering an entity's messages to one client receiver. */
interface Outbound extends LockHolder {
  link: any;
  entity: MessageEntity;
  receiveAndDelete: boolean;
  sessionId?: string;
  closed: boolean;
}

/** What an emulator-side link is for. */
type LinkRole =
  | { kind: 'cbs' }
  | { kind: 'management'; address: string }
  | { kind: 'reply'; address: string }
  | { kind: 'inbound'; address: string }
  | { kind: 'outbound'; outbound: Outbound }
  | { kind: 'rejected' };

/** Duplicate detection's memory: message ID → when it leaves the window. */
type DuplicateHistory = Map<string, number>;

class ManagementError extends Error {
  constructor(
    readonly statusCode: number,
    readonly condition: string,
    message: string,
  ) {
    super(message);
  }
}

/**
 * An Azure Service Bus namespace over AMQP 1.0, in this process, for tests and local
 * development: the real `@azure/service-bus` client talks to it with nothing but the
 * connection string changed (`UseDevelopmentEmulator=true`).
 *
 * Emulated: SASL ANONYMOUS and PLAIN, `$cbs` put-token, queues, topics with
 * subscriptions (correlation filters), peek-lock and receive-and-delete with link
 * credit, complete/abandon/defer/dead-letter, lock expiry and MaxDeliveryCount,
 * `$DeadLetterQueue`, TTL, scheduled messages, duplicate detection, sessions (session
 * lock, state, accept-next-session) and the `$management` operations the client uses.
 * Test hooks: {@link disconnect}, {@link restart}, {@link expireLocks}, {@link inspect}.
 *
 * @example
 * ```ts
 * const emulator = await startServiceBusEmulator({ port: 0 });
 * emulator.createQueue('orders', { LockDuration: 'PT5S', MaxDeliveryCount: 5 });
 * const client = new ServiceBusClient(emulator.connectionString);
 * ```
 */
export class ServiceBusEmulator {
  readonly namespace: string;
  private readonly container: any;
  private server: Server | undefined;
  private readonly sockets = new Set<Socket>();
  private readonly connections = new Set<any>();
  private readonly queues = new Map<string, MessageEntity>();
  private readonly queueNames = new Map<string, string>();
  private readonly topics = new Map<string, Topic>();
  private readonly duplicates = new Map<string, DuplicateHistory>();
  /** Scheduled sends to a topic: the topic's sequence number → the copies per subscription. */
  private readonly topicSchedules = new Map<
    string,
    Map<number, Array<{ entity: MessageEntity; seq: number }>>
  >();
  private topicSeq = 1;
  private readonly outbounds = new Map<MessageEntity, Set<Outbound>>();
  private readonly roles = new WeakMap<object, LinkRole>();
  private readonly sessionWaiters = new Set<{
    entity: MessageEntity;
    link: any;
    out: Outbound;
    timer: NodeJS.Timeout;
  }>();
  private readonly pumpQueued = new Set<MessageEntity>();
  private readonly hooks: EntityHooks;
  private readonly log: (line: string) => void;
  private nextOutboundId = 1;
  private listenPort: number;
  private readonly host: string;

  constructor(options: ServiceBusEmulatorOptions = {}) {
    this.listenPort = options.port ?? 5672;
    this.host = options.host ?? '127.0.0.1';
    this.log = options.log ?? (() => {});
    this.hooks = {
      wake: (entity) => this.schedulePump(entity),
      sessionLockLost: (entity, session) => this.onSessionLockLost(entity, session),
    };
    const namespaces = namespacesOf(options.config);
    if (namespaces.length > 1) throw new Error('the emulator hosts one namespace; the config names several');
    this.namespace = namespaces[0]?.Name ?? 'sbemulatorns';
    for (const queue of namespaces[0]?.Queues ?? []) this.createQueue(queue.Name, queue.Properties);
    for (const topic of namespaces[0]?.Topics ?? []) {
      this.createTopic(topic.Name, topic.Properties);
      for (const sub of topic.Subscriptions ?? []) {
        this.createSubscription(topic.Name, sub.Name, sub.Properties, sub.Rules);
      }
    }
    this.container = rhea.create_container({ id: `oncely-servicebus-emulator-${process.pid}` });
    // PLAIN accepts any key: the emulator checks no credentials (nor does the official one).
    this.container.sasl_server_mechanisms.enable_anonymous();
    this.container.sasl_server_mechanisms.enable_plain(() => true);
    this.wireEvents();
  }

  /** The port it listens on (after {@link start}). */
  get port(): number {
    return this.listenPort;
  }

  /**
   * A connection string for `new ServiceBusClient(...)`: plain TCP, SASL ANONYMOUS.
   *
   * @example
   * ```ts
   * new ServiceBusClient(emulator.connectionString);
   * ```
   */
  get connectionString(): string {
    return `Endpoint=sb://${this.host}:${this.listenPort};SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true`;
  }

  /** Starts listening. */
  async start(): Promise<void> {
    const server = this.container.listen({
      port: this.listenPort,
      host: this.host,
      // Settlement is the emulator's decision: nothing is accepted or settled for it.
      autoaccept: false,
      autosettle: false,
      treat_modified_as_released: false,
    }) as Server;
    server.on('connection', (socket: Socket) => {
      // Small frames (flow, disposition) must not wait for Nagle's algorithm.
      socket.setNoDelay(true);
      this.sockets.add(socket);
      socket.on('close', () => this.sockets.delete(socket));
    });
    await new Promise<void>((resolve, reject) => {
      server.once('listening', resolve);
      server.once('error', reject);
    });
    this.server = server;
    this.listenPort = (server.address() as AddressInfo).port;
    this.log(
      `Service Bus emulator (namespace ${this.namespace}) listening on amqp://${this.host}:${this.listenPort}`,
    );
  }

  /** Stops listening, drops every connection and stops every timer. */
  async stop(): Promise<void> {
    await this.closeServer();
    for (const entity of this.allEntities()) entity.dispose();
    for (const waiter of this.sessionWaiters) clearTimeout(waiter.timer);
    this.sessionWaiters.clear();
  }

  // ------------------------------------------------------------------------------------
  // Entities
  // ------------------------------------------------------------------------------------

  /**
   * Creates a queue (run-time counterpart of `Config.json`'s `Queues`). Replaces nothing:
   * throws when it exists.
   *
   * @example
   * ```ts
   * emulator.createQueue('orders', { LockDuration: 'PT2S', MaxDeliveryCount: 3, RequiresDuplicateDetection: true, DuplicateDetectionHistoryTimeWindow: 'PT1M' });
   * ```
   */
  createQueue(name: string, properties: QueueProperties = {}): void {
    const key = name.toLowerCase();
    if (this.queues.has(key) || this.topics.has(key)) throw new Error(`entity ${name} already exists`);
    this.queues.set(key, new MessageEntity(name, queueSettings(properties, name), this.hooks));
    this.queueNames.set(key, name);
  }

  /** Creates a topic. */
  createTopic(name: string, properties: TopicProperties = {}): void {
    const key = name.toLowerCase();
    if (this.queues.has(key) || this.topics.has(key)) throw new Error(`entity ${name} already exists`);
    const settings = queueSettings(
      {
        DefaultMessageTimeToLive: properties.DefaultMessageTimeToLive,
        RequiresDuplicateDetection: properties.RequiresDuplicateDetection,
        DuplicateDetectionHistoryTimeWindow: properties.DuplicateDetectionHistoryTimeWindow,
      },
      name,
    );
    this.topics.set(key, {
      name,
      ttlMs: settings.defaultTtlMs,
      requiresDuplicateDetection: settings.requiresDuplicateDetection,
      duplicateDetectionWindowMs: settings.duplicateDetectionWindowMs,
      subscriptions: new Map(),
    });
  }

  /**
   * Creates a subscription. Without rules every message matches (the `$Default` rule);
   * with rules a message matches when any rule does. Rules are correlation filters or
   * the SQL filter `1=1`.
   *
   * @example
   * ```ts
   * emulator.createSubscription('events', 'audit', { MaxDeliveryCount: 5 }, [
   *   { Name: 'orders-only', Properties: { FilterType: 'Correlation', CorrelationFilter: { Subject: 'order' } } },
   * ]);
   * ```
   */
  createSubscription(
    topicName: string,
    name: string,
    properties: QueueProperties = {},
    rules: RuleConfig[] = [],
  ): void {
    const topic = this.topics.get(topicName.toLowerCase());
    if (!topic) throw new Error(`topic ${topicName} does not exist`);
    if (topic.subscriptions.has(name.toLowerCase()))
      throw new Error(`subscription ${topicName}/${name} already exists`);
    for (const rule of rules) {
      const sql = rule.Properties.SqlFilter?.SqlExpression?.trim();
      if (rule.Properties.FilterType === 'Sql' && sql !== '1=1' && sql !== '1 = 1') {
        throw new Error(`rule ${rule.Name}: only correlation filters and the SQL filter 1=1 are emulated`);
      }
    }
    const settings = queueSettings(properties, `${topicName}/${name}`);
    settings.defaultTtlMs = Math.min(settings.defaultTtlMs, topic.ttlMs);
    topic.subscriptions.set(name.toLowerCase(), {
      name,
      entity: new MessageEntity(`${topic.name}/Subscriptions/${name}`, settings, this.hooks),
      rules,
    });
  }

  /** Deletes a queue with its messages; links to it are closed. */
  deleteQueue(name: string): void {
    const entity = this.queues.get(name.toLowerCase());
    if (!entity) return;
    this.detachEntity(entity);
    this.queues.delete(name.toLowerCase());
  }

  /** Deletes a topic with its subscriptions. */
  deleteTopic(name: string): void {
    const topic = this.topics.get(name.toLowerCase());
    if (!topic) return;
    for (const sub of topic.subscriptions.values()) this.detachEntity(sub.entity);
    this.topics.delete(name.toLowerCase());
  }

  /** An entity's settings (queue or `topic/Subscriptions/name`), or undefined. */
  settingsOf(path: string): EntitySettings | undefined {
    return this.resolveEntity(path)?.settings;
  }

  private detachEntity(entity: MessageEntity): void {
    for (const candidate of [entity, entity.deadLetterQueue]) {
      if (!candidate) continue;
      for (const out of this.outbounds.get(candidate) ?? []) {
        out.link.close({
          condition: CONDITIONS.entityNotFound,
          description: `${candidate.path} was deleted`,
        });
        this.closeOutbound(out);
      }
    }
    entity.dispose();
  }

  private allEntities(): MessageEntity[] {
    const list = [...this.queues.values()];
    for (const topic of this.topics.values())
      for (const sub of topic.subscriptions.values()) list.push(sub.entity);
    return list;
  }

  /** Resolves `<queue>`, `<topic>/Subscriptions/<sub>` and their `/$DeadLetterQueue`. */
  private resolveEntity(address: string): MessageEntity | undefined {
    let path = stripAddress(address);
    let deadLetter = false;
    if (/\/\$deadletterqueue$/i.test(path)) {
      deadLetter = true;
      path = path.slice(0, -'/$DeadLetterQueue'.length);
    }
    let entity: MessageEntity | undefined;
    const parts = path.split('/');
    if (parts.length === 1) entity = this.queues.get(path.toLowerCase());
    else if (parts.length === 3 && parts[1]!.toLowerCase() === 'subscriptions') {
      entity = this.topics.get(parts[0]!.toLowerCase())?.subscriptions.get(parts[2]!.toLowerCase())?.entity;
    }
    return deadLetter ? entity?.deadLetterQueue : entity;
  }

  // ------------------------------------------------------------------------------------
  // Test hooks
  // ------------------------------------------------------------------------------------

  /**
   * Server-side disconnect: drops every client connection (the sockets are destroyed, as
   * when a gateway restarts). State, locks included, is kept; clients reconnect.
   * Returns how many connections were dropped.
   *
   * @example
   * ```ts
   * emulator.disconnect();
   * ```
   */
  disconnect(): number {
    const count = this.sockets.size;
    this.dropConnections();
    return count;
  }

  /**
   * Drops every connection the way rhea aborts one (`abort_socket`: the socket ended,
   * its listeners removed, destroyed, the connection marked disconnected). Destroying the
   * socket alone would leave rhea's heartbeat timer of the connection running forever.
   */
  private dropConnections(): void {
    for (const connection of [...this.connections]) {
      if (connection.socket) connection.abort_socket(connection.socket);
      this.onConnectionGone(connection);
    }
    for (const socket of this.sockets) socket.destroy();
    this.sockets.clear();
  }

  /**
   * Detaches every client link with an error (`amqp:link:detach-forced`) while keeping
   * the connections: clients re-attach.
   */
  detachAll(): number {
    let count = 0;
    for (const outs of this.outbounds.values()) {
      for (const out of [...outs]) {
        out.link.close({
          condition: 'amqp:link:detach-forced',
          description: 'detached by the emulator (test hook)',
        });
        this.closeOutbound(out);
        count++;
      }
    }
    return count;
  }

  /**
   * Restarts the namespace the way a durable one restarts: every connection drops, nothing
   * listens for `downMs`, then it listens again on the same port with every entity,
   * message, lock and session state kept.
   *
   * @example
   * ```ts
   * await emulator.restart({ downMs: 500 });
   * ```
   */
  async restart(options: { downMs?: number } = {}): Promise<void> {
    await this.closeServer();
    if (options.downMs) await new Promise((resolve) => setTimeout(resolve, options.downMs));
    await this.start();
  }

  /**
   * Lets the locks of matching messages on an entity expire now (test hook for "the lease
   * lapsed"): each counts as a failed delivery and is handed out again, or dead-lettered
   * past MaxDeliveryCount. Returns how many locks expired.
   *
   * @example
   * ```ts
   * emulator.expireLocks('orders', (m) => m.message_id === 'order-1');
   * ```
   */
  expireLocks(entityPath: string, select: (message: AmqpMessage) => boolean = () => true): number {
    const entity = this.resolveEntity(entityPath);
    if (!entity) throw new Error(`no entity ${entityPath}`);
    return entity.expireLocks(select);
  }

  /**
   * Message counts of a queue, a subscription or a dead-letter queue, and how many
   * accept-next-session requests wait on it.
   *
   * @example
   * ```ts
   * expect(emulator.inspect('orders').total).toBe(0);
   * ```
   */
  inspect(entityPath: string): EntitySnapshot {
    const entity = this.resolveEntity(entityPath);
    if (!entity) throw new Error(`no entity ${entityPath}`);
    let waitingForSession = 0;
    for (const waiter of this.sessionWaiters) if (waiter.entity === entity) waitingForSession++;
    return {
      ...entity.counts(),
      deadLettered: entity.deadLetterQueue?.messages.size ?? 0,
      waitingForSession,
    };
  }

  /**
   * The stored messages of an entity (decoded AMQP, in sequence order), for assertions.
   *
   * @example
   * ```ts
   * const reasons = emulator.messages('orders/$DeadLetterQueue').map((m) => m.application_properties?.DeadLetterReason);
   * ```
   */
  messages(entityPath: string): AmqpMessage[] {
    const entity = this.resolveEntity(entityPath);
    if (!entity) throw new Error(`no entity ${entityPath}`);
    return [...entity.messages.values()].map((m) => m.amqp);
  }

  private async closeServer(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    this.dropConnections();
    if (!server) return;
    // close() calls back once every connection has ended; the sockets were destroyed
    // above, so this is quick, but never let a straggler hold stop() or restart().
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, 1000);
      timer.unref();
      server.close(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }

  // ------------------------------------------------------------------------------------
  // AMQP events
  // ------------------------------------------------------------------------------------

  private wireEvents(): void {
    const c = this.container;
    c.on('connection_open', (context: any) => this.connections.add(context.connection));
    c.on('connection_close', (context: any) => this.onConnectionGone(context.connection));
    c.on('disconnected', (context: any) => this.onConnectionGone(context.connection));
    c.on('session_close', (context: any) => this.onSessionEnded(context.session));
    c.on('error', () => {});
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

  private onConnectionGone(connection: any): void {
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

  private bindSession(out: Outbound, sessionId: string, address: string): void {
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

  /** Attaches and at once detaches a link with an error: how the service refuses a link. */
  private refuse(link: any, condition: string, description: string, address?: string): void {
    this.roles.set(link, { kind: 'rejected' });
    if (address !== undefined) link.set_source({ address });
    link.close({ condition, description });
  }

  private addOutbound(out: Outbound): void {
    let set = this.outbounds.get(out.entity);
    if (!set) {
      set = new Set();
      this.outbounds.set(out.entity, set);
    }
    set.add(out);
    this.schedulePump(out.entity);
  }

  private closeOutbound(out: Outbound): void {
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
  private onSessionLockLost(entity: MessageEntity, session: SessionRecord): void {
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

  // ------------------------------------------------------------------------------------
  // Sending into entities
  // ------------------------------------------------------------------------------------

  /** Enqueues one message sent to a queue or topic; returns its sequence number (-1: duplicate dropped). */
  private accept(address: string, message: AmqpMessage, scheduledAt?: number): number {
    const key = address.toLowerCase();
    // The service gives a message without a MessageId one of its own (a GUID in hex).
    if (message.message_id === undefined || message.message_id === null) {
      message.message_id = randomUUID().replaceAll('-', '');
    }
    const when = scheduledAt ?? scheduledTimeOf(message);
    const queue = this.queues.get(key);
    if (queue) {
      if (this.isDuplicate(key, message, queue.settings)) return -1;
      checkSession(queue, message);
      return queue.enqueue(message, { scheduledAt: when });
    }
    const topic = this.topics.get(key);
    if (!topic)
      throw new ManagementError(
        404,
        CONDITIONS.entityNotFound,
        `The messaging entity '${address}' could not be found.`,
      );
    if (this.isDuplicate(key, message, topic)) return -1;
    const copies: Array<{ entity: MessageEntity; seq: number }> = [];
    for (const sub of topic.subscriptions.values()) {
      if (!matches(sub.rules, message)) continue;
      checkSession(sub.entity, message);
      copies.push({
        entity: sub.entity,
        seq: sub.entity.enqueue(structuredCopy(message), { scheduledAt: when }),
      });
    }
    const seq = this.topicSeq++;
    if (when !== undefined && when > Date.now()) {
      let schedules = this.topicSchedules.get(key);
      if (!schedules) {
        schedules = new Map();
        this.topicSchedules.set(key, schedules);
      }
      schedules.set(seq, copies);
    }
    return seq;
  }

  /**
   * Duplicate detection: a `MessageId` seen within the window is accepted and dropped.
   * Only the ID is compared, as by the service.
   */
  private isDuplicate(
    key: string,
    message: AmqpMessage,
    settings: { requiresDuplicateDetection: boolean; duplicateDetectionWindowMs: number },
  ): boolean {
    if (
      !settings.requiresDuplicateDetection ||
      message.message_id === undefined ||
      message.message_id === null
    ) {
      return false;
    }
    const id = idString(message.message_id);
    let history = this.duplicates.get(key);
    if (!history) {
      history = new Map();
      this.duplicates.set(key, history);
    }
    const now = Date.now();
    const until = history.get(id);
    if (until !== undefined && until > now) return true;
    if (history.size > 10_000) for (const [k, v] of history) if (v <= now) history.delete(k);
    history.set(id, now + settings.duplicateDetectionWindowMs);
    return false;
  }

  // ------------------------------------------------------------------------------------
  // Delivering
  // ------------------------------------------------------------------------------------

  private schedulePump(entity: MessageEntity): void {
    if (this.pumpQueued.has(entity)) return;
    this.pumpQueued.add(entity);
    setImmediate(() => {
      this.pumpQueued.delete(entity);
      this.pump(entity);
    });
  }

  private onSendable(link: any): void {
    const role = this.roles.get(link);
    if (role?.kind === 'outbound') this.pump(role.outbound.entity);
  }

  private onDraining(link: any): void {
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
  private settleDelivery(delivery: any, state: unknown): void {
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
  private onOutcome(
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

  // ------------------------------------------------------------------------------------
  // Request/response ($cbs and $management)
  // ------------------------------------------------------------------------------------

  /** Sends a reply on the link the requester receives replies on (its target is `reply_to`). */
  private reply(
    requestLink: any,
    address: string,
    request: AmqpMessage,
    properties: Record<string, unknown>,
    body?: unknown,
  ): void {
    const replyTo = request.reply_to;
    const replyLink = this.findReplyLink(requestLink.connection, address, replyTo);
    if (!replyLink) throw new Error(`no reply link for ${address} (reply_to ${String(replyTo)})`);
    const response: AmqpMessage = {
      correlation_id: request.message_id,
      to: replyTo,
      application_properties: properties,
    };
    if (body !== undefined) response.body = body;
    replyLink.send(response);
  }

  private findReplyLink(connection: any, address: string, replyTo: unknown): any {
    let fallback: any;
    const sessions: any[] = Object.values(connection.local_channel_map ?? {});
    for (const session of sessions) {
      const links: any[] = Object.values(session.links ?? {});
      for (const candidate of links) {
        const role = this.roles.get(candidate);
        if (role?.kind !== 'reply' || role.address.toLowerCase() !== address.toLowerCase()) continue;
        if (candidate.remote.attach?.target?.address === replyTo) return candidate;
        fallback ??= candidate;
      }
    }
    return fallback;
  }

  private onManagementRequest(link: any, address: string, request: AmqpMessage): void {
    const operation = String(request.application_properties?.operation ?? '');
    const entityPath = address.replace(/\/\$management$/i, '');
    let result: { status: number; body?: unknown };
    try {
      result = this.manage(entityPath, operation, (plain(request.body) ?? {}) as Record<string, any>);
    } catch (error) {
      const e =
        error instanceof ManagementError
          ? error
          : new ManagementError(500, 'amqp:internal-error', (error as Error).message);
      this.reply(link, address, request, {
        statusCode: e.statusCode,
        statusDescription: e.message,
        'error-condition': e.condition,
      });
      return;
    }
    this.reply(
      link,
      address,
      request,
      { statusCode: result.status, statusDescription: statusText(result.status) },
      result.body,
    );
  }

  private manage(
    entityPath: string,
    operation: string,
    body: Record<string, any>,
  ): { status: number; body?: unknown } {
    if (operation === 'com.microsoft:schedule-message') return this.scheduleMessages(entityPath, body);
    if (operation === 'com.microsoft:cancel-scheduled-message') return this.cancelScheduled(entityPath, body);
    const entity = this.resolveEntity(entityPath);
    if (!entity)
      throw new ManagementError(
        404,
        CONDITIONS.entityNotFound,
        `The messaging entity '${entityPath}' could not be found.`,
      );
    switch (operation) {
      case 'com.microsoft:renew-lock': {
        const expirations = tokensOf(body['lock-tokens']).map((token) => {
          const until = entity.renewLock(token);
          if (until === undefined) throw lockLost();
          return new Date(until);
        });
        return { status: 200, body: { expirations } };
      }
      case 'com.microsoft:peek-message':
        return this.peek(entity, body);
      case 'com.microsoft:receive-by-sequence-number':
        return this.receiveDeferred(entity, body);
      case 'com.microsoft:update-disposition':
        return this.updateDisposition(entity, body);
      case 'com.microsoft:renew-session-lock': {
        const record = entity.sessions.get(String(body['session-id']));
        if (!record?.holder) throw sessionLockLost(String(body['session-id']));
        return { status: 200, body: { expiration: new Date(entity.renewSession(record)) } };
      }
      case 'com.microsoft:get-session-state': {
        const record = entity.sessions.get(String(body['session-id']));
        return { status: 200, body: { 'session-state': record?.state ?? null } };
      }
      case 'com.microsoft:set-session-state': {
        const record = entity.session(String(body['session-id']));
        const state = body['session-state'];
        record.state = state === null || state === undefined ? undefined : Buffer.from(state);
        return { status: 200, body: {} };
      }
      case 'com.microsoft:get-message-sessions': {
        const ids = new Set<string>();
        for (const stored of entity.messages.values())
          if (stored.sessionId !== undefined) ids.add(stored.sessionId);
        for (const record of entity.sessions.values()) if (record.state !== undefined) ids.add(record.id);
        const skip = Number(body.skip ?? 0);
        const top = Number(body.top ?? 100);
        const list = [...ids].slice(skip, skip + top);
        if (list.length === 0) return { status: 204, body: {} };
        return { status: 200, body: { 'sessions-ids': list, skip: skip + list.length } };
      }
      default:
        throw new ManagementError(
          501,
          CONDITIONS.notImplemented,
          `The operation '${operation}' is not emulated.`,
        );
    }
  }

  private peek(entity: MessageEntity, body: Record<string, any>): { status: number; body?: unknown } {
    const from = toNumber(body['from-sequence-number'] ?? 1);
    const count = toNumber(body['message-count'] ?? 1);
    const sessionId =
      body['session-id'] === undefined || body['session-id'] === null
        ? undefined
        : String(body['session-id']);
    const messages: Array<{ message: Buffer }> = [];
    for (const stored of entity.messages.values()) {
      if (messages.length >= count) break;
      if (stored.seq < from) continue;
      if (sessionId !== undefined && stored.sessionId !== sessionId) continue;
      messages.push({ message: amqp.encode(wireMessage(stored, stored.lock?.until)) });
    }
    if (messages.length === 0) return { status: 204, body: {} };
    return { status: 200, body: { messages } };
  }

  private receiveDeferred(
    entity: MessageEntity,
    body: Record<string, any>,
  ): { status: number; body?: unknown } {
    const seqs = listOf(body['sequence-numbers']).map(toNumber);
    const peekLock = toNumber(body['receiver-settle-mode'] ?? 1) === 1;
    const found: StoredMessage[] = [];
    for (const seq of seqs) {
      const stored = entity.messages.get(seq);
      if (stored?.state !== 'deferred' || stored.lock) {
        throw new ManagementError(
          404,
          CONDITIONS.messageNotFound,
          `Failed to lock one or more specified messages. Either the message is not deferred or has already been received (sequence number ${seq}).`,
        );
      }
      found.push(stored);
    }
    const messages = found.map((stored) => {
      if (!peekLock) {
        const message = amqp.encode(wireMessage(stored, undefined));
        entity.take(stored);
        return { message };
      }
      const until = Date.now() + entity.settings.lockDurationMs;
      const lock = entity.lock(stored, undefined, until, true);
      return {
        message: amqp.encode(wireMessage(stored, until)),
        'lock-token': types.wrap_uuid(guidBytes(lock.token)),
      };
    });
    return { status: 200, body: { messages } };
  }

  private updateDisposition(
    entity: MessageEntity,
    body: Record<string, any>,
  ): { status: number; body?: unknown } {
    const status = String(body['disposition-status']);
    const properties = plain(body['properties-to-modify']) as Record<string, unknown> | undefined;
    for (const token of tokensOf(body['lock-tokens'])) {
      const stored = entity.lockedBy(token);
      if (!stored) throw lockLost();
      switch (status) {
        case 'completed':
          entity.complete(stored);
          break;
        case 'abandoned':
          entity.abandon(stored, properties);
          break;
        case 'defered':
        case 'deferred':
          entity.defer(stored, properties);
          break;
        case 'suspended':
          entity.deadLetter(
            stored,
            {
              reason:
                body['deadletter-reason'] === undefined
                  ? 'DeadLetteredByReceiver'
                  : String(body['deadletter-reason']),
              description:
                body['deadletter-description'] === undefined
                  ? undefined
                  : String(body['deadletter-description']),
            },
            properties,
          );
          break;
        default:
          throw new ManagementError(400, CONDITIONS.argumentError, `Unknown disposition-status '${status}'.`);
      }
    }
    this.schedulePump(entity);
    return { status: 200, body: {} };
  }

  private scheduleMessages(
    entityPath: string,
    body: Record<string, any>,
  ): { status: number; body?: unknown } {
    const path = stripAddress(entityPath);
    const entries = listOf(body.messages);
    const sequenceNumbers = entries.map((entry: any) => {
      const message = amqp.decode(Buffer.from(entry.message)) as AmqpMessage;
      return types.wrap_long(this.accept(path, message, scheduledTimeOf(message) ?? Date.now()));
    });
    return {
      status: 200,
      body: {
        'sequence-numbers': types.wrap_array(
          sequenceNumbers.map((s: any) => s.value),
          0x81,
        ),
      },
    };
  }

  private cancelScheduled(entityPath: string, body: Record<string, any>): { status: number; body?: unknown } {
    const key = stripAddress(entityPath).toLowerCase();
    for (const seq of listOf(body['sequence-numbers']).map(toNumber)) {
      const queue = this.queues.get(key);
      if (queue) {
        queue.cancelScheduled(seq);
        continue;
      }
      const copies = this.topicSchedules.get(key)?.get(seq) ?? [];
      for (const copy of copies) copy.entity.cancelScheduled(copy.seq);
      this.topicSchedules.get(key)?.delete(seq);
    }
    return { status: 200, body: {} };
  }
}

/**
 * Starts an emulator and resolves once it listens. In tests pass `port: 0` and use
 * {@link ServiceBusEmulator.connectionString}.
 *
 * @example
 * ```ts
 * const emulator = await startServiceBusEmulator({ port: 0, config: { Namespaces: [{ Name: 'sbemulatorns', Queues: [{ Name: 'orders' }] }] } });
 * const client = new ServiceBusClient(emulator.connectionString);
 * // ...
 * await emulator.stop();
 * ```
 */
export async function startServiceBusEmulator(
  options: ServiceBusEmulatorOptions = {},
): Promise<ServiceBusEmulator> {
  const emulator = new ServiceBusEmulator(options);
  await emulator.start();
  return emulator;
}

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

/** The message as the client receives it: the stored one plus the broker's annotations. */
function wireMessage(stored: StoredMessage, lockedUntil: number | undefined): AmqpMessage {
  const annotations: Record<string, unknown> = {
    ...(stored.amqp.message_annotations ?? {}),
    'x-opt-sequence-number': types.wrap_long(stored.seq),
    'x-opt-enqueued-time': new Date(stored.enqueuedAt),
  };
  if (lockedUntil !== undefined) annotations['x-opt-locked-until'] = new Date(lockedUntil);
  if (stored.state === 'deferred') annotations['x-opt-message-state'] = 1;
  else if (stored.state === 'scheduled') annotations['x-opt-message-state'] = 2;
  return { ...stored.amqp, delivery_count: stored.failedDeliveries, message_annotations: annotations };
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

function scheduledTimeOf(message: AmqpMessage): number | undefined {
  const value = message.message_annotations?.['x-opt-scheduled-enqueue-time'];
  if (value === undefined || value === null) return undefined;
  const ms = value instanceof Date ? value.getTime() : Number(value);
  return Number.isFinite(ms) ? ms : undefined;
}

function checkSession(entity: MessageEntity, message: AmqpMessage): void {
  if (entity.settings.requiresSession && typeof message.group_id !== 'string') {
    throw new ManagementError(
      400,
      CONDITIONS.argumentError,
      `The SessionId was not set on a message, and it cannot be sent to the entity '${entity.path}'. Entities that have session support enabled can only receive messages that have the SessionId set to a valid value.`,
    );
  }
}

function matches(rules: RuleConfig[], message: AmqpMessage): boolean {
  if (rules.length === 0) return true;
  return rules.some((rule) => {
    if (rule.Properties.FilterType === 'Sql') return true;
    const f: CorrelationFilter = rule.Properties.CorrelationFilter ?? {};
    const checks: Array<[unknown, unknown]> = [
      [f.CorrelationId, message.correlation_id],
      [f.MessageId, message.message_id],
      [f.To, message.to],
      [f.ReplyTo, message.reply_to],
      [f.Subject ?? f.Label, message.subject],
      [f.SessionId, message.group_id],
      [f.ReplyToSessionId, message.reply_to_group_id],
      [f.ContentType, message.content_type],
    ];
    for (const [want, have] of checks) {
      if (want !== undefined && want !== '' && String(have) !== String(want)) return false;
    }
    for (const [name, want] of Object.entries(f.Properties ?? {})) {
      if (String(message.application_properties?.[name]) !== String(want)) return false;
    }
    return true;
  });
}

/** Credit left on an emulator sender link, minus transfers rhea has queued but not written. */
function creditOf(link: any): number {
  if (!link.is_open()) return 0;
  const outgoing = link.session.outgoing;
  if (!outgoing.available()) return 0;
  const queued = outgoing.next_delivery_id - outgoing.next_pending_delivery;
  return link.credit - queued;
}

function stripAddress(address: string): string {
  let path = address.replace(/^amqps?:\/\/[^/]+\//i, '').replace(/^sb:\/\/[^/]+\//i, '');
  while (path.startsWith('/')) path = path.slice(1);
  return path;
}

function ticksOf(ms: number): Buffer {
  const buf = Buffer.alloc(8);
  buf.writeBigInt64BE(BigInt(Math.floor(ms)) * 10_000n + EPOCH_TICKS);
  return buf;
}

function idString(id: unknown): string {
  if (Buffer.isBuffer(id)) return id.toString('hex');
  return String(id);
}

function toNumber(value: unknown): number {
  if (typeof value === 'number') return value;
  if (typeof value === 'bigint') return Number(value);
  if (Buffer.isBuffer(value)) return value.length === 8 ? Number(value.readBigInt64BE()) : Number.NaN;
  if (value && typeof value === 'object' && 'value' in value)
    return toNumber((value as { value: unknown }).value);
  return Number(value);
}

function listOf(value: unknown): any[] {
  if (Array.isArray(value)) return value;
  if (value && typeof value === 'object' && 'value' in value)
    return listOf((value as { value: unknown }).value);
  return value === undefined || value === null ? [] : [value];
}

/** Lock tokens of a request (uuids arrive as 16-byte Buffers) as GUID strings. */
function tokensOf(value: unknown): string[] {
  return listOf(value).map((token) =>
    Buffer.isBuffer(token) ? formatGuid(token) : String(token).toLowerCase(),
  );
}

/** Unwraps rhea's typed values in a decoded map (one level). */
function plain(value: unknown): Record<string, unknown> | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'object') return undefined;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value as Record<string, unknown>)) out[k] = v;
  return out;
}

function structuredCopy(message: AmqpMessage): AmqpMessage {
  return amqp.decode(amqp.encode(message)) as AmqpMessage;
}

function lockLost(): ManagementError {
  return new ManagementError(
    410,
    CONDITIONS.messageLockLost,
    'The lock supplied is invalid. Either the lock expired, or the message has already been removed from the queue.',
  );
}

function sessionLockLost(sessionId: string): ManagementError {
  return new ManagementError(
    410,
    CONDITIONS.sessionLockLost,
    `The session lock of '${sessionId}' has expired or is not held.`,
  );
}

function statusText(status: number): string {
  return status === 204 ? 'No Content' : status === 202 ? 'Accepted' : 'OK';
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
