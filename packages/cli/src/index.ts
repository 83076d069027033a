export { parseDuration } from './duration.js';
export type { CliIo } from './main.js';
export { main } from './main.js';
