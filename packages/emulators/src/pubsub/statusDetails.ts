// Hand-written protobuf encoding of `google.rpc.Status` carrying one `google.rpc.ErrorInfo`,
// the `grpc-status-details-bin` trailer google-gax decodes into `error.errorInfoMetadata`
// (which `ack-metadata.js` in the client reads per ack ID). Three tiny messages do not
// justify a protobuf runtime dependency of our own.

function varint(value: number): Buffer {
  const bytes: number[] = [];
  let v = value >>> 0;
  while (v >= 0x80) {
    bytes.push((v & 0x7f) | 0x80);
    v >>>= 7;
  }
  bytes.push(v);
  return Buffer.from(bytes);
}

/** A length-delimited field (wire type 2): strings, bytes and embedded messages. */
function lengthDelimited(field: number, payload: Buffer): Buffer {
  return Buffer.concat([varint((field << 3) | 2), varint(payload.length), payload]);
}

function stringField(field: number, value: string): Buffer {
  return lengthDelimited(field, Buffer.from(value, 'utf8'));
}

/** `google.rpc.ErrorInfo { reason = 1; domain = 2; map<string,string> metadata = 3; }`. */
function encodeErrorInfo(reason: string, domain: string, metadata: Record<string, string>): Buffer {
  const parts = [stringField(1, reason), stringField(2, domain)];
  for (const [key, value] of Object.entries(metadata)) {
    // A map entry is an embedded message { key = 1; value = 2; }.
    parts.push(lengthDelimited(3, Buffer.concat([stringField(1, key), stringField(2, value)])));
  }
  return Buffer.concat(parts);
}

/**
 * Encodes `google.rpc.Status { code = 1; message = 2; repeated Any details = 3; }` with a
 * single `ErrorInfo` detail.
 */
export function encodeStatusWithErrorInfo(
  code: number,
  message: string,
  errorInfo: { reason: string; domain: string; metadata: Record<string, string> },
): Buffer {
  const any = Buffer.concat([
    stringField(1, 'type.googleapis.com/google.rpc.ErrorInfo'),
    lengthDelimited(2, encodeErrorInfo(errorInfo.reason, errorInfo.domain, errorInfo.metadata)),
  ]);
  return Buffer.concat([varint(1 << 3), varint(code), stringField(2, message), lengthDelimited(3, any)]);
}
