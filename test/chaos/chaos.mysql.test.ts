/**
 * The chaos harness with the MySQL store (@oncely/mysql on the real MariaDB, `--store
 * mysql`): the same faults as chaos.test.ts — SIGKILLs at random moments and at both crash
 * points, lost acks, stalls past the lease, the database cut through the TCP proxy, broker
 * drops — and the same count: every order applied exactly once (lost 0, doubled 0).
 */
import { describe, it } from 'vitest';
import { chaos, expectExactlyOnce, hasMySql, hasRabbit } from './support.js';

describe.skipIf(!hasMySql)('chaos on the MySQL store: every order applied exactly once', () => {
  it('memory broker (in-process virtual processes)', async () => {
    expectExactlyOnce(await chaos('memory', { store: 'mysql' }));
  });

  it.skipIf(!hasRabbit)('RabbitMQ (consumer processes SIGKILLed)', async () => {
    expectExactlyOnce(await chaos('rabbitmq', { store: 'mysql' }), { brokerDrop: true });
  });
});
