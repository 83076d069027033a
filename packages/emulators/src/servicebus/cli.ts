// `oncely-emulator servicebus`: filled in by the servicebus emulator work.
export async function main(_argv: string[]): Promise<void> {
  console.error('oncely-emulator servicebus: not written yet');
  process.exitCode = 2;
}
