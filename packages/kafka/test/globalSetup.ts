/**
 * Starts the Kafka test broker for the 'kafka' project (test/emulators/kafka/start.sh)
 * and stops it at the end, unless KAFKA_BROKERS names a broker someone already started.
 * Under CI=true a broker that does not start fails the run; elsewhere the tests that
 * need it skip with the reason.
 */
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { TestProject } from 'vitest/node';

const emulator = fileURLToPath(new URL('../../../test/emulators/kafka/', import.meta.url));

declare module 'vitest' {
  export interface ProvidedContext {
    /** Bootstrap brokers, comma-separated; '' when no broker could be started. */
    kafkaBrokers: string;
    /** Why kafkaBrokers is empty. */
    kafkaUnavailable: string;
    /** Port a client bootstraps at to have all its connections pass a proxy there ('' when not ours). */
    kafkaProxyPort: string;
    /** Port of the broker listener behind that proxy. */
    kafkaProxiedPort: string;
  }
}

export default function setup(project: TestProject): (() => void) | undefined {
  const external = process.env.KAFKA_BROKERS;
  if (external) {
    project.provide('kafkaBrokers', external);
    project.provide('kafkaUnavailable', '');
    project.provide('kafkaProxyPort', process.env.KAFKA_PROXY_PORT ?? '');
    project.provide('kafkaProxiedPort', process.env.KAFKA_PROXIED_PORT ?? '');
    return undefined;
  }
  const started = spawnSync('bash', [`${emulator}start.sh`], { encoding: 'utf8', timeout: 300_000 });
  if (started.status !== 0) {
    const reason = `test/emulators/kafka/start.sh failed (${started.status ?? started.signal}):\n${started.stdout}${started.stderr}`;
    if (process.env.CI === 'true') throw new Error(reason);
    console.warn(`[kafka] ${reason}\nThe Kafka tests are skipped.`);
    project.provide('kafkaBrokers', '');
    project.provide('kafkaUnavailable', reason);
    project.provide('kafkaProxyPort', '');
    project.provide('kafkaProxiedPort', '');
    return undefined;
  }
  const brokers = /KAFKA_BROKERS=(\S+)/.exec(started.stdout)?.[1] ?? '127.0.0.1:19092';
  project.provide('kafkaBrokers', brokers);
  project.provide('kafkaUnavailable', '');
  project.provide('kafkaProxyPort', process.env.KAFKA_PROXY_PORT ?? '19095');
  project.provide('kafkaProxiedPort', process.env.KAFKA_PROXIED_PORT ?? '19094');
  // A broker that was already running (started by hand) is left running.
  if (/already running/.test(started.stdout)) return undefined;
  return () => {
    spawnSync('bash', [`${emulator}stop.sh`], { encoding: 'utf8', timeout: 60_000, stdio: 'inherit' });
  };
}
