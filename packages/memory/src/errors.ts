import { LeaseLostError, OncelyError } from '@oncely/core';

/**
 * A settle or extend used a receipt that is no longer valid: its lease expired, or the
 * message was already redelivered (with a new receipt) or settled. The message itself is
 * untouched. It is a {@link LeaseLostError} (code `LEASE_LOST`), so the core's lease
 * keeper treats it as a lost lease.
 *
 * @example
 * ```ts
 * try { await broker.ack(receipt); } catch (e) { if (e instanceof StaleReceiptError) console.log('redelivered meanwhile'); }
 * ```
 */
export class StaleReceiptError extends LeaseLostError {
  constructor(
    readonly receipt: string,
    why: string,
  ) {
    super(`receipt ${receipt} is stale: ${why}`);
  }
}

/**
 * The broker was closed: it accepts no more sends or receives.
 *
 * @example
 * ```ts
 * broker.close();
 * await broker.send('q', { body: 1 }).catch((e) => e instanceof BrokerClosedError); // true
 * ```
 */
export class BrokerClosedError extends OncelyError {
  constructor() {
    super('SHUTDOWN', 'the memory broker is closed');
  }
}

/**
 * A failure injected by `broker.faults` (for example `failExtend`). It deliberately is
 * not an Oncely error: it stands in for a broker SDK's network error, which adapters see
 * as a foreign, transient failure.
 *
 * @example
 * ```ts
 * broker.faults = { failExtend: () => true };
 * await broker.extend(receipt, 1000).catch((e) => e instanceof InjectedFaultError); // true
 * ```
 */
export class InjectedFaultError extends Error {
  readonly code = 'INJECTED_FAULT';
  constructor(readonly fault: string) {
    super(`injected fault: ${fault}`);
    this.name = 'InjectedFaultError';
  }
}
