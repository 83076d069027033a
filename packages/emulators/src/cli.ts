#!/usr/bin/env node
// oncely-emulator <pubsub|servicebus> [options]: each emulator owns its own argument parsing
// in `<name>/cli.ts` (an exported `main(argv)`), so the two never share flags by accident.
const emulators = ['pubsub', 'servicebus'] as const;
type EmulatorName = (typeof emulators)[number];

const [name, ...rest] = process.argv.slice(2);
if (!emulators.includes(name as EmulatorName)) {
  console.error(`usage: oncely-emulator <${emulators.join('|')}> [options]`);
  process.exit(2);
}
const { main } = (await import(`./${name}/cli.js`)) as { main: (argv: string[]) => Promise<void> };
await main(rest);
