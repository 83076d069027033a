import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { TcpProxy } from '@oncely/testkit';
import { afterEach, describe, expect, it } from 'vitest';

/** An echo server on an ephemeral port: the proxy's target. */
async function echoServer(): Promise<{ server: Server; port: number; sockets: Set<Socket> }> {
  const sockets = new Set<Socket>();
  const server = createServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => {});
    socket.pipe(socket);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  if (!address || typeof address !== 'object') throw new Error('no address');
  return { server, port: address.port, sockets };
}

function connect(port: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = createConnection({ host: '127.0.0.1', port });
    socket.once('connect', () => resolve(socket));
    socket.once('error', reject);
  });
}

function roundTrip(socket: Socket, text: string): Promise<string> {
  return new Promise((resolve) => {
    socket.once('data', (data) => resolve(data.toString('utf8')));
    socket.write(text);
  });
}

function closed(socket: Socket): Promise<void> {
  return new Promise((resolve) => {
    if (socket.destroyed) return resolve();
    socket.once('close', () => resolve());
  });
}

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

describe('TcpProxy', () => {
  it('forwards, refuses while cut (closing open connections on both sides) and reopens on the same port', async () => {
    const target = await echoServer();
    cleanups.push(() => new Promise<void>((resolve) => target.server.close(() => resolve())));
    const proxy = new TcpProxy({ host: '127.0.0.1', port: target.port });
    const port = await proxy.start();
    cleanups.push(() => proxy.close());
    expect(port).toBe(proxy.port);

    const client = await connect(port);
    expect(await roundTrip(client, 'hello')).toBe('hello');
    expect(proxy.connectionCount).toBe(1);

    await proxy.cut();
    await closed(client);
    expect(proxy.isOpen).toBe(false);
    expect(proxy.connectionCount).toBe(0);
    // The upstream side is gone too: the server sees its connection close.
    await new Promise<void>((resolve) => {
      const check = () => (target.sockets.size === 0 ? resolve() : setTimeout(check, 10));
      check();
    });
    await expect(connect(port)).rejects.toMatchObject({ code: 'ECONNREFUSED' });

    await proxy.resume();
    expect(proxy.port).toBe(port);
    const again = await connect(port);
    expect(await roundTrip(again, 'back')).toBe('back');
    again.destroy();
  });

  it('pause() is cut() and close() is final', async () => {
    const target = await echoServer();
    cleanups.push(() => new Promise<void>((resolve) => target.server.close(() => resolve())));
    const proxy = new TcpProxy({ host: '127.0.0.1', port: target.port });
    const port = await proxy.start();
    await proxy.pause();
    await expect(connect(port)).rejects.toMatchObject({ code: 'ECONNREFUSED' });
    await proxy.close();
    await expect(proxy.resume()).rejects.toThrow(/closed/);
  });

  it('disconnect() cuts open connections but keeps listening on its fixed port', async () => {
    const target = await echoServer();
    cleanups.push(() => new Promise<void>((resolve) => target.server.close(() => resolve())));
    const probe = new TcpProxy({ host: '127.0.0.1', port: target.port });
    const fixedPort = await probe.start();
    await probe.close();
    const proxy = new TcpProxy({ host: '127.0.0.1', port: target.port }, { port: fixedPort });
    expect(await proxy.start()).toBe(fixedPort);
    cleanups.push(() => proxy.close());
    const client = await connect(fixedPort);
    expect(await roundTrip(client, 'one')).toBe('one');
    expect(proxy.disconnect()).toBe(1);
    await closed(client);
    expect(proxy.isOpen).toBe(true);
    const again = await connect(fixedPort);
    expect(await roundTrip(again, 'two')).toBe('two');
    again.destroy();
  });

  it('closes the client side when the target refuses', async () => {
    const target = await echoServer();
    const deadPort = target.port;
    await new Promise<void>((resolve) => target.server.close(() => resolve()));
    const proxy = new TcpProxy({ host: '127.0.0.1', port: deadPort });
    const port = await proxy.start();
    cleanups.push(() => proxy.close());
    const client = await connect(port);
    await closed(client);
    expect(proxy.connectionCount).toBe(0);
  });
});
