/**
 * The public emulator: its options, start and stop, and the test hooks (disconnect, restart,
 * expire locks, inspect). The protocol layers it stands on, each a base class:
 * entities.ts → delivery.ts → management.ts → links.ts (shared shapes in model.ts).
 */
import { createServer, type Server as HttpServer } from 'node:http';
import type { AddressInfo, Server, Socket } from 'node:net';
import { handleAdmin } from './admin.js';
import { type EmulatorConfig, namespacesOf } from './config.js';
import { LinkRouter } from './links.js';
import type { AmqpMessage } from './MessageEntity.js';

/** The start of an HTTP request (what the administration client sends). */
const HTTP_METHOD = /^(GET|PUT|POST|DELETE|HEAD|OPTIONS|PATCH) /;
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
  /**
   * Serve the HTTP administration API (`ServiceBusAdministrationClient`, SDK 7.10+) on this
   * port (0: a free one), as the official emulator does on 5300, and on the AMQP port too
   * (so one connection string serves both clients). @default off
   */
  adminPort?: number;
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

/**
 * An Azure Service Bus namespace over AMQP 1.0, in this process, for tests and local
 * development: the real `@azure/service-bus` client talks to it with nothing but the
 * connection string changed (`UseDevelopmentEmulator=true`).
 *
 * Emulated: SASL ANONYMOUS and PLAIN, `$cbs` put-token, queues, topics with
 * subscriptions (SQL and correlation filters, SQL actions, the rule manager's
 * operations), batch delete, peek-lock and receive-and-delete with link
 * credit, complete/abandon/defer/dead-letter, lock expiry and MaxDeliveryCount,
 * `$DeadLetterQueue`, TTL, scheduled messages, duplicate detection, sessions (session
 * lock, state, accept-next-session), the `$management` operations the client uses, and
 * with `adminPort` the HTTP administration API (`ServiceBusAdministrationClient` 7.10+).
 * Test hooks: {@link disconnect}, {@link restart}, {@link expireLocks},
 * {@link expireSessionLock}, {@link inspect}.
 *
 * @example
 * ```ts
 * const emulator = await startServiceBusEmulator({ port: 0 });
 * emulator.createQueue('orders', { LockDuration: 'PT5S', MaxDeliveryCount: 5 });
 * const client = new ServiceBusClient(emulator.connectionString);
 * ```
 */
export class ServiceBusEmulator extends LinkRouter {
  readonly namespace: string;
  private server: Server | undefined;
  private readonly sockets = new Set<Socket>();
  private listenPort: number;
  private readonly host: string;
  private adminServer: HttpServer | undefined;
  private adminListenPort: number | undefined;

  constructor(options: ServiceBusEmulatorOptions = {}) {
    super();
    this.listenPort = options.port ?? 5672;
    this.host = options.host ?? '127.0.0.1';
    this.log = options.log ?? (() => {});
    this.adminListenPort = options.adminPort;
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

  /** The administration API's port (after {@link start}), or undefined when it is off. */
  get adminPort(): number | undefined {
    return this.adminListenPort;
  }

  /**
   * A connection string for `new ServiceBusAdministrationClient(...)` (SDK 7.10+: with
   * `UseDevelopmentEmulator=true` it speaks plain http to the port), or undefined when
   * the administration API is off.
   *
   * @example
   * ```ts
   * new ServiceBusAdministrationClient(emulator.adminConnectionString!);
   * ```
   */
  get adminConnectionString(): string | undefined {
    if (this.adminListenPort === undefined) return undefined;
    return `Endpoint=sb://${this.host}:${this.adminListenPort};SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true`;
  }

  /** @internal The entity at a path, for the administration API. */
  entityAt(path: string) {
    return this.resolveEntity(path);
  }

  /** Starts listening. */
  async start(): Promise<void> {
    await this.startAdmin();
    const server = this.container.listen({
      port: this.listenPort,
      host: this.host,
      // Settlement is the emulator's decision: nothing is accepted or settled for it.
      autoaccept: false,
      autosettle: false,
      treat_modified_as_released: false,
    }) as Server;
    // rhea takes every connection as AMQP; take its listener over, so that with the
    // administration API on, an HTTP request on this port goes there instead (below).
    const acceptAmqp = server.listeners('connection')[0] as (socket: Socket) => void;
    server.removeListener('connection', acceptAmqp);
    server.on('connection', (socket: Socket) => {
      // Small frames (flow, disposition) must not wait for Nagle's algorithm.
      socket.setNoDelay(true);
      this.sockets.add(socket);
      socket.on('close', () => this.sockets.delete(socket));
      this.dispatch(socket, acceptAmqp);
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
    const admin = this.adminServer;
    this.adminServer = undefined;
    if (admin) {
      admin.closeAllConnections();
      await new Promise<void>((resolve) => admin.close(() => resolve()));
    }
    for (const entity of this.allEntities()) entity.dispose();
    for (const waiter of this.sessionWaiters) clearTimeout(waiter.timer);
    this.sessionWaiters.clear();
  }

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
   * Lets a session's lock run out now, as if its holder had not renewed it in time (test
   * hook for "the session lock is lost"; a lock the client keeps renewing otherwise never
   * runs out): the holder's link is detached with `session-lock-lost`, its renewals and
   * settlements fail with `SessionLockLost`, and the session's locked messages come back
   * with a higher delivery count. Returns false when nobody holds the session.
   *
   * @example
   * ```ts
   * emulator.expireSessionLock('orders', 'customer-7');
   * ```
   */
  expireSessionLock(entityPath: string, sessionId: string): boolean {
    const entity = this.resolveEntity(entityPath);
    if (!entity) throw new Error(`no entity ${entityPath}`);
    const record = entity.sessions.get(sessionId);
    const holder = record?.holder;
    if (!record || !holder) return false;
    entity.releaseSession(record, holder);
    this.onSessionLockLost(entity, record);
    return true;
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

  /**
   * One connection string for both clients: `ServiceBusAdministrationClient` given the
   * AMQP connection string (as the official samples do) sends its HTTP requests to this
   * port. With the administration API on, the first bytes decide: an HTTP method goes to
   * the administration server, anything else (the AMQP header, a TLS handshake that
   * links.ts reports) to rhea, with the bytes put back first.
   */
  private dispatch(socket: Socket, acceptAmqp: (socket: Socket) => void): void {
    const admin = this.adminServer;
    if (!admin) {
      acceptAmqp(socket);
      return;
    }
    socket.once('data', (first: Buffer) => {
      socket.pause();
      socket.unshift(first);
      if (HTTP_METHOD.test(first.subarray(0, 8).toString('latin1'))) admin.emit('connection', socket);
      else acceptAmqp(socket);
      socket.resume();
    });
  }

  /** The HTTP administration API, once (a restart keeps it). */
  private async startAdmin(): Promise<void> {
    if (this.adminListenPort === undefined || this.adminServer) return;
    const server = createServer((req, res) => {
      handleAdmin(this, req, res).catch((error: Error) => {
        res.writeHead(500);
        res.end(String(error.message));
      });
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.adminListenPort, this.host, () => resolve());
    });
    this.adminServer = server;
    this.adminListenPort = (server.address() as AddressInfo).port;
    this.log(`Service Bus administration API listening on http://${this.host}:${this.adminListenPort}`);
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
