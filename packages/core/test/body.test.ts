import { describe, expect, it } from 'vitest';
import { decodeBody } from '../src/index.js';

describe('decodeBody', () => {
  // Brokers hand over views into a larger buffer (kafkajs slices its fetch response):
  // only the view's own bytes are the body.
  const whole = Buffer.from('xx{"orderId":"o-1","note":"é"}yy', 'utf8');
  const view = whole.subarray(2, whole.length - 2);
  const plainView = new Uint8Array(whole.buffer, whole.byteOffset + 2, whole.length - 4);

  it('reads json and text from the view only, for a Buffer and a plain Uint8Array', () => {
    expect(decodeBody('json', view)).toEqual({ orderId: 'o-1', note: 'é' });
    expect(decodeBody('json', plainView)).toEqual({ orderId: 'o-1', note: 'é' });
    expect(decodeBody('text', view)).toBe('{"orderId":"o-1","note":"é"}');
    expect(decodeBody('text', plainView)).toBe('{"orderId":"o-1","note":"é"}');
  });

  it('gives buffer bodies a copy of their own, not a view of the broker buffer', () => {
    const source = Buffer.from(whole);
    const body = decodeBody('buffer', source.subarray(2, source.length - 2)) as Buffer;
    source.fill(0);
    expect(body.toString('utf8')).toBe('{"orderId":"o-1","note":"é"}');
  });

  it('throws on a body that is not JSON (the pipeline dead-letters it as invalid-body)', () => {
    expect(() => decodeBody('json', Buffer.from('{not json'))).toThrow(SyntaxError);
  });
});
