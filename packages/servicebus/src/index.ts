// Filled in by the adapter work.
export {};
