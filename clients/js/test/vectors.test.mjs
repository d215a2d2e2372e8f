// The relay's own encodings (test/vectors.json, written by
// crates/groupwire-relay/tests/js_vectors.rs): every frame decodes to the
// listed fields and encodes back to the same bytes; malformed bytes give
// a FrameError, never an exception.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { decodeFrame, encodeFrame, errorCodeName, ErrorCode, FrameError, RelayError } from '../dist/index.js';

const vectors = JSON.parse(readFileSync(new URL('./vectors.json', import.meta.url), 'utf8'));
const U64 = new Set(['sentAtMicros', 'seq', 'consumed', 'nonce', 'client', 'checkpointSeq', 'headSeq', 'sender', 'dropped', 'resumeAfter']);
const BYTES = new Set(['initialState', 'payload', 'state']);

const fromHex = (h) => Uint8Array.from(h.match(/../g) ?? [], (x) => parseInt(x, 16));
const toHex = (b) => Buffer.from(b).toString('hex');

/** The JSON fields as the client's Frame objects hold them. */
function typed(v, key) {
  if (Array.isArray(v)) return v.map((x) => typed(x));
  if (v !== null && typeof v === 'object') {
    return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, typed(x, k)]));
  }
  if (U64.has(key)) return BigInt(v);
  if (BYTES.has(key)) return fromHex(v);
  return v;
}

test('every vector covers a distinct kind, all 25 of them', () => {
  assert.equal(new Set(vectors.frames.map((v) => v.frame.kind)).size, 25);
});

for (const [i, v] of vectors.frames.entries()) {
  test(`vector ${i} (${v.frame.kind}) decodes to its fields and encodes to its bytes`, () => {
    const frame = typed(v.frame);
    const got = decodeFrame(fromHex(v.hex), vectors.maxFrame);
    assert.ok(!(got instanceof FrameError), String(got));
    assert.deepEqual(got, { request: v.request, frame });
    assert.equal(toHex(encodeFrame(v.request, frame)), v.hex);
  });
}

for (const v of vectors.malformed) {
  test(`rejects ${v.why}`, () => {
    const got = decodeFrame(fromHex(v.hex), vectors.maxFrame);
    assert.ok(got instanceof FrameError, `decoded: ${JSON.stringify(got, (_, x) => (typeof x === 'bigint' ? String(x) : x))}`);
  });
}

test('a frame above the cap is refused from its prefix alone', () => {
  const big = encodeFrame(1, { kind: 'Send', group: 'g', msgType: 0, sentAtMicros: 0n, payload: new Uint8Array(100) });
  assert.ok(decodeFrame(big, 64) instanceof FrameError);
  assert.ok(decodeFrame(big.subarray(0, 4), 64) instanceof FrameError);
});

test('random bytes and truncations never throw', () => {
  let seed = 7;
  const rand = () => ((seed = (seed * 1103515245 + 12345) >>> 0) >>> 16) & 0xff;
  for (const v of vectors.frames) {
    const b = fromHex(v.hex);
    for (let cut = 0; cut < b.length; cut++) assert.ok(decodeFrame(b.subarray(0, cut), 1 << 20) instanceof FrameError);
    for (let n = 0; n < 50; n++) {
      const m = b.slice();
      m[4 + (rand() % (m.length - 4))] ^= 1 + (rand() % 255);
      const got = decodeFrame(m, 1 << 20); // either outcome, never a throw
      if (!(got instanceof FrameError)) assert.equal(toHex(encodeFrame(got.request, got.frame)).length, m.length * 2);
    }
  }
});

test('encoding refuses values that do not fit, before anything is sent', () => {
  assert.throws(() => encodeFrame(1, { kind: 'Leave', group: 'x'.repeat(256) }), RangeError);
  assert.throws(() => encodeFrame(1, { kind: 'SetPriority', group: 'g', priority: 256 }), RangeError);
  assert.throws(() => encodeFrame(1, { kind: 'Ping', nonce: -1n }), RangeError);
  assert.throws(() => encodeFrame(1, { kind: 'Join', group: 'g', role: 'boss', mode: 'active', watchMembership: true }), RangeError);
});

test("every relay error code has the relay's name, and unknown ones say so", () => {
  assert.equal(vectors.errorCodes.length, 20);
  for (const { code, name } of vectors.errorCodes) {
    assert.equal(errorCodeName(code), name);
    assert.equal(ErrorCode[name], code);
    assert.equal(new RelayError(code, 'x').code, name);
  }
  assert.equal(errorCodeName(999), 'unknown');
  // The fatal ones, from the protocol's table.
  const fatal = vectors.errorCodes.filter(({ code }) => new RelayError(code, '').fatal).map(({ name }) => name);
  assert.deepEqual(fatal, ['malformed', 'unsupported-version', 'frame-too-large', 'unauthorized', 'slow-consumer', 'protocol-violation', 'shutting-down', 'timeout']);
});
