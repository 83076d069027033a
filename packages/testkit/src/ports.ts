import { createServer } from 'node:net';

/**
 * A local port nothing listens on: bound, then closed, so a connect to it is refused at
 * once (ECONNREFUSED) rather than timing out. For tests of what a client reports when
 * its server is unreachable. Another process could take the port in between; on a test
 * machine that window is too short to matter.
 */
export async function closedPort(host = '127.0.0.1'): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, host, resolve);
  });
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}
