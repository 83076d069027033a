import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createConnection } from 'node:net';

/**
 * Makes sure a MariaDB answers at MYSQL_URL's host and port (127.0.0.1:3306 by default)
 * before the MySQL tests run. It is pre-started on the development machine and in CI;
 * when it is not running, it is started the way CI's machine starts it
 * (`start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd`) and
 * waited for. Under CI=true a server that cannot be reached fails the run; elsewhere
 * the tests that need it skip with a warning (see serverEnv.ts).
 */
export default async function setup(): Promise<void> {
  const url = new URL(process.env.MYSQL_URL ?? 'mysql://root@127.0.0.1:3306/test');
  const host = url.hostname;
  const port = Number(url.port || 3306);
  if (await answers(host, port)) return;
  const local = host === '127.0.0.1' || host === 'localhost';
  if (local && existsSync('/usr/sbin/mariadbd')) {
    console.warn(`[mysql tests] nothing answers at ${host}:${port}: starting /usr/sbin/mariadbd`);
    const started = spawnSync(
      'start-stop-daemon',
      ['--start', '--oknodo', '--background', '--exec', '/usr/sbin/mariadbd', '--', '--user=mysql'],
      { stdio: 'inherit' },
    );
    if (started.status === 0) {
      const deadline = Date.now() + 60_000;
      while (Date.now() < deadline) {
        if (await answers(host, port)) return;
        await new Promise((resolve) => setTimeout(resolve, 250));
      }
    }
  }
  const message = `MariaDB does not answer at ${host}:${port} and could not be started`;
  if (process.env.CI === 'true') throw new Error(message);
  console.warn(`[mysql tests] ${message}; the tests that need it are skipped`);
}

/** True when something accepts a TCP connection at host:port within 2 s. */
function answers(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ host, port });
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(2000, () => done(false));
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}
