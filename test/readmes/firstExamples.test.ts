import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { connect, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import ts from 'typescript';
import { afterAll, describe, expect, it } from 'vitest';

// The first ```ts block of every public package's README is the example a user pastes
// first: it must run as written, on the embedded store, an in-process emulator or the
// service the README names (with the default URL it documents), print the line it
// promises, and stop everything so the process exits by itself. Each block is transpiled
// (test/types/readmeSnippets.test.ts type-checks it) into a module inside the repository,
// so `@oncely/*` resolve to the built workspace packages, and run with `node`.
const root = join(import.meta.dirname, '..', '..');
mkdirSync(join(import.meta.dirname, '.tmp'), { recursive: true });
const scratch = mkdtempSync(join(import.meta.dirname, '.tmp', 'examples-'));
const CI = process.env.CI === 'true';

type Service = 'postgres' | 'mysql' | 'rabbitmq' | 'kafka';

interface Example {
  /** The whole of stdout: the one line the README's comment or prose promises. */
  prints: RegExp;
  /** Variables the README tells users to set; the services' URLs come from the environment. */
  env?: Record<string, string>;
  /** A service the example connects to, beyond what it starts itself. */
  needs?: Service;
}

// The README says so: @google-cloud/pubsub otherwise probes for Google Cloud's metadata server.
const PUBSUB_ENV = { METADATA_SERVER_DETECTION: 'none' };

const EXAMPLES: Record<string, Example> = {
  core: { prints: /^core: 2 deliveries of order-1, 1 payment$/ },
  emulators: {
    prints: /^emulators: order-1 sent twice, pubsub delivered 2, servicebus 1$/,
    env: PUBSUB_ENV,
  },
  http: { prints: /^http: 2 requests \(201, 201 replayed=true\), 1 payment$/ },
  kafka: { prints: /^kafka: 2 deliveries of order-1, 1 payment$/, needs: 'kafka' },
  lambda: { prints: /^lambda: 2 records of order-1, 1 payment, 0 failed$/ },
  memory: { prints: /^memory: 2 deliveries of order-1, 1 payment$/ },
  mysql: {
    prints: /^mysql: 2 deliveries of order-\d+ \(processed, duplicate\), 1 payment$/,
    needs: 'mysql',
  },
  postgres: {
    prints: /^postgres: 2 deliveries of order-\d+ \(processed, duplicate\), 1 payment$/,
    needs: 'postgres',
  },
  pubsub: { prints: /^pubsub: 2 deliveries of order-1, 1 payment$/, env: PUBSUB_ENV },
  rabbitmq: { prints: /^rabbitmq: 2 deliveries of order-1, 1 payment$/, needs: 'rabbitmq' },
  servicebus: { prints: /^servicebus: 2 deliveries of order-1, 1 payment$/ },
  sqs: { prints: /^sqs: 2 deliveries of order-1, 1 payment$/ },
  testkit: { prints: /^testkit: 1 ack lost, 2 deliveries of order-1, 1 payment$/ },
};

/** Public packages whose README has no example to run, and why. */
const NOT_RUN: Record<string, string> = {
  cli: 'its README shows shell commands (oncely migrate, doctor, ...), no TypeScript; packages/cli/test runs them',
};

const FIRST_TS_BLOCK = /(<!-- snippet-context: .*? -->\n[ \t]*)?```ts\n([\s\S]*?)```/;

function readme(name: string): string {
  return readFileSync(join(root, 'packages', name, 'README.md'), 'utf8');
}

const PUBLIC_PACKAGES = readdirSync(join(root, 'packages')).filter(
  (name) => !JSON.parse(readFileSync(join(root, 'packages', name, 'package.json'), 'utf8')).private,
);

/** Resolves once something accepts TCP connections at host:port; rejects after 3 s. */
function reachable(host: string, port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host, port, timeout: 3000 });
    socket.once('connect', () => {
      socket.destroy();
      resolve();
    });
    socket.once('timeout', () => {
      socket.destroy();
      reject(new Error(`no answer from ${host}:${port} within 3 s`));
    });
    socket.once('error', reject);
  });
}

async function probeUrl(variable: string, fallback: string): Promise<string | undefined> {
  const url = new URL(process.env[variable] ?? fallback);
  try {
    await reachable(url.hostname, Number(url.port));
    return undefined;
  } catch (error) {
    return `nothing answers at ${variable}=${url.host} (${(error as Error).message})`;
  }
}

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

interface Run {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  ms: number;
}

/**
 * Runs `command args` with `env` without blocking the event loop (the other examples run
 * meanwhile), killing it after `timeoutMs`: an example that does not stop all it started
 * never exits.
 */
function run(command: string, args: string[], env: NodeJS.ProcessEnv, timeoutMs: number): Promise<Run> {
  const started = Date.now();
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { cwd: root, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk) => {
      stdout += chunk;
    });
    child.stderr.on('data', (chunk) => {
      stderr += chunk;
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.once('error', reject);
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr, ms: Date.now() - started });
    });
  });
}

/**
 * The Kafka the README tells users to start: KAFKA_BROKERS when set, else the repository's
 * test broker (test/emulators/kafka/start.sh) on ports of its own (KAFKA_PORT.. when set,
 * else free ones) and a temporary data dir, so the kafka project's broker is left alone.
 */
class KafkaForExamples {
  private startedEnv: NodeJS.ProcessEnv | undefined;
  private starting: Promise<{ brokers?: string; missing?: string }> | undefined;

  brokers(): Promise<{ brokers?: string; missing?: string }> {
    this.starting ??= this.start();
    return this.starting;
  }

  private async start(): Promise<{ brokers?: string; missing?: string }> {
    const external = process.env.KAFKA_BROKERS;
    if (external) {
      const [host, port] = external.split(',')[0]!.split(':');
      try {
        await reachable(host!, Number(port));
        return { brokers: external };
      } catch (error) {
        return { missing: `nothing answers at KAFKA_BROKERS=${external} (${(error as Error).message})` };
      }
    }
    const base = process.env.KAFKA_PORT ? Number(process.env.KAFKA_PORT) : undefined;
    const dataDir = mkdtempSync(join(tmpdir(), 'oncely-readme-kafka-'));
    const env = {
      ...process.env,
      KAFKA_PORT: String(base ?? (await freePort())),
      KAFKA_CONTROLLER_PORT: process.env.KAFKA_CONTROLLER_PORT ?? String(base ? base + 1 : await freePort()),
      KAFKA_PROXIED_PORT: process.env.KAFKA_PROXIED_PORT ?? String(base ? base + 2 : await freePort()),
      KAFKA_PROXY_PORT: process.env.KAFKA_PROXY_PORT ?? String(base ? base + 3 : await freePort()),
      KAFKA_DATA_DIR: join(dataDir, 'data'),
      KAFKA_LOG_FILE: join(dataDir, 'kafka.log'),
    };
    this.startedEnv = env;
    const started = await run('bash', [join(root, 'test/emulators/kafka/start.sh')], env, 300_000);
    const brokers = /KAFKA_BROKERS=(\S+)/.exec(started.stdout)?.[1];
    if (started.code !== 0 || !brokers)
      return {
        missing: `test/emulators/kafka/start.sh failed (${started.code ?? started.signal}):\n${started.stdout}${started.stderr}`,
      };
    return { brokers };
  }

  async stop(): Promise<void> {
    if (!this.startedEnv) return;
    await run('bash', [join(root, 'test/emulators/kafka/stop.sh')], this.startedEnv, 60_000);
    rmSync(join(this.startedEnv.KAFKA_DATA_DIR!, '..'), { recursive: true, force: true });
  }
}

const kafka = new KafkaForExamples();

/** Why the service is missing, or undefined when it answers. */
async function missingService(service: Service): Promise<string | undefined> {
  switch (service) {
    case 'postgres':
      return probeUrl('DATABASE_URL', 'postgres://postgres@127.0.0.1:5432/test');
    case 'mysql':
      return probeUrl('MYSQL_URL', 'mysql://root@127.0.0.1:3306/test');
    case 'rabbitmq':
      return probeUrl('RABBITMQ_URL', 'amqp://guest:guest@127.0.0.1:5672');
    case 'kafka':
      return (await kafka.brokers()).missing;
  }
}

afterAll(() => kafka.stop(), 120_000);

describe("each public package README's first example", () => {
  it('exists for every public package, or the package is listed with the reason it has none', () => {
    expect(PUBLIC_PACKAGES.length).toBeGreaterThanOrEqual(14);
    expect([...Object.keys(EXAMPLES), ...Object.keys(NOT_RUN)].sort()).toEqual([...PUBLIC_PACKAGES].sort());
    for (const name of Object.keys(NOT_RUN)) {
      expect(FIRST_TS_BLOCK.test(readme(name)), `${name}'s README has a ts block now: run it`).toBe(false);
    }
  });

  it.each(Object.keys(EXAMPLES))(
    'of %s is whole (nothing declared, no context from the prose) and short',
    (name) => {
      const match = FIRST_TS_BLOCK.exec(readme(name));
      expect(match, `${name}'s README has no ts block`).not.toBeNull();
      const [, context, source] = match!;
      expect(context, 'a snippet-context comment: the example is a fragment').toBeUndefined();
      expect(source).not.toMatch(/^\s*declare /m);
      expect(source).not.toMatch(/\/\/ \.\.\.|^\s*\.\.\.\s*$/m);
      expect(source!.trimEnd().split('\n').length).toBeLessThan(45);
    },
  );

  // Examples share no state (each its own queue, topic, embedded store or fresh IDs), so
  // they run side by side, vitest's maxConcurrency (5) at a time.
  for (const [name, example] of Object.entries(EXAMPLES)) {
    it.concurrent(
      `of ${name} runs as written and prints what it did`,
      async (context) => {
        const missing = example.needs && (await missingService(example.needs));
        if (missing) {
          if (CI)
            throw new Error(`${name}'s example needs ${example.needs}, required under CI=true: ${missing}`);
          context.skip(`needs ${example.needs}: ${missing}`); // reported as skipped, with the reason
        }
        const source = FIRST_TS_BLOCK.exec(readme(name))![2]!;
        const file = join(scratch, `${name}-first-example.mjs`);
        writeFileSync(
          file,
          ts.transpileModule(source, {
            compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 },
            fileName: `${name}.ts`,
          }).outputText,
        );
        const env: NodeJS.ProcessEnv = { ...process.env, ...example.env };
        if (example.needs === 'kafka') env.KAFKA_BROKERS = (await kafka.brokers()).brokers;
        const result = await run(process.execPath, [file], env, 240_000);
        const report = `exit ${result.code ?? result.signal} after ${result.ms} ms\n--- stdout\n${result.stdout}--- stderr\n${result.stderr}`;
        expect(result.signal, `killed: it did not exit by itself\n${report}`).toBeNull();
        expect(result.code, report).toBe(0);
        expect(result.stdout.trim(), report).toMatch(example.prints);
      },
      // Kafka's includes starting the broker: a JVM start that takes minutes on a loaded machine.
      example.needs === 'kafka' ? 600_000 : 300_000,
    );
  }
});

afterAll(() => rmSync(scratch, { recursive: true, force: true }));
