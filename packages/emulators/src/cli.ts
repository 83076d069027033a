#!/usr/bin/env node
// oncely-emulator <pubsub|servicebus> [options]: each emulator owns its own argument parsing
// in `<name>/cli.ts` (an exported `main(argv)`), so the two never share flags by accident.
const emulators = ['pubsub', 'servicebus'] as const;
type EmulatorName = (typeof emulators)[number];

const USAGE = `usage: oncely-emulator <${emulators.join('|')}> [options]

  pubsub       Google Cloud Pub/Sub over gRPC (then PUBSUB_EMULATOR_HOST=127.0.0.1:<port>)
  servicebus   Azure Service Bus over AMQP 1.0 (entities from a Config.json)

oncely-emulator <name> --help lists that emulator's options.
`;

const [name, ...rest] = process.argv.slice(2);
if (name === '--help' || name === '-h' || name === 'help') {
  process.stdout.write(USAGE);
  process.exit(0);
}
if (!emulators.includes(name as EmulatorName)) {
  process.stderr.write(
    name === undefined ? USAGE : `oncely-emulator: unknown emulator '${name}'\n\n${USAGE}`,
  );
  process.exit(2);
}
const { main } = (await import(`./${name}/cli.js`)) as { main: (argv: string[]) => Promise<void> };
await main(rest);
