import { spawn } from 'node:child_process';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ServiceBusClient } from '@azure/service-bus';
import { ServiceBusAdministrationClient } from '@azure/service-bus-710';
import { expect, it } from 'vitest';

const CLI = fileURLToPath(new URL('../../dist/cli.js', import.meta.url));

it('oncely-emulator servicebus --config starts from a Config.json, prints its address, and serves the real client', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'sb-cli-'));
  const configPath = join(dir, 'Config.json');
  await writeFile(
    configPath,
    JSON.stringify({
      UserConfig: {
        Namespaces: [
          { Name: 'sbemulatorns', Queues: [{ Name: 'cli-queue', Properties: { LockDuration: 'PT10S' } }] },
        ],
        Logging: { Type: 'File' },
      },
    }),
  );
  const child = spawn(process.execPath, [CLI, 'servicebus', '--config', configPath, '--port', '0'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  try {
    const connectionString = await new Promise<string>((resolve, reject) => {
      let out = '';
      child.stdout.on('data', (chunk: Buffer) => {
        out += chunk.toString();
        const match = /connection string: (\S+)/.exec(out);
        if (match) resolve(match[1]!);
      });
      child.once('exit', (code) => reject(new Error(`the CLI exited with ${code}: ${out}`)));
    });
    expect(connectionString).toMatch(/^Endpoint=sb:\/\/127\.0\.0\.1:\d+;.*UseDevelopmentEmulator=true$/);
    const client = new ServiceBusClient(connectionString);
    await client.createSender('cli-queue').sendMessages({ body: 'hello' });
    const receiver = client.createReceiver('cli-queue', { receiveMode: 'receiveAndDelete' });
    const [message] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 2000 });
    expect(message?.body).toBe('hello');
    await client.close();
  } finally {
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGTERM');
    await exited;
  }
});

it('oncely-emulator servicebus --admin-port serves the administration API to ServiceBusAdministrationClient (SDK 7.10)', async () => {
  const child = spawn(process.execPath, [CLI, 'servicebus', '--port', '0', '--admin-port', '0'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  try {
    const adminConnectionString = await new Promise<string>((resolve, reject) => {
      let out = '';
      child.stdout.on('data', (chunk: Buffer) => {
        out += chunk.toString();
        const match = /administration connection string: (\S+)/.exec(out);
        if (match) resolve(match[1]!);
      });
      child.once('exit', (code) => reject(new Error(`the CLI exited with ${code}: ${out}`)));
    });
    const admin = new ServiceBusAdministrationClient(adminConnectionString);
    await admin.createQueue('cli-admin-queue', { maxDeliveryCount: 2 });
    expect((await admin.getQueue('cli-admin-queue')).maxDeliveryCount).toBe(2);
  } finally {
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGTERM');
    await exited;
  }
});
