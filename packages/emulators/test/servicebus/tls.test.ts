// What the emulator says when a client speaks something other than plain AMQP on its port:
// one short line through its `log` option, not rhea's console dump of the whole handshake.
import net from 'node:net';
import tls from 'node:tls';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { type ServiceBusEmulator, startServiceBusEmulator } from '../../dist/servicebus/index.js';
import { waitUntil } from './support.js';

let emulator: ServiceBusEmulator;
const lines: string[] = [];

beforeAll(async () => {
  emulator = await startServiceBusEmulator({ port: 0, log: (line) => lines.push(line) });
});

afterAll(async () => {
  await emulator?.stop();
});

/** Resolves when the emulator has closed the client's socket. */
function closed(socket: net.Socket): Promise<void> {
  return new Promise((resolve) => {
    socket.on('error', () => {});
    socket.on('close', () => resolve());
  });
}

describe('a client that does not speak plain AMQP', () => {
  it('a TLS handshake on the plain port: one short line that says so, nothing on the console', async () => {
    const consoleError = vi.spyOn(console, 'error');
    const before = lines.length;
    const socket = tls.connect({ host: '127.0.0.1', port: emulator.port, rejectUnauthorized: false });
    await closed(socket);
    const added = await waitUntil(() => lines.length > before && lines.slice(before), 'a log line');
    expect(added).toHaveLength(1);
    expect(added[0]).toMatch(/TLS/);
    expect(added[0]).toMatch(/plain AMQP/);
    expect(added[0]!.length).toBeLessThan(300);
    expect(consoleError).not.toHaveBeenCalled();
    consoleError.mockRestore();
  });

  it('anything else (an HTTP request): one short line naming the bytes it got', async () => {
    const consoleError = vi.spyOn(console, 'error');
    const before = lines.length;
    const socket = net.connect({ host: '127.0.0.1', port: emulator.port });
    socket.write('GET / HTTP/1.1\r\nHost: localhost\r\n\r\n');
    await closed(socket);
    const added = await waitUntil(() => lines.length > before && lines.slice(before), 'a log line');
    expect(added).toHaveLength(1);
    expect(added[0]).toMatch(/not an AMQP protocol header/);
    expect(added[0]).toMatch(/GET /);
    expect(added[0]!.length).toBeLessThan(300);
    expect(consoleError).not.toHaveBeenCalled();
    consoleError.mockRestore();
  });
});
