// The client against a real relay (the debug `groupwire` binary, started
// here on free loopback ports with its state in memory).
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import WebSocket, { WebSocketServer } from 'ws';
import { connect, ConnectionError, encodeFrame, ProtocolError, RelayError } from '../dist/index.js';
import { nextEvent, startProxy, startRelay, text } from './relay.mjs';

let relay;
before(async () => {
  relay = await startRelay();
});
after(async () => {
  await relay?.stop();
});

const T = { timeout: 60_000 };
let n = 0;
const fresh = (what) => `${what}-${++n}`;
const open = (name, opts = {}) => connect(relay.ws, { name, WebSocket, ...opts });

/** Takes `count` deliveries of `group` from an iterator. */
async function take(it, group, count) {
  const got = [];
  while (got.length < count) {
    const { value, done } = await it.next();
    assert.ok(!done, 'events ended early');
    if (value.type === 'deliver' && value.group === group) got.push(value);
  }
  return got;
}

test('join hands over the checkpoint, the log after it, and the members', T, async () => {
  const g = fresh('board');
  const a = await open('alice');
  const b = await open('bob');
  try {
    await a.create(g, { state: 'init', type: 'whiteboard', priority: 5 });
    const sa = await a.join(g);
    assert.equal(text(sa.state), 'init');
    assert.equal(sa.groupType, 'whiteboard');
    assert.equal(sa.checkpointSeq, 0n);
    assert.deepEqual(sa.log, []);
    assert.deepEqual(sa.members.map((m) => [m.name, m.role]), [['alice', 'principal']]);
    for (let i = 1; i <= 5; i++) assert.equal(await a.send(g, `m${i}`), BigInt(i));
    await a.checkpoint(g, 3n, 'init+m1..m3');
    assert.equal(await a.send(g, 'm6'), 6n);
    const sb = await b.join(g, { role: 'observer' });
    assert.equal(text(sb.state), 'init+m1..m3');
    assert.equal(sb.checkpointSeq, 3n);
    assert.equal(sb.headSeq, 6n);
    assert.deepEqual(sb.log.map((u) => [u.seq, text(u.payload)]), [[4n, 'm4'], [5n, 'm5'], [6n, 'm6']]);
    assert.deepEqual(sb.members.map((m) => m.name).sort(), ['alice', 'bob']);
    const joined = await nextEvent(a, 'membership', (m) => m.group === g && m.name === 'bob');
    assert.equal(joined.change, 'joined');
    assert.equal(joined.role, 'observer');
    // Live updates follow the log with no gap, to callbacks.
    const live = nextEvent(b, 'deliver', (u) => u.group === g);
    await a.send(g, 'm7', { type: 9 });
    const u = await live;
    assert.deepEqual([u.seq, text(u.payload), u.msgType, u.sender], [7n, 'm7', 9, a.clientId]);
    await b.leave(g);
    const left = await nextEvent(a, 'membership', (m) => m.group === g && m.name === 'bob');
    assert.equal(left.change, 'left');
  } finally {
    a.close();
    b.close();
  }
});

test('two senders and a watcher see one total order', T, async () => {
  const g = fresh('chat');
  const [a, b, w] = await Promise.all([open('a'), open('b'), open('w')]);
  try {
    await a.create(g);
    await Promise.all([a.join(g), b.join(g), w.join(g, { role: 'observer' })]);
    const its = [a, b, w].map((c) => c.events());
    const N = 50;
    const sent = await Promise.all([a, b].map((c, k) => Promise.all(Array.from({ length: N }, (_, i) => c.send(g, `${k}:${i}`)))));
    const views = await Promise.all(its.map((it) => take(it, g, 2 * N)));
    const order = views[0].map((u) => `${u.seq}=${text(u.payload)}`);
    for (const v of views) assert.deepEqual(v.map((u) => `${u.seq}=${text(u.payload)}`), order);
    assert.deepEqual(views[0].map((u) => u.seq), Array.from({ length: 2 * N }, (_, i) => BigInt(i + 1)));
    // Each sender's own updates keep its order, and `send` resolved with their sequence numbers.
    for (const k of [0, 1]) {
      const mine = views[0].filter((u) => text(u.payload).startsWith(`${k}:`));
      assert.deepEqual(mine.map((u) => text(u.payload)), Array.from({ length: N }, (_, i) => `${k}:${i}`));
      assert.deepEqual(mine.map((u) => u.seq), sent[k]);
    }
    for (const it of its) await it.return();
  } finally {
    for (const c of [a, b, w]) c.close();
  }
});

test('locks pass between clients: try, wait in line, release', T, async () => {
  const g = fresh('locks');
  const [a, b] = await Promise.all([open('a'), open('b')]);
  try {
    await a.create(g);
    await Promise.all([a.join(g), b.join(g)]);
    assert.equal(await a.tryLock(g, 'pen'), true);
    assert.equal(await b.tryLock(g, 'pen'), false);
    await assert.rejects(a.lock(g, 'pen'), (e) => e instanceof RelayError && e.code === 'already-held' && !e.fatal);
    let granted = false;
    const waiting = b.lock(g, 'pen').then(() => (granted = true));
    await b.ping(); // the acquire is queued at the relay before this answers
    assert.equal(granted, false);
    await assert.rejects(b.unlock(g, 'pen'), (e) => e instanceof RelayError && e.code === 'not-holder');
    await a.unlock(g, 'pen');
    await waiting;
    assert.equal(await a.tryLock(g, 'pen'), false);
    b.close(); // closing releases its locks
    await nextEvent(a, 'membership', (m) => m.change === 'disconnected');
    assert.equal(await a.tryLock(g, 'pen'), true);
  } finally {
    a.close();
    b.close();
  }
});

test('every relay error is a typed RelayError; local mistakes fail before sending', T, async () => {
  const g = fresh('errs');
  const a = await open('a');
  try {
    await a.create(g);
    const code = (c) => (e) => e instanceof RelayError && e.code === c && e.message.includes(c);
    await assert.rejects(a.create(g), code('group-exists'));
    await assert.rejects(a.join(fresh('nope')), code('no-such-group'));
    await assert.rejects(a.send(g, 'x'), code('not-member'));
    await assert.rejects(a.create(''), code('invalid-argument'));
    await a.join(g, { role: 'observer' });
    await assert.rejects(a.send(g, 'x'), code('forbidden'));
    await assert.rejects(a.checkpoint(g, 5n, 's'), code('forbidden'));
    await a.changeRole(g, 'principal');
    await assert.rejects(a.checkpoint(g, 5n, 's'), code('bad-checkpoint'));
    await assert.rejects(a.send('x'.repeat(256), 'x'), RangeError);
    await assert.rejects(a.send(g, 'x', { type: 70000 }), RangeError);
    await a.deleteGroup(g);
    const gone = await nextEvent(a, 'groupDeleted');
    assert.equal(gone.group, g);
    await assert.rejects(a.send(g, 'x'), code('not-member'));
  } finally {
    a.close();
  }
  await assert.rejects(a.ping(), ConnectionError);
});

test('the relay never sends past the window; consuming opens it and nothing is lost', T, async () => {
  const g = fresh('window');
  const pub = await open('pub');
  const sub = await open('sub', { window: 4096 });
  try {
    assert.equal(sub.grantedWindow, 4096);
    await pub.create(g);
    await pub.join(g);
    await sub.join(g, { role: 'observer', watchMembership: false });
    const N = 200;
    const payload = 'x'.repeat(1000);
    await Promise.all(Array.from({ length: N }, (_, i) => pub.send(g, `${i}:${payload}`)));
    // Nobody consumes yet: the relay stops after the window. Replies still flow.
    for (let i = 0; i < 5; i++) await sub.ping();
    const s = sub.stats();
    assert.ok(s.receivedBytes - s.consumedBytes <= 4096 + 1100, JSON.stringify(s, (_, x) => (typeof x === 'bigint' ? String(x) : x)));
    assert.ok(s.queuedEvents < N, `${s.queuedEvents} queued`);
    const got = await take(sub.events(), g, N);
    assert.deepEqual(got.map((u) => u.seq), Array.from({ length: N }, (_, i) => BigInt(i + 1)));
    assert.deepEqual(got.map((u) => text(u.payload).split(':')[0]), Array.from({ length: N }, (_, i) => String(i)));
  } finally {
    pub.close();
    sub.close();
  }
});

test('after a cut connection the client re-joins: no duplicate, no gap', T, async () => {
  const g = fresh('resume');
  const proxy = await startProxy(relay.ws);
  const pub = await open('pub');
  const sub = await connect(proxy.url, { name: 'sub', WebSocket, reconnect: { minDelayMs: 20, maxDelayMs: 200 } });
  try {
    await pub.create(g, { state: 's0' });
    await pub.join(g);
    await sub.join(g);
    const it = sub.events();
    for (let i = 1; i <= 10; i++) await pub.send(g, `u${i}`);
    const first = await take(it, g, 10);
    // Also take the lock, so its loss is reported.
    assert.equal(await sub.tryLock(g, 'pen'), true);
    proxy.down = true;
    proxy.cut();
    for (let i = 11; i <= 20; i++) await pub.send(g, `u${i}`);
    proxy.down = false;
    const seen = [];
    let rest = [];
    for (;;) {
      const { value } = await it.next();
      seen.push(value.type);
      if (value.type === 'deliver') rest.push(value);
      if (rest.length === 10 && seen.includes('reconnected')) break;
    }
    assert.deepEqual([...first, ...rest].map((u) => text(u.payload)), Array.from({ length: 20 }, (_, i) => `u${i + 1}`));
    assert.ok(seen.includes('disconnected') && seen.includes('lockLost') && seen.includes('rejoined'), seen.join());
    assert.ok(!seen.includes('state'), seen.join());
    // And the session works as before: sends, the lock again.
    assert.equal(await sub.send(g, 'u21'), 21n);
    assert.equal(text((await take(it, g, 1))[0].payload), 'u21');
    assert.equal(await sub.tryLock(g, 'pen'), true);
    await it.return();
  } finally {
    pub.close();
    sub.close();
    await proxy.close();
  }
});

test('a relay killed with -9 and restarted on its data: the client resumes where it was', T, async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'groupwire-js-'));
  const state = ['--data-dir', dir];
  let r = await startRelay([], { state });
  const port = new URL(r.ws).port;
  const opts = { WebSocket, reconnect: { minDelayMs: 50, maxDelayMs: 500 } };
  const a = await connect(r.ws, { name: 'a', ...opts });
  const b = await connect(r.ws, { name: 'b', ...opts });
  try {
    const g = fresh('restart');
    await a.create(g, { state: 'zero' });
    await a.join(g);
    await b.join(g, { role: 'observer' });
    const it = b.events();
    for (let i = 1; i <= 5; i++) await a.send(g, `u${i}`);
    await take(it, g, 5);
    const back = Promise.all([nextEvent(a, 'reconnected'), nextEvent(b, 'reconnected')]);
    const down = nextEvent(a, 'disconnected');
    await r.stop();
    await down;
    // Requests made while the relay is down wait for the reconnection.
    const sent = a.send(g, 'u6');
    r = await startRelay([], { state, ws: `127.0.0.1:${port}` });
    await back;
    assert.equal(await sent, 6n);
    await a.send(g, 'u7');
    const rest = [];
    for (;;) {
      const { value } = await it.next();
      assert.notEqual(value.type, 'state', 'the log still continues what b has');
      if (value.type === 'deliver') rest.push(text(value.payload));
      if (rest.length === 2) break;
    }
    assert.deepEqual(rest, ['u6', 'u7']);
    await it.return();
  } finally {
    a.close();
    b.close();
    await r.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('bad bytes from the server close the client with a ProtocolError, never an exception', T, async () => {
  const server = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  await new Promise((r) => server.once('listening', r));
  const url = `ws://127.0.0.1:${server.address().port}/`;
  const welcome = encodeFrame(1, { kind: 'Welcome', version: 1, client: 5n, maxFrame: 1 << 20, window: 65536 });
  const attacks = [
    (s) => s.send(Buffer.from([0, 0, 0, 9, 1, 0x44, 0, 0, 0, 0, 0, 0, 0])), // a truncated Deliver
    (s) => s.send('text'),
    (s) => s.send(Buffer.from([0xff, 0xff, 0xff, 0xff])), // a 4 GiB prefix
    (s) => s.send(encodeFrame(77, { kind: 'Ok' })), // a reply to nothing
    (s) => s.send(encodeFrame(0, { kind: 'Deliver', group: 'g', seq: 1n, sender: 1n, msgType: 0, sentAtMicros: 0n, payload: new Uint8Array() })), // not a member: ignored
  ];
  let attack = 0;
  server.on('connection', (s) => {
    const a = attacks[attack++];
    s.once('message', () => {
      s.send(welcome);
      a(s);
      if (attack === attacks.length) s.send(Buffer.from([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]));
    });
  });
  try {
    for (let i = 0; i < attacks.length; i++) {
      const c = await connect(url, { WebSocket, reconnect: false });
      const closed = await nextEvent(c, 'closed');
      assert.ok(closed.error instanceof ProtocolError, `attack ${i}: ${closed.error}`);
      await assert.rejects(c.ping(), ConnectionError);
    }
  } finally {
    await new Promise((r) => server.close(r));
  }
});

test('wss: the same session over TLS, with a token', T, async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'groupwire-js-tls-'));
  const f = (n) => path.join(dir, n);
  // A self-signed certificate for 127.0.0.1, trusted by this client only.
  execFileSync('openssl', [
    'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '1',
    '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1',
    '-keyout', f('key.pem'), '-out', f('cert.pem'),
  ], { stdio: 'ignore' });
  const ca = readFileSync(f('cert.pem'));
  class TrustingWebSocket extends WebSocket {
    constructor(url) {
      super(url, { ca });
    }
  }
  const r = await startRelay(['--tls-cert', f('cert.pem'), '--tls-key', f('key.pem')]);
  try {
    assert.ok(r.ws.startsWith('wss://'), r.ws);
    const c = await connect(r.ws, { name: 'tls', token: 'ignored-without-auth', WebSocket: TrustingWebSocket });
    const g = fresh('tls');
    await c.create(g);
    await c.join(g);
    assert.equal(await c.send(g, 'over tls'), 1n);
    c.close();
    // Without the certificate: the handshake fails, a ConnectionError.
    await assert.rejects(connect(r.ws, { WebSocket }), ConnectionError);
  } finally {
    await r.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a token is not sent in clear to a non-loopback host', async () => {
  await assert.rejects(connect('ws://example.com:7601/', { token: 't', WebSocket }), /in clear/);
});

test('a relay that refuses the session rejects connect with its error', T, async () => {
  const auth = await startRelay(['--auth-secret-file', new URL('./secret.txt', import.meta.url).pathname]);
  try {
    await assert.rejects(
      connect(auth.ws, { token: 'not-a-jwt', WebSocket }),
      (e) => e instanceof RelayError && e.code === 'unauthorized' && e.fatal,
    );
  } finally {
    await auth.stop();
  }
  await assert.rejects(connect('ws://127.0.0.1:1/', { WebSocket }), ConnectionError);
});
