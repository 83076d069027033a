// Readiness probe for start.sh: the broker is ready when a kafkajs admin client can
// connect, read cluster metadata, see an active controller and a leader for every
// partition. kafkajs is resolved from
// the repository's node_modules (it is a dev dependency of @oncely/kafka).
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const require = createRequire(
  fileURLToPath(new URL('../../../packages/kafka/package.json', import.meta.url)),
);
const { Kafka, logLevel } = require('kafkajs');

const broker = process.argv[2] ?? '127.0.0.1:19092';
const kafka = new Kafka({
  clientId: 'oncely-ready',
  brokers: [broker],
  logLevel: logLevel.NOTHING,
  connectionTimeout: 2000,
  requestTimeout: 5000,
  retry: { retries: 0 },
});
const admin = kafka.admin();
try {
  await admin.connect();
  const cluster = await admin.describeCluster();
  if (cluster.brokers.length === 0 || cluster.controller == null || cluster.controller < 0) {
    throw new Error(`no active controller yet (${JSON.stringify(cluster)})`);
  }
  // After a restart on kept data, topics are listed before their partitions are loaded:
  // ready only once every partition has a leader again.
  const topics = await admin.listTopics();
  if (topics.length > 0) {
    const metadata = await admin.fetchTopicMetadata({ topics });
    const leaderless = metadata.topics.flatMap((t) =>
      t.partitions
        .filter((p) => p.leader < 0 || p.partitionErrorCode !== 0)
        .map((p) => `${t.name}-${p.partitionId}`),
    );
    if (leaderless.length > 0)
      throw new Error(`partitions without a leader yet: ${leaderless.slice(0, 5).join(', ')}`);
  }
  process.stdout.write(
    `brokers=${cluster.brokers.map((b) => `${b.host}:${b.port}`).join(',')} controller=${cluster.controller}\n`,
  );
} catch (error) {
  process.stderr.write(`${error instanceof Error ? error.message : String(error)}\n`);
  process.exitCode = 1;
} finally {
  await admin.disconnect().catch(() => {});
}
