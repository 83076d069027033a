import type {
  AdapterRuntime,
  BrokerAdapter,
  DeadLetterReason,
  Delivery,
  Envelope,
  TypedBrokerConfig,
} from '@oncely/core';
import { LeaseLostError } from '@oncely/core';

/** What happened to one delivery, in order. */
export type Settlement =
  | { kind: 'ack' }
  | { kind: 'retry'; delayMs: number }
  | { kind: 'dead-letter'; reason: DeadLetterReason; detail: string }
  | { kind: 'release' };

/**
 * A hand-driven adapter for testing the core pipeline in isolation: the test pushes
 * envelopes and reads back how each delivery was settled. It is not a broker (no
 * redelivery of its own); broker behaviour is covered by the conformance suite.
 */
export class ScriptedAdapter implements BrokerAdapter {
  readonly type = 'scripted';
  readonly defaultIdStrategy = { attribute: 'message-id' } as const;
  lease: { extendByMs: number } | undefined;
  runtime!: AdapterRuntime;
  readonly settlements: Array<{ envelope: Envelope; settlement: Settlement }> = [];
  extensions = 0;
  /** Set to make the next lease extensions fail as lost. */
  leaseLost = false;
  paused = 0;
  resumed = 0;

  constructor(options: { leaseMs?: number } = {}) {
    this.lease = options.leaseMs ? { extendByMs: options.leaseMs } : undefined;
  }

  async start(runtime: AdapterRuntime): Promise<void> {
    this.runtime = runtime;
  }
  async pause(): Promise<void> {
    this.paused++;
  }
  async resume(): Promise<void> {
    this.resumed++;
  }
  async stop(): Promise<void> {}
  async close(): Promise<void> {}

  /** Delivers one envelope and resolves with its settlement. */
  async deliver(patch: Partial<Envelope> & { id?: string }): Promise<Settlement> {
    const { id, ...rest } = patch;
    const envelope: Envelope = {
      body: '{}',
      attributes: id === undefined ? {} : { 'message-id': id },
      source: 'scripted',
      raw: null,
      ...rest,
    };
    let settled: Settlement | undefined;
    const record = (settlement: Settlement) => {
      settled = settlement;
      this.settlements.push({ envelope, settlement });
    };
    const delivery: Delivery = {
      envelope,
      ack: async () => record({ kind: 'ack' }),
      retryLater: async (delayMs) => record({ kind: 'retry', delayMs }),
      deadLetter: async (reason, detail) => record({ kind: 'dead-letter', reason, detail }),
      release: async () => record({ kind: 'release' }),
      extendLease: async () => {
        if (this.leaseLost) throw new LeaseLostError('scripted lease lost');
        this.extensions++;
      },
    };
    await this.runtime.dispatch(delivery);
    if (!settled) throw new Error('delivery was not settled');
    return settled;
  }
}

/**
 * The `broker` section of a consumer built on an adapter of the test's own
 * (`new Consumer(config, adapter)`): the consumer only checks that `type` names a known
 * adapter and never loads it, so none of that adapter's options are there. Typed by a cast:
 * `TypedBrokerConfig` is the union of the adapters whose types this program imports
 * (declaration merging: @oncely/memory's requires `queue` and `broker`).
 */
export function placeholderBroker(): TypedBrokerConfig {
  return { type: 'memory' } as TypedBrokerConfig;
}
