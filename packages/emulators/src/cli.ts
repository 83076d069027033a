#!/usr/bin/env node
// oncely-emulator <pubsub|servicebus> [options]: filled in by the emulator work.
console.error('usage: oncely-emulator <pubsub|servicebus> [options]');
process.exitCode = 2;
