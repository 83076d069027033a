// A user of broker.client 'platformatic' who never installed kafkajs
// (producerClients.test.ts): resolving 'kafkajs' fails here as it would then, and this
// process produces through @oncely/kafka with send() and the outbox producer. Plain
// JavaScript: the child runs on bare Node (>= 22.22, as @platformatic/kafka needs).
import { register } from 'node:module';

register(
  `data:text/javascript,${encodeURIComponent(`
    export async function resolve(specifier, context, next) {
      if (specifier === 'kafkajs' || specifier.startsWith('kafkajs/')) {
        const error = new Error("Cannot find package 'kafkajs' (refused by produceWithoutKafkajs.mjs)");
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
}, 60_000).unref();

const { createKafkaProducer, send } = await import('@oncely/kafka');
const { Producer } = await import('@platformatic/kafka');

const producer = new Producer({
  clientId: 'no-kafkajs',
  bootstrapBrokers: brokers,
  idempotent: true,
  acks: -1,
});
await send(producer, topic, { id: `${topic}-send`, value: 'sent' });
await producer.close();

const outbox = createKafkaProducer({ broker: { brokers, client: 'platformatic' } });
const results = await outbox.send([
  { id: `${topic}-outbox`, destination: topic, body: Buffer.from('relayed'), attributes: {}, attempt: 1 },
]);
await outbox.close();
if (!results[0].ok) throw results[0].error;

// createRequire's cache holds kafkajs once anything required it (the ESM loader too).
const { createRequire } = await import('node:module');
const cache = createRequire(import.meta.url).cache;
console.log(`kafkajs loaded: ${Object.keys(cache).some((path) => /[\\/]kafkajs[\\/]/.test(path))}`);
process.exit(0);
