// Reconnecting to the next of several relay URLs and resuming each group
// after the last update handed over (Join.resumeAfter, docs/relay-protocol.md
// "Resuming"): against a real relay killed with -9 and restarted on its
// data, a real relay whose log was compacted past the client, and scripted
// relays for what a real one does only in a cluster (a node behind that
// re-sends updates the client has) or an old relay (no resume flag).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import WebSocket, { WebSocketServer } from 'ws';
import { connect, ConnectionError, decodeFrame, encodeFrame, FrameError } from '../dist/index.js';
import { nextEvent, startProxy, startRelay, text } from './relay.mjs';

// Generous: the machine may be loaded. Only behaviour is asserted, never speed.
const T = { timeout: 180_000 };
/** Nothing listens there: a connection to it is refused at once. */
const DEAD = 'ws://127.0.0.1:1/';
const bytes = (s) => new TextEncoder().encode(s);

/** A WebSocket constructor that records every `Join` the client sends. */
function spying() {
  const joins = [];
  class Spy extends WebSocket {
    send(data) {
      const env = decodeFrame(data, 1 << 24);
      if (!(env instanceof FrameError) && env.frame.kind === 'Join') joins.push(env.frame);
      super.send(data);
    }
  }
  return { Spy, joins };
}

/** Waits for `pred()` to hold, checking every 20 ms, failing after `ms` with `what`. */
async function until(pred, what, ms = 90_000) {
  const end = Date.now() + ms;
  while (!pred()) {
    if (Date.now() > end) throw new Error(`gave up waiting: ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

test('a relay killed with -9 and restarted on its data while a sender sends: the watcher resumes and gets every acknowledged update once, in order', T, async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'groupwire-js-resume-'));
  const state = ['--data-dir', dir];
  let r = await startRelay([], { state });
  const port = new URL(r.ws).port;
  const reconnect = { minDelayMs: 20, maxDelayMs: 300 };
  const pub = await connect(r.ws, { name: 'pub', WebSocket, reconnect });
  const { Spy, joins } = spying();
  // Two URLs: the relay, then one that refuses, so attempts alternate
  // between them while the relay is down and come back to it.
  const first = r.ws;
  const sub = await connect([first, DEAD], { name: 'sub', WebSocket: Spy, reconnect });
  const g = 'resume-restart';
  const got = [];
  const seen = [];
  let stateEvents = 0;
  sub.on('*', (e) => {
    seen.push(e.type);
    if (e.type === 'deliver') got.push(e);
    if (e.type === 'state') stateEvents++;
  });
  const acked = new Map(); // seq -> payload, for every send the relay acknowledged
  let sending = true;
  let sender;
  try {
    await pub.create(g, { state: 'zero' });
    await pub.join(g);
    await sub.join(g, { role: 'observer' });
    sender = (async () => {
      for (let i = 1; sending; i++) {
        try {
          acked.set(await pub.send(g, `u${i}`), `u${i}`);
        } catch (e) {
          // In flight when the relay died: stored or not, it is not acknowledged.
          if (!(e instanceof ConnectionError)) throw e;
        }
      }
    })();
    await until(() => got.length >= 20, 'the watcher got 20 updates before the kill');
    // What the watcher had handed over when it noticed the loss: where it resumes.
    const down = nextEvent(sub, 'disconnected').then(() => got.at(-1).seq);
    const back = nextEvent(sub, 'reconnected');
    await r.stop();
    const lastBefore = await down;
    r = await startRelay([], { state, ws: `127.0.0.1:${port}` });
    await back;
    const ackedBefore = acked.size;
    await until(() => acked.size >= ackedBefore + 20, 'the sender got 20 acknowledgements after the restart');
    sending = false;
    await sender;
    const last = [...acked.keys()].reduce((a, b) => (a > b ? a : b));
    await until(() => got.length > 0 && got.at(-1).seq >= last, `the watcher got up to ${last}`);

    // Once each, in order, from 1, with no gap: every acknowledged one among them.
    assert.deepEqual(
      got.map((u) => u.seq),
      Array.from({ length: got.length }, (_, i) => BigInt(i + 1)),
    );
    for (const [seq, payload] of acked) assert.equal(text(got[Number(seq) - 1].payload), payload, `update ${seq}`);
    assert.equal(stateEvents, 0, 'the log continued what the watcher had: no new state');
    assert.ok(seen.includes('disconnected') && seen.includes('rejoined'), seen.join());
    // The rejoin asked to resume after what it had handed over when the relay died.
    const resumed = joins.filter((j) => j.resumeAfter !== undefined);
    assert.equal(resumed.length, 1, JSON.stringify(joins.map((j) => String(j.resumeAfter))));
    assert.equal(resumed[0].resumeAfter, lastBefore);
    assert.equal(joins[0].resumeAfter, undefined, 'the first join is a plain one');
    assert.equal(sub.url, first);
  } finally {
    sending = false;
    await sender?.catch(() => {});
    pub.close();
    sub.close();
    await r.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a log compacted past what the client has: the resumed join hands over the new state (reason rejoin)', T, async () => {
  const r = await startRelay();
  const proxy = await startProxy(r.ws);
  const pub = await connect(r.ws, { name: 'pub', WebSocket });
  const { Spy, joins } = spying();
  const sub = await connect(proxy.url, { name: 'sub', WebSocket: Spy, reconnect: { minDelayMs: 20, maxDelayMs: 200 } });
  try {
    const g = 'resume-compacted';
    await pub.create(g, { state: '' });
    await pub.join(g);
    await sub.join(g, { role: 'observer' });
    const it = sub.events();
    await pub.send(g, 'a');
    for (;;) if ((await it.next()).value.type === 'deliver') break;
    proxy.down = true;
    proxy.cut();
    await pub.send(g, 'b');
    await pub.send(g, 'c');
    await pub.checkpoint(g, 3n, 'abc');
    await pub.send(g, 'd');
    proxy.down = false;
    const events = [];
    for (;;) {
      const { value } = await it.next();
      events.push(value);
      if (value.type === 'reconnected') break;
    }
    const state = events.find((e) => e.type === 'state');
    assert.ok(state, events.map((e) => e.type).join());
    assert.equal(state.reason, 'rejoin');
    assert.deepEqual([state.checkpointSeq, text(state.state)], [3n, 'abc']);
    assert.deepEqual(state.log.map((u) => text(u.payload)), ['d']);
    assert.deepEqual(events.filter((e) => e.type === 'deliver' || e.type === 'rejoined'), []);
    assert.deepEqual(joins.map((j) => j.resumeAfter), [undefined, 1n]);
    await pub.send(g, 'e');
    for (;;) {
      const { value } = await it.next();
      if (value.type === 'deliver') {
        assert.deepEqual([value.seq, text(value.payload)], [5n, 'e']);
        break;
      }
    }
    await it.return();
  } finally {
    pub.close();
    sub.close();
    await proxy.close();
    await r.stop();
  }
});

// ---- scripted relays ---------------------------------------------------

const deliver = (seq) =>
  encodeFrame(0, { kind: 'Deliver', group: 'g', seq: BigInt(seq), sender: 9n, msgType: 0, sentAtMicros: 0n, payload: bytes(`u${seq}`) });
const joined = (request, checkpointSeq, headSeq, state) =>
  encodeFrame(request, {
    kind: 'Joined', group: 'g', groupType: 't', checkpointSeq: BigInt(checkpointSeq), headSeq: BigInt(headSeq), state: bytes(state),
    members: [{ client: 5n, name: 'me', role: 'principal', mode: 'active' }],
  });
/** Sent last, so the test knows everything before it has arrived. */
const marker = encodeFrame(0, { kind: 'Membership', group: 'g', client: 6n, name: 'x', change: 'joined', role: 'observer', mode: 'active' });

/**
 * A relay that welcomes (with the resume flag if `resume`), records every
 * `Join`, and answers it with `onJoin(socket, requestId, join)`.
 */
async function scripted({ resume }, onJoin) {
  const server = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  await new Promise((r) => server.once('listening', r));
  const joins = [];
  server.on('connection', (s) => {
    s.on('message', (m) => {
      const env = decodeFrame(new Uint8Array(m), 1 << 20);
      assert.ok(!(env instanceof FrameError), String(env));
      const f = env.frame;
      if (f.kind === 'Hello') {
        const welcome = { kind: 'Welcome', version: 1, client: 5n, maxFrame: 1 << 20, window: 65536 };
        s.send(encodeFrame(env.request, resume ? { ...welcome, resume: true } : welcome));
      } else if (f.kind === 'Join') {
        joins.push(f);
        onJoin(s, env.request, f);
      } else if (f.kind === 'Ping') s.send(encodeFrame(env.request, { kind: 'Pong', nonce: f.nonce }));
    });
  });
  return { url: `ws://127.0.0.1:${server.address().port}/`, joins, close: () => new Promise((r) => server.close(r)) };
}

/** Every event up to the marker, deliveries as `d<seq>`, states with their checkpoint and log. */
async function eventsToMarker(c) {
  const got = [];
  for await (const e of c.events()) {
    if (e.type === 'deliver') got.push(`d${e.seq}`);
    else if (e.type === 'state') got.push(`state ${e.reason} ${e.checkpointSeq} ${text(e.state)} [${e.log.map((u) => u.seq)}]`);
    else if (e.type === 'membership') break;
    else got.push(e.type);
  }
  return got;
}

test('fails over to the next URL and resumes; updates a node behind re-sends are dropped', T, async () => {
  // Node a hands over 1..3 and drops the connection; node b, behind the
  // cluster (its head is 2), answers the resumed join and re-sends 3.
  const a = await scripted({ resume: true }, (s, id) => {
    for (const f of [joined(id, 0, 0, 's0'), deliver(1), deliver(2), deliver(3)]) s.send(f);
    s.close();
  });
  const b = await scripted({ resume: true }, (s, id) => {
    for (const f of [joined(id, 2, 2, ''), deliver(3), deliver(4), deliver(3), deliver(5), marker]) s.send(f);
  });
  const c = await connect([a.url, b.url], { WebSocket, reconnect: { minDelayMs: 20, maxDelayMs: 200 } });
  try {
    const st = await c.join('g');
    assert.equal(text(st.state), 's0');
    const got = await eventsToMarker(c);
    assert.deepEqual(got, ['d1', 'd2', 'd3', 'disconnected', 'rejoined', 'reconnected', 'd4', 'd5']);
    assert.deepEqual(a.joins.map((j) => j.resumeAfter), [undefined]);
    assert.deepEqual(b.joins.map((j) => j.resumeAfter), [3n]);
    assert.equal(c.url, b.url);
  } finally {
    c.close();
    await a.close();
    await b.close();
  }
});

test('a relay without the resume flag gets a plain join, and the replayed log is hidden as before', T, async () => {
  let n = 0;
  const srv = await scripted({ resume: false }, (s, id) => {
    if (++n === 1) {
      for (const f of [joined(id, 0, 0, 's0'), deliver(1), deliver(2)]) s.send(f);
      s.close();
    } else {
      for (const f of [joined(id, 0, 3, 's0'), deliver(1), deliver(2), deliver(3), deliver(4), marker]) s.send(f);
    }
  });
  const c = await connect(srv.url, { WebSocket, reconnect: { minDelayMs: 20, maxDelayMs: 200 } });
  try {
    await c.join('g');
    const got = await eventsToMarker(c);
    assert.deepEqual(got, ['d1', 'd2', 'disconnected', 'd3', 'rejoined', 'reconnected', 'd4']);
    assert.deepEqual(srv.joins.map((j) => j.resumeAfter), [undefined, undefined]);
  } finally {
    c.close();
    await srv.close();
  }
});

test('a resumed join answered with a newer checkpoint hands over that state', T, async () => {
  let n = 0;
  const srv = await scripted({ resume: true }, (s, id) => {
    if (++n === 1) {
      for (const f of [joined(id, 0, 0, 's0'), deliver(1), deliver(2)]) s.send(f);
      s.close();
    } else {
      for (const f of [joined(id, 4, 5, 's4'), deliver(5), deliver(6), marker]) s.send(f);
    }
  });
  const c = await connect(srv.url, { WebSocket, reconnect: { minDelayMs: 20, maxDelayMs: 200 } });
  try {
    await c.join('g');
    const got = await eventsToMarker(c);
    assert.deepEqual(got, ['d1', 'd2', 'disconnected', 'state rejoin 4 s4 [5]', 'reconnected', 'd6']);
    assert.deepEqual(srv.joins.map((j) => j.resumeAfter), [undefined, 2n]);
  } finally {
    c.close();
    await srv.close();
  }
});

test('the first connection tries each URL once, in order', T, async () => {
  const srv = await scripted({ resume: true }, () => {});
  try {
    const c = await connect([DEAD, srv.url], { WebSocket, reconnect: false });
    assert.equal(c.url, srv.url);
    c.close();
    await assert.rejects(connect([DEAD, DEAD], { WebSocket }), ConnectionError);
    await assert.rejects(connect([], { WebSocket }), TypeError);
  } finally {
    await srv.close();
  }
});
