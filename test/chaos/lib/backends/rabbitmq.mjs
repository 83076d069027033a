/**
 * RabbitMQ (the machine's shared 3.10 server). Each consumer connects through a TCP
 * proxy of its own in front of 5672, so a lost ack can be made real at once: the ack
 * frame is dropped and that consumer's connection goes, which is the only way RabbitMQ
 * ever loses an ack (the broker then requeues what the connection held). The broker-wide
 * fault closes every connection of the run from the server side (`rabbitmqctl eval`,
 * selected by connection name, so other users of the server are left alone). The server
 * is shared, so it is never restarted here.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { assertTopology, REASON_HEADER } from '@oncely/rabbitmq';
import { TcpProxy } from '@oncely/testkit';
import amqp from 'amqplib';

const run = promisify(execFile);

/**
 * @param {{ runId: string, rabbitUrl: string }} input
 * @returns {Promise<import('./types.mjs').Backend>}
 */
export async function rabbitmqBackend({ runId, rabbitUrl }) {
  const queue = `oncely_chaos_${runId}`;
  const namePrefix = `oncely-chaos:${runId}:`;
  const connection = await amqp.connect(rabbitUrl, {
    clientProperties: { connection_name: `oncely-chaos-runner:${runId}` },
  });
  connection.on('error', () => {});
  const channel = await connection.createConfirmChannel();
  channel.on('error', () => {});
  const setup = await connection.createChannel();
  await assertTopology(setup, { queue, queueType: 'classic' });
  await setup.close();
  const target = new URL(rabbitUrl);
  /** @type {Map<string, TcpProxy>} */
  const proxies = new Map();
  /** @type {Array<{ id?: string, reason: string }>} */
  const dead = [];

  const freshChannel = async () => {
    const ch = await connection.createChannel();
    ch.on('error', () => {});
    return ch;
  };

  return {
    name: 'rabbitmq',
    crossProcess: true,
    leaseMs: undefined,
    stallMs: 3000,
    leaseLossSlot: false,
    notes: {
      consumers: 'child processes',
      ackLoss: "the ack is dropped and that consumer's connection cut (TCP proxy): RabbitMQ requeues",
      stall: 'no broker lease: a stall only delays (consumer_timeout is 30 min)',
      brokerDrop: 'server-side close of every consumer connection of the run (rabbitmqctl eval)',
      brokerRestart: 'not done: the server is shared',
    },
    async consumerBroker({ label }) {
      const proxy = new TcpProxy({ host: target.hostname, port: Number(target.port || 5672) });
      const port = await proxy.start();
      proxies.set(label, proxy);
      const via = new URL(rabbitUrl);
      via.hostname = '127.0.0.1';
      via.port = String(port);
      return {
        type: 'rabbitmq',
        url: via.toString(),
        queue,
        queueType: 'classic',
        connectionName: `${namePrefix}${label}`,
        reconnect: { initialMs: 50, maxMs: 1000 },
        heartbeatSeconds: 5,
      };
    },
    async publish(messages) {
      for (const message of messages) {
        const content = Buffer.from(message.rawBody ?? JSON.stringify(message.body));
        channel.sendToQueue(queue, content, {
          persistent: true,
          contentType: 'application/json',
          ...(message.id === undefined ? {} : { messageId: message.id }),
        });
      }
      await channel.waitForConfirms();
    },
    async backlog() {
      // Ready messages are cheap to read over AMQP; unacked ones (and retry copies in
      // delay queues) only through rabbitmqctl, asked only once nothing is ready.
      const ch = await freshChannel();
      const ready = (await ch.checkQueue(queue)).messageCount;
      await ch.close().catch(() => {});
      if (ready > 0) return ready;
      let total = 0;
      for (const [name, messages] of await queueDepths(queue)) {
        if (name === queue || name.startsWith(`${queue}.delay.`)) total += messages;
      }
      return total;
    },
    async deadLetters() {
      // Taken off the dead-letter queue once and remembered.
      const ch = await freshChannel();
      for (;;) {
        const message = await ch.get(`${queue}.dlq`, { noAck: true });
        if (message === false) break;
        const reason = message.properties.headers?.[REASON_HEADER];
        dead.push({
          id: message.properties.messageId ?? undefined,
          reason: reason === undefined ? '(broker dead-lettered, no reason)' : String(reason),
        });
      }
      await ch.close().catch(() => {});
      return [...dead];
    },
    async disconnect() {
      const closed = await closeConnectionsServerSide(namePrefix);
      return `rabbitmqctl closed ${closed} consumer connection(s)`;
    },
    async ackLost(label) {
      const proxy = proxies.get(label);
      if (!proxy) return;
      await proxy.cut();
      await proxy.resume().catch(() => {});
    },
    async flush() {
      // Acks dropped on a connection that is still open hold their messages until it
      // closes: close them all.
      for (const proxy of proxies.values()) {
        await proxy.cut();
        await proxy.resume().catch(() => {});
      }
    },
    async retire(label) {
      await proxies.get(label)?.close();
      proxies.delete(label);
    },
    async teardown() {
      for (const proxy of proxies.values()) await proxy.close();
      const ch = await freshChannel();
      const names = [...(await queueDepths(queue).catch(() => new Map())).keys()];
      for (const name of new Set([queue, `${queue}.dlq`, ...names]))
        await ch.deleteQueue(name).catch(() => {});
      await ch.deleteExchange(`${queue}.dlx`).catch(() => {});
      await ch.close().catch(() => {});
      await connection.close().catch(() => {});
    },
  };
}

/**
 * Closes, from the server side, every client connection whose `connection_name` starts
 * with `prefix` (one `rabbitmqctl eval`). Resolves with how many were closed.
 *
 * @param {string} prefix
 */
async function closeConnectionsServerSide(prefix) {
  if (!/^[\w:.-]+$/.test(prefix)) throw new Error(`unsafe connection prefix ${prefix}`);
  const expr =
    `Prefix = <<"${prefix}">>, L = byte_size(Prefix), ` +
    'Pids = [P || Info <- rabbit_networking:connection_info_all([pid, client_properties]), ' +
    '{pid, P} <- [lists:keyfind(pid, 1, Info)], ' +
    '{client_properties, CP} <- [lists:keyfind(client_properties, 1, Info)], is_list(CP), ' +
    // A connection still in its handshake has no client properties yet (`none`):
    // keyfind on it raised badarg and failed the whole drop.
    'is_list(CP), ' +
    '{<<"connection_name">>, longstr, Name} <- [lists:keyfind(<<"connection_name">>, 1, CP)], ' +
    'byte_size(Name) >= L, binary:part(Name, 0, L) =:= Prefix], ' +
    '[rabbit_networking:close_connection(P, "oncely chaos: broker connection drop") || P <- Pids], length(Pids).';
  const { stdout } = await run('rabbitmqctl', ['-q', 'eval', expr]);
  return Number(stdout.trim());
}

/**
 * Messages per queue (ready + unacked) for queues whose name starts with `prefix`.
 *
 * @param {string} prefix
 * @returns {Promise<Map<string, number>>}
 */
async function queueDepths(prefix) {
  const { stdout } = await run('rabbitmqctl', [
    '-q',
    'list_queues',
    '--no-table-headers',
    'name',
    'messages',
  ]);
  const depths = new Map();
  for (const line of stdout.split('\n')) {
    const [name, messages] = line.trim().split(/\s+/);
    if (name?.startsWith(prefix) && messages !== undefined) depths.set(name, Number(messages));
  }
  return depths;
}
