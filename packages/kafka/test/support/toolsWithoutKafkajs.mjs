// `oncely inspect` and `oncely doctor` of a broker.client 'platformatic' user who never
// installed kafkajs (toolsClients.test.ts): resolving 'kafkajs' fails here as it would
// then, and this process runs findDeadLetters and diagnose. Plain JavaScript: the child
// runs on bare Node (>= 22.22, as @platformatic/kafka needs).
import { createRequire, register } from 'node:module';

register(
  `data:text/javascript,${encodeURIComponent(`
    export async function resolve(specifier, context, next) {
      if (specifier === 'kafkajs' || specifier.startsWith('kafkajs/')) {
        const error = new Error("Cannot find package 'kafkajs' (refused by toolsWithoutKafkajs.mjs)");
        error.code = 'ERR_MODULE_NOT_FOUND';
        throw error;
      }
      return next(specifier, context);
    }
  `)}`,
);

const brokers = process.env.ONCELY_TEST_BROKERS.split(',');
const topic = process.env.ONCELY_TEST_TOPIC;
setTimeout(() => {
  console.error('timed out');
  process.exit(3);
}, 90_000).unref();

const { diagnose, findDeadLetters } = await import('@oncely/kafka');
const config = {
  name: `c-${topic}`,
  broker: { type: 'kafka', brokers, topic, client: 'platformatic' },
  handler: async () => {},
};
const copies = await findDeadLetters(config, 'order-42');
console.log(`copies: ${copies.length} ${JSON.stringify(copies)}`);
const report = await diagnose(config);
for (const finding of report.findings) console.log(`${finding.level}: ${finding.message}`);

// createRequire's cache holds kafkajs once anything required it (the ESM loader too).
const cache = createRequire(import.meta.url).cache;
console.log(`kafkajs loaded: ${Object.keys(cache).some((path) => /[\\/]kafkajs[\\/]/.test(path))}`);
process.exit(0);
