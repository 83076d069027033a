#!/usr/bin/env node
// Runs the official Node.js Pub/Sub samples (googleapis/nodejs-pubsub, `samples/*.js`, the
// JavaScript the repository generates from `samples/typescript`) UNCHANGED against our
// emulator: each sample is a child process with its documented arguments and nothing but
// PUBSUB_EMULATOR_HOST and the project in its environment.
//
// The samples are not part of this repository (their code is Google's); point the script at
// a checkout:
//   git clone --depth 1 https://github.com/googleapis/nodejs-pubsub /tmp/nodejs-pubsub
//   npm run build && node packages/emulators/scripts/pubsub-samples.mjs /tmp/nodejs-pubsub/samples
// `require('@google-cloud/pubsub')` resolves to this repository's copy through NODE_PATH.
// Exit code 0 when every sample listed here passes. What is not listed, and why:
// docs/pubsub.md, "The official samples".

import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join, resolve, sep } from 'node:path';
import { PubSub } from '@google-cloud/pubsub';
import { startPubSubEmulator } from '@oncely/emulators/pubsub';

const samplesDir = resolve(process.argv[2] ?? process.env.PUBSUB_SAMPLES_DIR ?? '');
if (!existsSync(join(samplesDir, 'quickstart.js'))) {
  console.error('usage: pubsub-samples.mjs <nodejs-pubsub/samples directory>');
  process.exit(2);
}
const only = process.argv[3] ? new RegExp(process.argv[3]) : undefined;

const PROJECT = 'samples-project';
// node_modules holding @google-cloud/pubsub, for the samples' require().
const entry = createRequire(import.meta.url).resolve('@google-cloud/pubsub');
const nodePath = entry.slice(0, entry.lastIndexOf(`${sep}node_modules${sep}`) + 13);

const emulator = await startPubSubEmulator({ port: 0 });
const pubsub = new PubSub({ projectId: PROJECT, apiEndpoint: emulator.address });
const run = Date.now().toString(36);
const id = (label) => `${label}-${run}`;
const T = id('topic');
const DLT = id('dead-letter');

/** Publishes `n` messages on T so that the next receiving sample has something to receive. */
const publish =
  (n = 3, attributes = {}) =>
  async () => {
    for (let i = 0; i < n; i++) {
      await pubsub.topic(T).publishMessage({ data: Buffer.from(`seeded ${i}`), attributes });
    }
  };

// In order: each step may use what the earlier ones created. [sample, args, setup?, expect?]
const steps = [
  ['createTopic', [T]],
  ['createTopic', [DLT]],
  ['createSubscription', [T, id('sub')]],
  ['listAllTopics', []],
  ['listSubscriptions', []],
  ['listTopicSubscriptions', [T]],
  ['getSubscription', [id('sub')]],
  ['publishMessage', [T, 'hello']],
  ['publishMessageWithCustomAttributes', [T, 'hello with attributes']],
  ['publishBatchedMessages', [T, 'batched', '10', '1']],
  ['publishWithFlowControl', [T]],
  ['publishWithRetrySettings', [T, 'retried']],
  ['listenForMessages', [id('sub'), '10'], undefined, /Received message/],
  ['listenWithCustomAttributes', [id('sub'), '10'], publish(1, { origin: 'samples' }), /attributes/],
  ['listenForErrors', [id('sub'), '10'], publish(1)],
  ['subscribeWithFlowControlSettings', [id('sub'), '1', '10'], publish(2)],
  ['createSubscriptionWithOrdering', [T, id('ordered')]],
  ['resumePublish', [T, 'resumed', 'key1']],
  ['createSubscriptionWithRetryPolicy', [T, id('retry')]],
  ['createSubscriptionWithDeadLetterPolicy', [T, id('dead-lettered'), DLT]],
  ['updateDeadLetterPolicy', [T, id('dead-lettered')]],
  ['removeDeadLetterPolicy', [T, id('dead-lettered')]],
  ['createSubscriptionWithExactlyOnceDelivery', [T, id('exactly-once')]],
  ['createSubscriptionWithFiltering', [T, id('filtered'), 'attributes.author="unknown"']],
  ['closeSubscriptionWithTimeout', [T, id('sub')]],
  ['optimisticSubscribe', [id('optimistic'), T, '10']],
  ['createPushSubscription', ['https://example.com/push', T, id('push')]],
  ['createPushSubscriptionNoWrapper', ['https://example.com/push', T, id('push-raw')]],
  ['modifyPushConfig', [T, id('push')]],
  ['detachSubscription', [id('sub')]],
  ['deleteSubscription', [id('ordered')]],
  ['deleteTopic', [DLT]],
  ['quickstart', [PROJECT, id('qs-topic'), id('qs-sub')], undefined, /Received message/],
];

const env = {
  PATH: process.env.PATH,
  NODE_PATH: nodePath,
  PUBSUB_EMULATOR_HOST: emulator.address,
  PUBSUB_PROJECT_ID: PROJECT,
  GOOGLE_CLOUD_PROJECT: PROJECT,
  // Not on Google Cloud: skip the client's metadata-server probe (seconds per process, and a
  // MetadataLookupWarning on stderr). Users of any emulator set the same.
  METADATA_SERVER_DETECTION: 'none',
};

const results = [];
const started = Date.now();
for (const [sample, args, setup, expected] of steps) {
  if (only && !only.test(sample)) continue;
  if (setup) await setup();
  const t0 = Date.now();
  const { code, stdout, stderr } = await new Promise((done) => {
    execFile(
      process.execPath,
      [join(samplesDir, `${sample}.js`), ...args],
      { env, timeout: 60_000, cwd: samplesDir },
      (error, stdout, stderr) => done({ code: error ? (error.code ?? 'killed') : 0, stdout, stderr }),
    );
  });
  const ok = code === 0 && stderr.trim() === '' && (!expected || expected.test(stdout));
  results.push({ sample, ok });
  const ms = Date.now() - t0;
  console.log(`${ok ? 'PASS' : 'FAIL'} ${sample} ${args.join(' ')} (${ms} ms)`);
  if (!ok || process.env.VERBOSE) {
    for (const line of `${stdout}${stderr}`.trim().split('\n').slice(0, 12)) console.log(`    ${line}`);
  }
}
const failed = results.filter((r) => !r.ok);
console.log(
  `\n${results.length - failed.length}/${results.length} samples passed in ${Date.now() - started} ms`,
);
await pubsub.close();
await emulator.stop();
process.exit(failed.length ? 1 : 0);
