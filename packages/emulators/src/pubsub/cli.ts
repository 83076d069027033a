// `oncely-emulator pubsub`: filled in by the pubsub emulator work.
export async function main(_argv: string[]): Promise<void> {
  console.error('oncely-emulator pubsub: not written yet');
  process.exitCode = 2;
}
