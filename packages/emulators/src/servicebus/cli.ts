import { readFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import type { EmulatorConfig } from './config.js';
import { startServiceBusEmulator } from './ServiceBusEmulator.js';

const USAGE = `usage: oncely-emulator servicebus [--config Config.json] [--port 5672] [--host 127.0.0.1] [--admin-port 5300]

Starts the Azure Service Bus emulator (AMQP 1.0) and prints where it listens and the
connection string. The config file has the shape of the official emulator's Config.json.
--admin-port serves the HTTP administration API (ServiceBusAdministrationClient, SDK 7.10+)
as the official emulator does on 5300. Stops on SIGINT or SIGTERM.`;

/**
 * `oncely-emulator servicebus`: parses the flags, starts the emulator and keeps it running
 * until SIGINT/SIGTERM.
 *
 * @example
 * ```sh
 * oncely-emulator servicebus --config ./Config.json --port 5673
 * ```
 */
export async function main(argv: string[]): Promise<void> {
  let values: { config?: string; port?: string; host?: string; 'admin-port'?: string; help?: boolean };
  try {
    ({ values } = parseArgs({
      args: argv,
      options: {
        config: { type: 'string', short: 'c' },
        port: { type: 'string', short: 'p' },
        host: { type: 'string' },
        'admin-port': { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
    }));
  } catch (error) {
    console.error(`${(error as Error).message}\n${USAGE}`);
    process.exitCode = 2;
    return;
  }
  if (values.help) {
    console.log(USAGE);
    return;
  }
  const port = values.port === undefined ? 5672 : Number(values.port);
  if (!Number.isInteger(port) || port < 0 || port > 65_535) {
    console.error(`--port: '${values.port}' is not a port\n${USAGE}`);
    process.exitCode = 2;
    return;
  }
  const adminPort = values['admin-port'] === undefined ? undefined : Number(values['admin-port']);
  if (adminPort !== undefined && (!Number.isInteger(adminPort) || adminPort < 0 || adminPort > 65_535)) {
    console.error(`--admin-port: '${values['admin-port']}' is not a port\n${USAGE}`);
    process.exitCode = 2;
    return;
  }
  let config: EmulatorConfig | undefined;
  if (values.config) config = JSON.parse(await readFile(values.config, 'utf8')) as EmulatorConfig;
  const emulator = await startServiceBusEmulator({
    port,
    host: values.host,
    config,
    adminPort,
    log: (line) => console.log(line),
  });
  console.log(`connection string: ${emulator.connectionString}`);
  if (emulator.adminConnectionString) {
    console.log(`administration connection string: ${emulator.adminConnectionString}`);
  }
  const shutdown = () => {
    void emulator.stop().then(() => process.exit(0));
  };
  process.once('SIGINT', shutdown);
  process.once('SIGTERM', shutdown);
}
