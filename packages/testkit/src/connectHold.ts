import type { ConnectHold } from './harness.js';
import { TcpProxy, type TcpProxyTarget } from './TcpProxy.js';

/**
 * A {@link ConnectHold} on a proxy of its own to `target`, holding from the start; the
 * broker config reaches it through `brokerOverrides(port)`. For harnesses whose consumers
 * can be pointed at any address (an AMQP URL, an HTTP or gRPC endpoint).
 *
 * @example
 * ```ts
 * holdConnections: () => heldProxy({ host: '127.0.0.1', port: 5672 }, (port) => ({ url: `amqp://guest:guest@127.0.0.1:${port}` })),
 * ```
 */
export async function heldProxy(
  target: TcpProxyTarget,
  brokerOverrides: (port: number) => Record<string, unknown>,
  options: { connectionsOutliveClose?: string } = {},
): Promise<ConnectHold> {
  const proxy = new TcpProxy(target);
  const port = await proxy.start();
  proxy.hold();
  return {
    brokerOverrides: brokerOverrides(port),
    get connections() {
      return proxy.connectionCount;
    },
    release: () => proxy.release(),
    close: () => proxy.close(),
    ...options,
  };
}

/**
 * A {@link ConnectHold} on a proxy the harness keeps (a broker that advertises the proxy's
 * port, as the Kafka test broker does): it holds from now on, and `close()` only releases.
 *
 * @example
 * ```ts
 * holdConnections: async () => holdOn(proxy),
 * ```
 */
export function holdOn(proxy: TcpProxy, brokerOverrides: Record<string, unknown> = {}): ConnectHold {
  proxy.hold();
  return {
    brokerOverrides,
    get connections() {
      return proxy.connectionCount;
    },
    release: () => proxy.release(),
    close: async () => proxy.release(),
  };
}
