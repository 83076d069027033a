#!/usr/bin/env node
// Runs the official `@azure/service-bus` v7 samples (Azure/azure-sdk-for-js,
// `sdk/servicebus/service-bus/samples/v7`) UNCHANGED against our emulator, started with the
// `oncely-emulator servicebus` CLI. Each sample is a child process with nothing but the
// environment variables its header reads (SERVICEBUS_CONNECTION_STRING, QUEUE_NAME, ...).
//
// The samples are not part of this repository (their code is Microsoft's); point the script
// at the `samples/v7` directory of a checkout (it reads `javascript/**.js` and, where named,
// `typescript/src/**.ts`, type-stripped with this repository's TypeScript):
//   npm run build
//   npm install --prefix /tmp/sb-deps dotenv     # the samples' one other dependency
//   SAMPLES_DEPS=/tmp/sb-deps/node_modules node packages/emulators/scripts/servicebus-samples.mjs \
//     /tmp/azure-sdk-for-js/sdk/servicebus/service-bus/samples/v7
// `require('@azure/service-bus')` resolves, through NODE_PATH, to this repository's 7.9.5, or
// to 7.10.0-beta.2 (`@azure/service-bus-710`) for the samples that need it: a temporary
// node_modules whose `@azure/service-bus` is a link to that copy. The samples' code is not
// touched. A second argument (a regular expression) runs only the samples it matches.
// Exit code 0 when every sample passes or fails exactly as documented in docs/servicebus.md,
// "The official samples".

import { execFile, spawn } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ServiceBusClient } from '@azure/service-bus';

const samplesDir = resolve(process.argv[2] ?? process.env.SERVICEBUS_SAMPLES_DIR ?? '');
if (!existsSync(join(samplesDir, 'javascript'))) {
  console.error(
    'usage: servicebus-samples.mjs <azure-sdk-for-js/sdk/servicebus/service-bus/samples/v7> [filter]',
  );
  process.exit(2);
}
const only = process.argv[3] ? new RegExp(process.argv[3]) : undefined;

const require = createRequire(import.meta.url);
const packageDir = fileURLToPath(new URL('..', import.meta.url));
/** The directory holding a package, found from this repository. */
const packageRoot = (name) => {
  const entry = require.resolve(`${name}/package.json`);
  return dirname(entry);
};
const depsDir = process.env.SAMPLES_DEPS ? resolve(process.env.SAMPLES_DEPS) : undefined;
if (!(depsDir && existsSync(join(depsDir, 'dotenv'))) && !safeResolve('dotenv')) {
  console.error(
    'the samples require("dotenv"): npm install --prefix /tmp/sb-deps dotenv, then SAMPLES_DEPS=/tmp/sb-deps/node_modules',
  );
  process.exit(2);
}
function safeResolve(name) {
  try {
    return require.resolve(name);
  } catch {
    return undefined;
  }
}

// Two module roots: `@azure/service-bus` as 7.9.5 or as 7.10.0-beta.2, everything else from
// this repository (NODE_PATH is searched after the sample's own, absent, node_modules).
const work = mkdtempSync(join(tmpdir(), 'servicebus-samples-'));
const projectModules = join(packageRoot('@azure/service-bus'), '..', '..');
function moduleRoot(label, serviceBusDir) {
  const root = join(work, label, 'node_modules');
  mkdirSync(join(root, '@azure'), { recursive: true });
  symlinkSync(serviceBusDir, join(root, '@azure', 'service-bus'), 'dir');
  return root;
}
const roots = {
  7.9: moduleRoot('7.9', packageRoot('@azure/service-bus')),
  '7.10': moduleRoot('7.10', packageRoot('@azure/service-bus-710')),
};
const version710 = JSON.parse(
  readFileSync(join(packageRoot('@azure/service-bus-710'), 'package.json'), 'utf8'),
).version;

// The entities the samples expect, in the official emulator's Config.json shape.
const QUEUE = 'samples-queue';
const SESSION_QUEUE = 'samples-session-queue';
const configFile = join(work, 'Config.json');
writeFileSync(
  configFile,
  JSON.stringify({
    UserConfig: {
      Namespaces: [
        {
          Name: 'sbemulatorns',
          Queues: [
            { Name: QUEUE, Properties: { MaxDeliveryCount: 10, LockDuration: 'PT30S' } },
            { Name: SESSION_QUEUE, Properties: { RequiresSession: true, LockDuration: 'PT30S' } },
          ],
          Topics: [],
        },
      ],
    },
  }),
);

// The emulator as users start it: the CLI, free ports, the connection strings it prints.
const cli = spawn(
  process.execPath,
  [
    join(packageDir, 'bin', 'oncely-emulator.js'),
    'servicebus',
    '--config',
    configFile,
    '--port',
    '0',
    '--admin-port',
    '0',
  ],
  { stdio: ['ignore', 'pipe', 'inherit'] },
);
const { connectionString, adminConnectionString } = await new Promise((done, fail) => {
  let out = '';
  cli.once('exit', (code) => fail(new Error(`the emulator CLI exited (${code}): ${out}`)));
  cli.stdout.on('data', (chunk) => {
    out += chunk;
    const amqp = /^connection string: (.+)$/m.exec(out);
    const admin = /^administration connection string: (.+)$/m.exec(out);
    if (amqp && admin) done({ connectionString: amqp[1].trim(), adminConnectionString: admin[1].trim() });
  });
});
cli.stdout.resume();
const host = /Endpoint=sb:\/\/([^;]+)/.exec(connectionString)[1];

const client = new ServiceBusClient(connectionString);
/** Sends `n` messages so that the next receiving sample has something to receive. */
const seed =
  (n, queue = QUEUE) =>
  async () => {
    const sender = client.createSender(queue);
    await sender.sendMessages(Array.from({ length: n }, (_, i) => ({ body: `seeded ${i}` })));
    await sender.close();
  };
/** Receives and completes whatever a sample left in the queue (and its dead-letter queue). */
const drain = async () => {
  for (const subQueueType of [undefined, 'deadLetter']) {
    const receiver = client.createReceiver(QUEUE, { receiveMode: 'receiveAndDelete', subQueueType });
    while ((await receiver.receiveMessages(50, { maxWaitTimeInMs: 300 })).length > 0) {}
    await receiver.close();
  }
};
/** The number of messages in the queue's dead-letter queue, for samples that only print. */
const deadLettered = async () =>
  (await client.createReceiver(QUEUE, { subQueueType: 'deadLetter' }).peekMessages(100)).length;

// In order: each step may use what the earlier ones left. `known` marks a sample that fails
// for a reason outside the emulator (docs/servicebus.md, "The official samples"); it counts as
// expected only if it does fail.
const steps = [
  { sample: 'javascript/browseMessages.js', setup: seed(10), expect: /Got 10 messages\./ },
  { sample: 'javascript/receiveMessagesLoop.js', expect: /Received 10 messages/ },
  {
    sample: 'typescript/src/receiveMessagesStreaming.ts',
    setup: seed(3),
    expect: /Received message: seeded 2/,
  },
  {
    sample: 'javascript/exceedMaxDeliveryCount.js',
    setup: seed(1),
    expect: /DeliveryCount 9[\s\S]*Deadletter message: seeded 0/,
  },
  {
    sample: 'javascript/advanced/movingMessagesToDLQ.js',
    expect: /Deadletter the one message/,
    check: async () => (await deadLettered()) === 1 || 'the message is not in the dead-letter queue',
  },
  { sample: 'javascript/advanced/processMessageFromDLQ.js', expect: /Received the message from DLQ/ },
  {
    sample: 'javascript/advanced/deferral.js',
    setup: drain,
    // Steps arrive shuffled; every step is processed once, in order, directly or deferred.
    expect: /step: 5[\s\S]*Total number of deferred messages/,
    reject: /No message found|Error/,
  },
  {
    sample: 'javascript/deleteMessages.js',
    client: '7.10',
    setup: drain,
    expect:
      /Peeked messages: 10\.\n10 messages has been deleted\.\nPeeked messages \(2\): 10\.\n0 messages has been deleted this time\./,
  },
  {
    sample: 'javascript/batchDeleteMessages.js',
    client: '7.10',
    setup: drain,
    known: `receiver.batchDeleteMessages is not a function in ${version710} (it became deleteMessages)`,
  },
  {
    sample: 'javascript/advanced/sessionState.js',
    expect: /Items in cart for alice: \[\][\s\S]*Items in cart for bob: \["Pencil","Paper","Stapler"\]/,
  },
  {
    // One connection string for ServiceBusClient and ServiceBusAdministrationClient: the
    // AMQP port answers the administration requests too (the emulator runs with --admin-port).
    sample: 'javascript/topicSubscriptionWithRuleOperationsSample.js',
    client: '7.10',
    expect: /^Received message: test-red3\n$/,
  },
  {
    sample: 'typescript/src/advanced/ruleManager.ts',
    client: '7.10',
    expect:
      /correlationRule[\s\S]*Deleting rules\.\.\.\nListing all rules again\.\.\.\n\$Default\nDeleting topic\.\.\./,
  },
  {
    sample: 'javascript/usingNamedKeyCredential.js',
    env: { SERVICEBUS_HOSTNAME: host, SERVICEBUS_SAS_POLICY: 'k', SERVICEBUS_SAS_KEY: 'v' },
    known: 'a host name and a credential: the client always speaks TLS on 5671, an emulator plain AMQP',
  },
];

/** The sample as node runs it: JavaScript as is, TypeScript with its types stripped. */
function runnable(sample) {
  const file = join(samplesDir, sample);
  if (!sample.endsWith('.ts')) return file;
  const ts = require('typescript');
  const { outputText } = ts.transpileModule(readFileSync(file, 'utf8'), {
    compilerOptions: {
      module: ts.ModuleKind.CommonJS,
      target: ts.ScriptTarget.ES2022,
      esModuleInterop: true,
    },
  });
  const out = join(work, 'ts', sample.replace(/\.ts$/, '.js'));
  mkdirSync(dirname(out), { recursive: true });
  writeFileSync(out, outputText);
  return out;
}

const results = [];
const started = Date.now();
for (const step of steps) {
  const { sample } = step;
  if (only && !only.test(sample)) continue;
  if (!existsSync(join(samplesDir, sample))) {
    console.log(`MISSING ${sample}`);
    results.push({ sample, ok: false });
    continue;
  }
  const source = readFileSync(join(samplesDir, sample), 'utf8');
  if (/DefaultAzureCredential/.test(source)) {
    // Newer revisions of many samples sign in with Microsoft Entra ID; neither emulator can.
    console.log(`NOT RUN ${sample}: DefaultAzureCredential (Microsoft Entra ID), no connection string`);
    results.push({ sample, ok: true });
    continue;
  }
  if (step.setup) await step.setup();
  const version = step.client ?? '7.9';
  const env = {
    PATH: process.env.PATH,
    NODE_PATH: [roots[version], depsDir, projectModules].filter(Boolean).join(':'),
    SERVICEBUS_CONNECTION_STRING: connectionString,
    QUEUE_NAME: QUEUE,
    QUEUE_NAME_WITH_SESSIONS: SESSION_QUEUE,
    ...step.env,
  };
  const t0 = Date.now();
  const { code, stdout, stderr } = await new Promise((done) => {
    execFile(
      process.execPath,
      [runnable(sample)],
      { env, timeout: 90_000, cwd: work },
      (error, stdout, stderr) => done({ code: error ? (error.code ?? 'killed') : 0, stdout, stderr }),
    );
  });
  const output = `${stdout}${stderr}`;
  let passed =
    code === 0 &&
    stderr.trim() === '' &&
    (!step.expect || step.expect.test(stdout)) &&
    !step.reject?.test(output);
  let note = '';
  if (passed && step.check) {
    const checked = await step.check();
    if (checked !== true) {
      passed = false;
      note = ` (${checked})`;
    }
  }
  const ms = Date.now() - t0;
  const label = step.known ? (passed ? 'UNEXPECTED PASS' : 'KNOWN FAIL') : passed ? 'PASS' : 'FAIL';
  const ok = step.known ? !passed : passed;
  results.push({ sample, ok });
  console.log(
    `${label} ${sample} [@azure/service-bus ${version === '7.10' ? version710 : '7.9.5'}] (${ms} ms)${note}`,
  );
  if (step.known) console.log(`    why: ${step.known}`);
  if (!passed || process.env.VERBOSE) {
    for (const line of output.trim().split('\n').slice(0, 12)) console.log(`    ${line}`);
  }
}
const failed = results.filter((r) => !r.ok);
console.log(
  `\n${results.length - failed.length}/${results.length} as documented, in ${Date.now() - started} ms`,
);
console.log(`(administration API of this run: ${adminConnectionString})`);
await client.close();
cli.kill('SIGTERM');
rmSync(work, { recursive: true, force: true });
process.exit(failed.length ? 1 : 0);
