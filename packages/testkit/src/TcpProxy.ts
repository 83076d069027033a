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

  /** Connections currently forwarded (each counts its client and server side once). */
  get connectionCount(): number {
    return this.sockets.size / 2;
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
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
  }

  /**
   * A server-side disconnect: destroys every open connection but keeps listening, so
   * clients reconnect at once. Returns how many connections were cut.
   */
  disconnect(): number {
    const count = this.connectionCount;
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
    // Not pipe(): stall() must be able to drop bytes without closing either side.
    client.on('data', (chunk) => {
      if (!this.stalled) upstream.write(chunk);
    });
    upstream.on('data', (chunk) => {
      if (!this.stalled) client.write(chunk);
    });
  }
}
