/**
 * The consumers of a chaos run: K slots, each running one consumer at a time. A consumer
 * is a child process (real brokers) or, for the in-process memory broker, a "virtual
 * process" in the runner's own process. Either can be killed without settling anything
 * and replaced by a new generation.
 */
import { spawn } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { TcpProxy } from '@oncely/testkit';
import { startChaosConsumer } from './chaosConsumer.mjs';
import { openChaosStore } from './chaosStore.mjs';
import { KillSwitch } from './deliveryFaults.mjs';

const CHILD_SCRIPT = fileURLToPath(new URL('./consumerChild.mjs', import.meta.url));

/**
 * @typedef {object} Worker
 * @property {number} slot
 * @property {number} generation
 * @property {string} label
 * @property {boolean} alive
 * @property {() => Promise<void>} start resolves once the consumer runs
 * @property {(point: 'before-commit' | 'after-commit') => void} arm
 * @property {() => void} disarm
 * @property {() => Promise<void>} kill SIGKILL (or the virtual equivalent); resolves once dead
 * @property {(timeoutMs: number) => Promise<void>} stop graceful stop, killed after `timeoutMs`
 * @property {Promise<void>} exited
 */

/**
 * @typedef {import('./chaosConsumer.mjs').ConsumerReport | { type: 'ready' } | { type: 'stopped' } | { type: 'error', message: string }} WorkerReport
 */

/**
 * A consumer child process running consumerChild.mjs. Its stdout and stderr go to
 * `logFile`.
 *
 * @implements {Worker}
 */
export class ChildWorker {
  alive = false;
  /** Set when the runner ends it (kill or stop): any other exit is unexpected. */
  expectedExit = false;
  /** @type {import('node:child_process').ChildProcess | undefined} */
  #child;
  /** @type {Promise<void>} */
  exited = Promise.resolve();

  /**
   * @param {object} options
   * @param {number} options.slot
   * @param {number} options.generation
   * @param {import('./consumerChild.mjs').ChildConfig} options.config
   * @param {string} options.logFile
   * @param {string} [options.execPath] the Node binary to start it with (default: the runner's)
   * @param {(worker: ChildWorker, report: WorkerReport) => void} options.onReport
   * @param {(worker: ChildWorker, code: number | null, signal: NodeJS.Signals | null) => void} options.onExit
   */
  constructor(options) {
    this.options = options;
    this.slot = options.slot;
    this.generation = options.generation;
    this.label = options.config.plan.label;
  }

  start() {
    const fd = openSync(this.options.logFile, 'a');
    const child = spawn(this.options.execPath ?? process.execPath, [CHILD_SCRIPT], {
      cwd: process.cwd(),
      env: { ...process.env, ONCELY_CHAOS_CHILD: JSON.stringify(this.options.config) },
      stdio: ['ignore', fd, fd, 'ipc'],
    });
    closeSync(fd);
    this.#child = child;
    this.alive = true;
    this.exited = new Promise((resolve) => {
      child.once('exit', (code, signal) => {
        this.alive = false;
        this.options.onExit(this, code, signal);
        resolve();
      });
    });
    return new Promise((resolve, reject) => {
      // A bound for a start that hangs, not a measure: under load a child took more than 30 s
      // to load its client and start (Pub/Sub, fresh clone of 160546f under ci-under-load.sh).
      const timer = setTimeout(() => {
        reject(new Error(`${this.label} did not start within 120 s (log: ${this.options.logFile})`));
      }, 120_000);
      child.on('message', (/** @type {WorkerReport} */ report) => {
        if (report.type === 'ready') {
          clearTimeout(timer);
          resolve();
        } else if (report.type === 'error') {
          clearTimeout(timer);
          reject(new Error(`${this.label} failed: ${report.message}`));
        }
        this.options.onReport(this, report);
      });
      child.once('exit', (code, signal) => {
        clearTimeout(timer);
        reject(
          new Error(
            `${this.label} exited (${code ?? signal}) before it was ready (log: ${this.options.logFile})`,
          ),
        );
      });
    });
  }

  /** @param {'before-commit' | 'after-commit'} point */
  arm(point) {
    this.#send({ type: 'arm', point });
  }

  disarm() {
    this.#send({ type: 'disarm' });
  }

  async kill() {
    this.expectedExit = true;
    if (this.alive) this.#child?.kill('SIGKILL');
    await this.exited;
  }

  /** @param {number} timeoutMs */
  async stop(timeoutMs) {
    if (!this.alive) return;
    this.expectedExit = true;
    this.#send({ type: 'stop' });
    const timer = setTimeout(() => this.#child?.kill('SIGKILL'), timeoutMs);
    await this.exited;
    clearTimeout(timer);
  }

  /** @param {unknown} message */
  #send(message) {
    if (this.alive && this.#child?.connected) this.#child.send(/** @type {any} */ (message), () => {});
  }
}

/**
 * A consumer in the runner's own process (memory broker). It reaches PostgreSQL through
 * a TCP proxy of its own: killing it cuts that proxy (its open transactions die with
 * their connections, as when a process dies) and trips its kill switch (nothing it does
 * afterwards reaches the broker, so its leased messages come back when the lease lapses).
 *
 * @implements {Worker}
 */
export class VirtualWorker {
  alive = false;
  /** @type {Promise<void>} */
  exited = Promise.resolve();
  #switch = new KillSwitch();
  /** @type {TcpProxy | undefined} */
  #proxy;
  /** @type {ReturnType<typeof openChaosStore> | undefined} */
  #store;
  /** @type {Awaited<ReturnType<typeof startChaosConsumer>> | undefined} */
  #worker;
  /** @type {() => void} */
  #markExited = () => {};
  /** The dead consumer winding down in the background (awaited by {@link VirtualWorker.settled}). */
  #zombie = Promise.resolve();

  /**
   * @param {object} options
   * @param {number} options.slot
   * @param {number} options.generation
   * @param {import('./chaosConsumer.mjs').ConsumerPlan} options.plan
   * @param {import('@oncely/core').BrokerConfig} options.brokerConfig
   * @param {import('@oncely/core').AdapterModule} options.adapterModule
   * @param {{ host: string, port: number, database: string, user: string }} options.database where its proxy forwards to
   * @param {string} options.schema
   * @param {number} options.poolMax
   * @param {import('@oncely/core').Logger} options.logger
   * @param {(worker: VirtualWorker, report: WorkerReport) => void} options.onReport
   */
  constructor(options) {
    this.options = options;
    this.slot = options.slot;
    this.generation = options.generation;
    this.label = options.plan.label;
  }

  async start() {
    const { database } = this.options;
    this.#proxy = new TcpProxy({ host: database.host, port: database.port });
    const port = await this.#proxy.start();
    const kind = this.options.plan.store ?? 'postgres';
    this.#store = openChaosStore(kind, {
      url: `${kind === 'mysql' ? 'mysql' : 'postgres'}://${database.user}@127.0.0.1:${port}/${database.database}`,
      schema: this.options.schema,
      poolMax: this.options.poolMax,
      logger: this.options.logger,
    });
    const ks = this.#switch;
    this.exited = new Promise((resolve) => {
      this.#markExited = resolve;
    });
    this.#worker = await startChaosConsumer({
      plan: this.options.plan,
      store: this.#store,
      adapterModule: this.options.adapterModule,
      brokerConfig: this.options.brokerConfig,
      // A dead process reports nothing.
      report: (report) => {
        if (!ks.killed) this.options.onReport(this, report);
      },
      freeze: () => /** @type {Promise<never>} */ (ks.dead),
      logger: this.options.logger,
      wrapAdapter: (adapter) => ks.wrap(adapter),
    });
    this.alive = true;
  }

  /** @param {'before-commit' | 'after-commit'} point */
  arm(point) {
    this.#worker?.arm(point);
  }

  disarm() {
    this.#worker?.disarm();
  }

  async kill() {
    if (!this.alive) return;
    this.alive = false;
    this.#switch.kill();
    await this.#proxy?.close();
    this.#markExited();
    // The consumer object lives on as a zombie whose every settlement is swallowed; stop
    // it in the background so its receive loop ends and its pool closes.
    const worker = this.#worker;
    const store = this.#store;
    this.#zombie = (async () => {
      await worker?.stop().catch(() => {});
      await store?.close().catch(() => {});
    })();
  }

  /** @param {number} _timeoutMs */
  async stop(_timeoutMs) {
    if (!this.alive) return;
    this.alive = false;
    await this.#worker?.stop();
    await this.#store?.close().catch(() => {});
    await this.#proxy?.close();
    this.#markExited();
  }

  /** Resolves once a killed consumer has wound down. */
  settled() {
    return this.#zombie;
  }
}

/**
 * K slots of consumers, one generation at a time per slot.
 */
export class ConsumerPool {
  /** @type {Worker[]} */
  workers = [];
  /** @type {Worker[]} */
  retired = [];
  unexpectedExits = 0;
  stopping = false;

  /**
   * @param {number} size
   * @param {(slot: number, generation: number) => Promise<Worker>} create
   */
  constructor(size, create) {
    this.size = size;
    this.create = create;
    /** @type {number[]} */
    this.generations = Array.from({ length: size }, () => 0);
  }

  async startAll() {
    await Promise.all(Array.from({ length: this.size }, (_, slot) => this.startSlot(slot)));
  }

  /** @param {number} slot */
  async startSlot(slot) {
    const generation = ++this.generations[slot];
    const worker = await this.create(slot, /** @type {number} */ (generation));
    this.workers[slot] = worker;
    await worker.start();
    return worker;
  }

  /** Workers running now. */
  live() {
    return this.workers.filter((worker) => worker?.alive);
  }

  /**
   * Kills the worker of `slot` and starts the next generation after `restartDelayMs`.
   *
   * @param {number} slot
   * @param {number} restartDelayMs
   */
  async killAndRestart(slot, restartDelayMs) {
    const worker = this.workers[slot];
    if (!worker) return;
    await worker.kill();
    this.retired.push(worker);
    await sleep(restartDelayMs);
    if (!this.stopping) await this.startSlot(slot);
  }

  /** Graceful stop of every live worker. @param {number} timeoutMs */
  async stopAll(timeoutMs) {
    this.stopping = true;
    await Promise.all(this.live().map((worker) => worker.stop(timeoutMs)));
  }

  /** SIGKILLs whatever is left (cleanup after a failure). */
  async killAll() {
    this.stopping = true;
    await Promise.all(this.workers.map((worker) => worker?.kill()));
  }
}

/** @param {number} ms */
export function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** @param {string} dir @param {string} label */
export function logFileFor(dir, label) {
  return join(dir, `${label.replace(/[^\w.-]/g, '_')}.log`);
}
