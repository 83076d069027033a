import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import type { GrpcObject, ServiceClientConstructor } from '@grpc/grpc-js';
import { loadPackageDefinition } from '@grpc/grpc-js';
import { loadSync } from '@grpc/proto-loader';

/** The two gRPC services the emulator serves, loaded from the protos the client ships. */
export interface PubSubServices {
  publisher: ServiceClientConstructor['service'];
  subscriber: ServiceClientConstructor['service'];
}

/**
 * Loads `google/pubsub/v1/pubsub.proto` from `@google-cloud/pubsub` (the exact protos the
 * client speaks) with the `google/api`, `google/rpc` and `google/protobuf` imports from
 * the `google-gax` copy that client depends on, so the emulator and the client never
 * disagree on a field number.
 *
 * Field names are camelCase (`keepCase: false`), 64-bit integers strings, enums names,
 * `bytes` Buffers; absent fields stay `undefined` (`defaults: false`) so "not set" and
 * "set to zero" can be told apart where the API gives them different meanings.
 */
export function loadPubSubServices(): PubSubServices {
  const require = createRequire(import.meta.url);
  const clientMain = require.resolve('@google-cloud/pubsub');
  // .../@google-cloud/pubsub/build/src/index.js → .../@google-cloud/pubsub/build/protos
  const clientProtos = join(dirname(clientMain), '..', 'protos');
  const gaxMain = createRequire(clientMain).resolve('google-gax');
  // .../google-gax/build/src/index.js → .../google-gax/build/protos
  const gaxProtos = join(dirname(gaxMain), '..', 'protos');
  const definition = loadSync('google/pubsub/v1/pubsub.proto', {
    keepCase: false,
    longs: String,
    enums: String,
    defaults: false,
    oneofs: true,
    includeDirs: [clientProtos, gaxProtos],
  });
  const root = loadPackageDefinition(definition);
  const v1 = ((root.google as GrpcObject).pubsub as GrpcObject).v1 as GrpcObject;
  return {
    publisher: (v1.Publisher as ServiceClientConstructor).service,
    subscriber: (v1.Subscriber as ServiceClientConstructor).service,
  };
}
