/**
 * The consumer's events: each one recorded by telemetry, then given to the listeners.
 */
import { EventEmitter } from 'node:events';
import type { Telemetry } from '../telemetry.js';
import type { ConsumerEvent, ConsumerEventName, Logger } from '../types.js';

export class Events {
  private readonly emitter = new EventEmitter();

  constructor(
    private readonly telemetry: Telemetry,
    private readonly log: Logger,
  ) {
    // Unhandled 'error' events would crash the process; we never emit 'error'.
    this.emitter.setMaxListeners(0);
  }

  on(event: ConsumerEventName, listener: (event: ConsumerEvent) => void): void {
    this.emitter.on(event, listener);
  }

  off(event: ConsumerEventName, listener: (event: ConsumerEvent) => void): void {
    this.emitter.off(event, listener);
  }

  emit(name: ConsumerEventName, event: ConsumerEvent): void {
    this.telemetry.record(name, event);
    try {
      this.emitter.emit(name, event);
    } catch (error) {
      // A throwing listener must not derail the pipeline.
      this.log.warn(`'${name}' listener threw`, { error });
    }
  }
}
