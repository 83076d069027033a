import { createConnection, createServer, type Server, type Socket } from 'node:net';

/**
 * Where a {@link TcpProxy} forwards to.
 *
 * @example
 * ```ts
 * const target: TcpProxyTarget = { host: '127.0.0.1', port: 5432 };
 * ```
 */
export interface TcpProxyTarget {
  host: string;
  port: number;
}

/**
 * A TCP forwarder on 127.0.0.1 that a test can cut and reopen, to simulate a database
 * (or broker) outage without restarting a shared server. While cut, connecting is
 * refused and every connection that was open is gone, which is what clients see when
 * the server dies.
 *
 * @example
 * ```ts
 * const proxy = new TcpProxy({ host: '127.0.0.1', port: 5432 });
 * const port = await proxy.start();
 * const store = new PostgresStore({ connectionString: `postgres://postgres@127.0.0.1:${port}/test` });
 * await proxy.cut();     // outage: open connections die, new ones are refused
 * await proxy.resume();  // back, on the same port
 * await proxy.close();
 * ```
 */
export class TcpProxy {
  private server: Server | undefined;
  private listenPort: number | undefined;
  private readonly sockets = new Set<Socket>();
  private closed = false;
  /** Set by `stall()`: bytes are swallowed, nothing is closed (a silent network partition). */
  private stalled = false;
  /** Set by `hold()`: new connections wait here, their bytes kept, until `release()`. */
  private holding = false;
  /** Connections `hold()` still lets through before it holds the next ones. */
  private letThrough = 0;
  /** Connections accepted while held: the client, and what it sent so far. */
  private readonly held = new Map<Socket, Buffer[]>();

  constructor(
    private readonly target: TcpProxyTarget,
    /** `port`: listen on this port instead of an ephemeral one (a broker that advertises it). */
    private readonly options: { port?: number } = {},
  ) {}

  /** The port the proxy listens on (fixed after `start()`, kept across `cut()`/`resume()`). */
  get port(): number {
    if (this.listenPort === undefined) throw new Error('TcpProxy.port: call start() first');
    return this.listenPort;
  }

  /** True while it accepts connections. */
  get isOpen(): boolean {
    return this.server !== undefined;
  }

  /**
   * Connections currently open: forwarded ones (each counts its client and server side
   * once) and held ones.
   */
  get connectionCount(): number {
    return this.sockets.size / 2 + this.held.size;
  }

  /**
   * A slow network at connect: connections made from now on are accepted, but nothing
   * reaches the target (and no answer comes) until `release()`; what the client sends
   * meanwhile is kept and forwarded then, in order. A client sees a connect that does not
   * answer yet, neither an error nor a close. Open connections are not affected.
   * `letThrough`: forward that many new connections first, and hold the ones after them
   * (a client's later connection: Kafka's producer or group coordinator after its admin).
   */
  hold(options: { letThrough?: number } = {}): void {
    this.holding = true;
    this.letThrough = options.letThrough ?? 0;
  }

  /** Connections `hold()` is holding now. */
  get heldConnections(): number {
    return this.held.size;
  }

  /** Ends `hold()`: every held connection is forwarded now, with what it sent. */
  release(): void {
    this.holding = false;
    for (const [client, chunks] of [...this.held]) {
      this.held.delete(client);
      client.removeAllListeners('data');
      client.removeAllListeners('close');
      client.removeAllListeners('error');
      if (client.destroyed) continue;
      this.connect(client, chunks);
    }
  }

  /**
   * A silent partition: every open and new connection stays open, but no byte crosses in
   * either direction (they are dropped, as a black-holing network does), so a client
   * sees neither an error nor a close and only a timeout of its own can notice.
   * `unstall()` forwards again; what was dropped stays lost.
   */
  stall(): void {
    this.stalled = true;
  }

  unstall(): void {
    this.stalled = false;
  }

  /** Starts listening on an ephemeral port of 127.0.0.1 and resolves with it. */
  async start(): Promise<number> {
    if (this.listenPort !== undefined) throw new Error('TcpProxy.start: already started');
    await this.listen(this.options.port ?? 0);
    return this.port;
  }

  /**
   * Outage: stops listening (new connections are refused) and destroys every open
   * connection on both sides.
   */
  async cut(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    for (const socket of this.sockets) socket.destroy();
    this.sockets.clear();
    for (const client of this.held.keys()) client.destroy();
    this.held.clear();
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
  }

  /**
   * A server-side disconnect: destroys every open connection but keeps listening, so
   * clients reconnect at once. Returns how many connections were cut.
   */
  disconnect(): number {
    const count = this.sockets.size / 2;
    for (const socket of this.sockets) socket.destroy();
    this.sockets.clear();
    return count;
  }

  /** Same as {@link TcpProxy.cut}. */
  pause(): Promise<void> {
    return this.cut();
  }

  /** Ends the outage: listens again on the same port. */
  async resume(): Promise<void> {
    if (this.closed) throw new Error('TcpProxy.resume: the proxy is closed');
    if (this.server) return;
    await this.listen(this.port);
  }

  /** Cuts everything and stops for good. */
  async close(): Promise<void> {
    this.closed = true;
    await this.cut();
  }

  private listen(port: number): Promise<void> {
    const server = createServer((client) => this.forward(client));
    return new Promise((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, '127.0.0.1', () => {
        server.off('error', reject);
        // A listener error after start (rare: EMFILE) must not crash the test process.
        server.on('error', () => {});
        const address = server.address();
        if (address && typeof address === 'object') this.listenPort = address.port;
        this.server = server;
        resolve();
      });
    });
  }

  private forward(client: Socket): void {
    if (!this.server) {
      client.destroy();
      return;
    }
    if (this.holding && this.letThrough > 0) this.letThrough--;
    else if (this.holding) {
      const chunks: Buffer[] = [];
      this.held.set(client, chunks);
      client.on('data', (chunk: Buffer) => chunks.push(chunk));
      client.on('error', () => client.destroy());
      client.on('close', () => this.held.delete(client));
      return;
    }
    this.connect(client, []);
  }

  /** Forwards `client` to the target, after the bytes it already sent (`pending`). */
  private connect(client: Socket, pending: Buffer[]): void {
    const upstream = createConnection({ host: this.target.host, port: this.target.port });
    for (const [socket, peer] of [
      [client, upstream],
      [upstream, client],
    ] as const) {
      this.sockets.add(socket);
      socket.setNoDelay(true);
      // Errors (ECONNRESET when the peer is destroyed) end the pair; they are the point of the exercise.
      socket.on('error', () => peer.destroy());
      socket.on('end', () => peer.end());
      socket.on('close', () => {
        this.sockets.delete(socket);
        peer.destroy();
      });
    }
    for (const chunk of pending) upstream.write(chunk);
    // Not pipe(): stall() must be able to drop bytes without closing either side.
    client.on('data', (chunk) => {
      if (!this.stalled) upstream.write(chunk);
    });
    upstream.on('data', (chunk) => {
      if (!this.stalled) client.write(chunk);
    });
  }
}
