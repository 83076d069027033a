import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { PubSub } from '@google-cloud/pubsub';
import { expect, it } from 'vitest';
import { PROJECT, uniqueName } from './support.js';

// `oncely-emulator pubsub --port 0`: prints where it listens, serves the real client,
// stops on SIGTERM.

it('starts from the CLI, serves the client and stops on SIGTERM', async () => {
  const cli = fileURLToPath(new URL('../../dist/cli.js', import.meta.url));
  const child = spawn(process.execPath, [cli, 'pubsub', '--port', '0', '--min-ack-deadline', '1'], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let output = '';
  child.stdout.setEncoding('utf8');
  const address = await new Promise<string>((resolve, reject) => {
    child.stdout.on('data', (chunk: string) => {
      output += chunk;
      const match = /PUBSUB_EMULATOR_HOST=(\S+)/.exec(output);
      if (match) resolve(match[1]!);
    });
    child.once('exit', (code) => reject(new Error(`the CLI exited with ${code}: ${output}`)));
  });
  const pubsub = new PubSub({ projectId: PROJECT, apiEndpoint: address });
  const [topic] = await pubsub.createTopic(uniqueName('cli'));
  expect(topic.name).toContain('/topics/cli-');
  await pubsub.close();
  const exited = once(child, 'exit');
  child.kill('SIGTERM');
  const [code] = await exited;
  expect(code).toBe(0);
});
