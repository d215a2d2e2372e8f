// The client's sequence logic against a scripted relay (a `ws` server that
// answers with hand-written frames), for what a real relay does only
// under load: a Resync with a fresh state, a duplicate, a gap.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import WebSocket, { WebSocketServer } from 'ws';
import { connect, decodeFrame, encodeFrame, ProtocolError } from '../dist/index.js';
import { text } from './relay.mjs';

const bytes = (s) => new TextEncoder().encode(s);
const deliver = (seq, pad = 0) =>
  encodeFrame(0, { kind: 'Deliver', group: 'g', seq: BigInt(seq), sender: 9n, msgType: 0, sentAtMicros: 0n, payload: bytes(`u${seq}`.padEnd(pad)) });
const joined = (request, checkpointSeq, headSeq, state) =>
  encodeFrame(request, {
    kind: 'Joined', group: 'g', groupType: 't', checkpointSeq: BigInt(checkpointSeq), headSeq: BigInt(headSeq), state: bytes(state),
    members: [{ client: 5n, name: 'me', role: 'principal', mode: 'active' }],
  });

/** A server that welcomes, answers Join with `onJoin(socket, requestId)`, and ignores Credit. */
async function scripted(onJoin) {
  const server = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  await new Promise((r) => server.once('listening', r));
  const credits = [];
  server.on('connection', (s) => {
    s.on('message', (m) => {
      const env = decodeFrame(new Uint8Array(m), 1 << 20);
      assert.ok(!(env instanceof Error), String(env));
      const f = env.frame;
      if (f.kind === 'Hello') s.send(encodeFrame(env.request, { kind: 'Welcome', version: 1, client: 5n, maxFrame: 1 << 20, window: 65536 }));
      else if (f.kind === 'Join') onJoin(s, env.request);
      else if (f.kind === 'Credit') credits.push(f.consumed);
      else if (f.kind === 'Ping') s.send(encodeFrame(env.request, { kind: 'Pong', nonce: f.nonce }));
    });
  });
  return { url: `ws://127.0.0.1:${server.address().port}/`, credits, close: () => new Promise((r) => server.close(r)) };
}

test('a Resync hands over the fresh state; duplicates are dropped', { timeout: 30_000 }, async () => {
  const srv = await scripted((s, id) => {
    s.send(joined(id, 0, 2, 's0'));
    for (const f of [deliver(1), deliver(2), deliver(2), deliver(3)]) s.send(f);
    s.send(encodeFrame(0, { kind: 'Resync', group: 'g', dropped: 4n }));
    s.send(deliver(4)); // from before the Resync: the fresh state covers it
    s.send(joined(0, 5, 6, 's5'));
    for (const f of [deliver(5), deliver(6), deliver(7), deliver(7)]) s.send(f);
    s.send(encodeFrame(0, { kind: 'Membership', group: 'g', client: 6n, name: 'x', change: 'joined', role: 'observer', mode: 'active' }));
  });
  const c = await connect(srv.url, { WebSocket, reconnect: false });
  try {
    const st = await c.join('g');
    assert.deepEqual([st.checkpointSeq, st.headSeq, text(st.state)], [0n, 2n, 's0']);
    assert.deepEqual(st.log.map((u) => u.seq), [1n, 2n]);
    const it = c.events();
    const got = [];
    for (;;) {
      const { value } = await it.next();
      got.push(value.type === 'deliver' ? `d${value.seq}` : value.type === 'state' ? `state ${value.reason} ${text(value.state)} [${value.log.map((u) => u.seq)}]` : value.type);
      if (value.type === 'membership') break;
    }
    assert.deepEqual(got, ['d3', 'state resync s5 [6]', 'd7', 'membership']);
  } finally {
    c.close();
    await srv.close();
  }
});

test('a gap in the order closes the connection with a ProtocolError', { timeout: 30_000 }, async () => {
  const srv = await scripted((s, id) => {
    s.send(joined(id, 0, 0, ''));
    s.send(deliver(1));
    s.send(deliver(3));
  });
  const c = await connect(srv.url, { WebSocket, reconnect: false });
  try {
    await c.join('g');
    const seen = [];
    for await (const e of c.events()) {
      seen.push(e.type);
      if (e.type === 'closed') {
        assert.ok(e.error instanceof ProtocolError && /gap/.test(e.error.message), String(e.error));
        break;
      }
    }
    assert.deepEqual(seen, ['deliver', 'closed']);
  } finally {
    c.close();
    await srv.close();
  }
});

test('credit is returned as events are consumed, never for more than arrived', { timeout: 30_000 }, async () => {
  const N = 100;
  const srv = await scripted((s, id) => {
    s.send(joined(id, 0, 0, ''));
    for (let i = 1; i <= N; i++) s.send(deliver(i, 1000));
  });
  const c = await connect(srv.url, { WebSocket, reconnect: false });
  try {
    await c.join('g');
    await c.ping(); // answered after every delivery arrived
    const held = c.stats();
    assert.ok(held.receivedBytes > 100_000n);
    assert.deepEqual(srv.credits, [], 'nothing consumed, nothing credited');
    const it = c.events();
    for (let i = 0; i < N; i++) assert.equal((await it.next()).value.seq, BigInt(i + 1));
    await c.ping(); // the credits went out before it
    const after = c.stats();
    assert.equal(after.consumedBytes, after.receivedBytes, 'everything handed over counts (replies at once)');
    assert.ok(srv.credits.length >= 4, `${srv.credits.length} credits (a quarter window each)`);
    assert.ok(srv.credits.every((x, i) => i === 0 || x > srv.credits[i - 1]));
    assert.ok(srv.credits.at(-1) <= after.receivedBytes);
  } finally {
    c.close();
    await srv.close();
  }
});

test('return() ends an iterator that is waiting for an event', { timeout: 30_000 }, async () => {
  const srv = await scripted((s, id) => s.send(joined(id, 0, 0, '')));
  const c = await connect(srv.url, { WebSocket, reconnect: false });
  try {
    const it = c.events();
    const waiting = it.next();
    await it.return();
    assert.deepEqual(await waiting, { value: undefined, done: true });
  } finally {
    c.close();
    await srv.close();
  }
});

test("a Resync during a join's transfer starts it over, and the join still resolves", { timeout: 30_000 }, async () => {
  const srv = await scripted((s, id) => {
    s.send(joined(id, 0, 3, 's0'));
    s.send(deliver(1));
    // Compacted under the transfer: it starts over from the new checkpoint.
    s.send(encodeFrame(0, { kind: 'Resync', group: 'g', dropped: 0n }));
    s.send(joined(0, 2, 4, 's2'));
    for (const f of [deliver(3), deliver(4), deliver(5)]) s.send(f);
  });
  const c = await connect(srv.url, { WebSocket, reconnect: false });
  try {
    const st = await c.join('g');
    assert.deepEqual([st.checkpointSeq, st.headSeq, text(st.state)], [2n, 4n, 's2']);
    assert.deepEqual(st.log.map((u) => u.seq), [3n, 4n]);
    const { value } = await c.events().next();
    assert.deepEqual([value.type, value.seq], ['deliver', 5n]);
  } finally {
    c.close();
    await srv.close();
  }
});
