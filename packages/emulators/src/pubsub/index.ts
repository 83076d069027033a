// Filled in by the Pub/Sub emulator work (issue 13).
export {};
