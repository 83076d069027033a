import { parseArgs } from 'node:util';
import { startPubSubEmulator } from './PubSubEmulator.js';

const USAGE = `usage: oncely-emulator pubsub [--port 8085] [--host 127.0.0.1] [--min-ack-deadline 10]
                              [--stream-timeout-ms 1800000] [--verbose]

Serves the Google Cloud Pub/Sub API (gRPC) in memory. Point clients at it with
PUBSUB_EMULATOR_HOST=<host>:<port>. Stops on SIGINT/SIGTERM; the state is not kept.`;

/**
 * `oncely-emulator pubsub`: starts the emulator, prints where it listens (and the
 * `PUBSUB_EMULATOR_HOST` line to export), and stops it on SIGINT or SIGTERM.
 *
 * @example
 * ```ts
 * await main(['--port', '8085', '--min-ack-deadline', '1']);
 * ```
 */
export async function main(argv: string[]): Promise<void> {
  let values: Record<string, string | boolean | undefined>;
  try {
    ({ values } = parseArgs({
      args: argv,
      options: {
        port: { type: 'string', default: '8085' },
        host: { type: 'string', default: '127.0.0.1' },
        'min-ack-deadline': { type: 'string', default: '10' },
        'stream-timeout-ms': { type: 'string' },
        verbose: { type: 'boolean', default: false },
        help: { type: 'boolean', default: false },
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
  const number = (name: string, min: number, max: number): number | undefined => {
    const raw = values[name];
    if (raw === undefined) return undefined;
    const n = Number(raw);
    if (!Number.isInteger(n) || n < min || n > max)
      throw new Error(`--${name} must be an integer from ${min} to ${max}`);
    return n;
  };
  let options: Parameters<typeof startPubSubEmulator>[0];
  try {
    options = {
      port: number('port', 0, 65535),
      host: values.host as string,
      minAckDeadlineSeconds: number('min-ack-deadline', 1, 600),
      streamTimeoutMs: number('stream-timeout-ms', 1, 2 ** 31 - 1),
      ...(values.verbose ? { log: (line: string) => console.log(`[pubsub] ${line}`) } : {}),
    };
  } catch (error) {
    console.error(`${(error as Error).message}\n${USAGE}`);
    process.exitCode = 2;
    return;
  }
  const emulator = await startPubSubEmulator(options);
  console.log(`Pub/Sub emulator listening on ${emulator.address}`);
  console.log(`export PUBSUB_EMULATOR_HOST=${emulator.address}`);
  const stop = () => {
    void emulator.stop().then(() => process.exit(0));
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
}
