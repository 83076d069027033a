import { type SpawnSyncReturns, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { checkPackage, createPackageFromTarballData } from '@arethetypeswrong/core';
import { publint } from 'publint';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

// What a user gets from npm: every public package packed with `npm pack` (what `files`
// and `exports` let through, nothing of the workspace), installed into a scratch project
// outside the repository, compiled there under strict with the users' settings, and run
// on Node 20 and Node 22: the memory package's README example as written (memory broker +
// PGlite), and a Pub/Sub consumer on the packed emulator. A file missing from a tarball, an
// export that points nowhere, a workspace-only import or a dependency that is only a
// devDependency fails here, not in a user's project.
const root = join(import.meta.dirname, '..', '..');
const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
const scratch = mkdtempSync(join(tmpdir(), 'oncely-packaging-'));
const NODE22 = process.env.ONCELY_NODE22 ?? 'node@22';
// The Node 20 binary: scripts/test.sh runs this file on Node 22 and names the machine's own
// Node in TEST_NODE20; run by hand on Node 20, the Node running the test.
const NODE20 = process.env.TEST_NODE20 ?? process.execPath;

/** The versions the workspace itself runs with, for the packages a user adds beside ours. */
function workspaceVersion(name: string): string {
  return JSON.parse(readFileSync(join(root, 'node_modules', name, 'package.json'), 'utf8')).version;
}

function run(command: string, args: string[], options: { cwd: string; timeoutMs?: number }) {
  const result = spawnSync(command, args, {
    cwd: options.cwd,
    encoding: 'utf8',
    timeout: options.timeoutMs ?? 300_000,
    // METADATA_SERVER_DETECTION=none: what the Pub/Sub README tells emulator users to set
    // (without it @google-cloud/pubsub asks the GCE metadata server for the universe
    // domain and warns that there is none).
    env: { ...process.env, npm_config_yes: 'true', METADATA_SERVER_DETECTION: 'none' },
  });
  return result;
}

function describeRun(result: SpawnSyncReturns<string>): string {
  return `exit ${result.status}${result.error ? ` (${result.error.message})` : ''}\n${result.stdout}\n${result.stderr}`;
}

/** The first ```ts block of a README: the example a user pastes first. */
function firstExample(readme: string): string {
  const match = /```ts\n([\s\S]*?)```/.exec(readFileSync(join(root, readme), 'utf8'));
  if (!match) throw new Error(`${readme} has no ts block`);
  return match[1]!;
}

const PUBSUB_CONSUMER = `import { PubSub } from '@google-cloud/pubsub';
import { startPubSubEmulator } from '@oncely/emulators/pubsub';
import { PostgresStore } from '@oncely/postgres';
import { createPubSubConsumer, publishWithId } from '@oncely/pubsub';

const emulator = await startPubSubEmulator({ port: 0 });
const pubsub = new PubSub({ projectId: 'packaging', apiEndpoint: emulator.address });
const [topic] = await pubsub.createTopic('orders');
await topic.createSubscription('orders-sub');

const store = PostgresStore.embedded();
await store.migrate();
const seen: string[] = [];
let resolveDone: () => void = () => {};
const done = new Promise<void>((resolve) => {
  resolveDone = resolve;
});
const consumer = createPubSubConsumer<{ orderId: string }>({
  name: 'packaging',
  broker: { projectId: 'packaging', subscription: 'orders-sub', apiEndpoint: emulator.address },
  store,
  handler: async (message) => {
    seen.push(message.body.orderId);
  },
});
consumer.on('duplicate', () => resolveDone());
await consumer.start();
await publishWithId(topic, { id: 'order-7', body: { orderId: 'order-7' } });
await publishWithId(topic, { id: 'order-7', body: { orderId: 'order-7' } }); // a producer retry
await done;
console.log(\`pubsub: \${seen.length} effect for 2 deliveries of \${seen.join(',')}\`);
await consumer.stop();
await pubsub.close();
await store.close();
await emulator.stop();
`;

let installed: SpawnSyncReturns<string>;
let packages: string[] = [];
let compiled: SpawnSyncReturns<string>;

beforeAll(() => {
  const tarballs = join(scratch, 'tarballs');
  mkdirSync(tarballs);
  packages = readdirSync(join(root, 'packages')).filter(
    (name) => !JSON.parse(readFileSync(join(root, 'packages', name, 'package.json'), 'utf8')).private,
  );
  const packed = run(
    'npm',
    ['pack', '--silent', '--pack-destination', tarballs, ...packages.flatMap((p) => ['-w', `packages/${p}`])],
    {
      cwd: root,
    },
  );
  expect(packed.status, describeRun(packed)).toBe(0);
  const tgz = (name: string) =>
    `file:tarballs/${readdirSync(tarballs).find((f) => f.startsWith(`oncely-${name}-`))}`;
  writeFileSync(
    join(scratch, 'package.json'),
    JSON.stringify(
      {
        name: 'oncely-user',
        private: true,
        type: 'module',
        dependencies: {
          '@oncely/core': tgz('core'),
          '@oncely/memory': tgz('memory'),
          '@oncely/postgres': tgz('postgres'),
          '@oncely/pubsub': tgz('pubsub'),
          '@oncely/emulators': tgz('emulators'),
          '@electric-sql/pglite': workspaceVersion('@electric-sql/pglite'),
          '@google-cloud/pubsub': workspaceVersion('@google-cloud/pubsub'),
        },
        devDependencies: { '@types/node': workspaceVersion('@types/node') },
        allowScripts: { protobufjs: false },
      },
      null,
      2,
    ),
  );
  installed = run('npm', ['install', '--no-audit', '--no-fund', '--prefer-offline'], { cwd: scratch });
  // The settings the READMEs tell users they need.
  writeFileSync(
    join(scratch, 'tsconfig.json'),
    JSON.stringify({
      compilerOptions: {
        strict: true,
        target: 'ES2022',
        module: 'NodeNext',
        moduleResolution: 'NodeNext',
        lib: ['ES2023'],
        types: ['node'],
        outDir: 'dist',
        skipLibCheck: true,
      },
      include: ['src'],
    }),
  );
  mkdirSync(join(scratch, 'src'));
  writeFileSync(
    join(scratch, 'src', 'memory.ts'),
    `${firstExample('packages/memory/README.md')}\nexport {};\n`,
  );
  writeFileSync(join(scratch, 'src', 'readme.ts'), `${firstExample('README.md')}\nexport {};\n`);
  writeFileSync(join(scratch, 'src', 'pubsub.ts'), PUBSUB_CONSUMER);
  compiled =
    installed.status === 0 ? run(process.execPath, [tsc, '-p', scratch], { cwd: scratch }) : installed;
}, 600_000);

// The scratch project holds two installs (hundreds of MB of node_modules): deleting it
// took over vitest's 10 s default on a loaded CI runner, which failed a green run. Async,
// so the worker stays responsive, with a bound for a hang, not a measure.
afterAll(() => rm(scratch, { recursive: true, force: true, maxRetries: 3 }), 300_000);

describe('the packed packages in a project of their own', () => {
  it('install from the tarballs and compile under strict', () => {
    expect(installed.status, describeRun(installed)).toBe(0);
    expect(installed.stderr).not.toMatch(/EBADENGINE|install-scripts/);
    expect(compiled.status, describeRun(compiled)).toBe(0);
  });

  it('publint (strict) and arethetypeswrong (ESM-only) find nothing in any tarball', async () => {
    expect(packages.length).toBeGreaterThanOrEqual(14);
    const problems: string[] = [];
    for (const name of packages) {
      const file = readdirSync(join(scratch, 'tarballs')).find((f) => f.startsWith(`oncely-${name}-`))!;
      const tarball = readFileSync(join(scratch, 'tarballs', file));
      // publint packs the package itself (npm pack), as it does from the command line.
      const lint = await publint({ pkgDir: join(root, 'packages', name), strict: true });
      for (const message of lint.messages)
        if (message.type !== 'suggestion')
          problems.push(`publint ${name}: ${message.code} at ${message.path.join('.')}`);
      // ESM only by design (every README says so): the CommonJS and node10 resolutions are
      // not offered, as attw's --profile esm-only ignores them.
      const analysis = await checkPackage(createPackageFromTarballData(new Uint8Array(tarball)));
      if (!analysis.types) problems.push(`attw ${name}: no types`);
      else
        for (const problem of analysis.problems)
          if (!('resolutionKind' in problem) || !['node10', 'node16-cjs'].includes(problem.resolutionKind))
            problems.push(`attw ${name}: ${problem.kind} ${JSON.stringify(problem)}`);
    }
    expect(problems).toEqual([]);
  }, 300_000);

  // Each run prints the version first, so the test sees which Node ran it.
  const nodes: Array<[string, RegExp, (script: string) => SpawnSyncReturns<string>]> = [
    [
      'Node 20',
      /^v20\./,
      (script) =>
        run('sh', ['-c', `"${NODE20}" --version && "${NODE20}" ${script}`], {
          cwd: scratch,
          timeoutMs: 120_000,
        }),
    ],
    [
      'Node 22',
      /^v22\./,
      // npm's node@22 package, as scripts/test.sh runs the Node 22 group (cached after the
      // first fetch). Under CI a missing Node 22 fails here: nothing skips.
      (script) =>
        run('npx', ['-y', '-p', NODE22, '-c', `node --version && node ${script}`], {
          cwd: scratch,
          timeoutMs: 300_000,
        }),
    ],
  ];
  for (const [node, version, runOn] of nodes) {
    it(`run on ${node}: the memory README's example as written`, () => {
      expect(compiled.status, describeRun(compiled)).toBe(0);
      const result = runOn('dist/memory.js');
      expect(result.status, describeRun(result)).toBe(0);
      expect(result.stdout).toMatch(version);
      expect(result.stdout).toContain('2 deliveries of order-1, 1 payment');
    }, 300_000);

    it(`run on ${node}: the root README's zero-setup example as pasted`, () => {
      expect(compiled.status, describeRun(compiled)).toBe(0);
      const result = runOn('dist/readme.js');
      expect(result.status, describeRun(result)).toBe(0);
      expect(result.stdout).toMatch(version);
      expect(result.stdout).toContain('2 deliveries, 1 charge');
    }, 300_000);

    it(`run on ${node}: a Pub/Sub consumer on the packed emulator`, () => {
      expect(compiled.status, describeRun(compiled)).toBe(0);
      const result = runOn('dist/pubsub.js');
      expect(result.status, describeRun(result)).toBe(0);
      expect(result.stdout).toMatch(version);
      expect(result.stdout).toContain('pubsub: 1 effect for 2 deliveries of order-7');
    }, 300_000);
  }
});
