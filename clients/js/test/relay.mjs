// Test helpers: a real relay process (the debug `groupwire` binary) on
// free loopback ports, and a WebSocket proxy that can cut connections.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import WebSocket, { WebSocketServer } from 'ws';

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');

/** The `groupwire` binary: $GROUPWIRE_BIN, else the debug build under $CARGO_TARGET_DIR or target/. */
export function relayBinary() {
  const candidates = [
    process.env.GROUPWIRE_BIN,
    process.env.CARGO_TARGET_DIR && path.join(process.env.CARGO_TARGET_DIR, 'debug/groupwire'),
    path.join(repo, 'target/debug/groupwire'),
  ].filter(Boolean);
  const bin = candidates.find((p) => existsSync(p));
  if (!bin) {
    throw new Error(`no groupwire binary (tried ${candidates.join(', ')}): run cargo build -p groupwire-cli or set GROUPWIRE_BIN`);
  }
  return bin;
}

/**
 * Starts `groupwire relay serve STATE --listen 127.0.0.1:0 --ws WS --ready-json ARGS`
 * (STATE: `--memory` unless given, e.g. `['--data-dir', dir]`) and resolves
 * with { ws, tcp, stop() } once its ready line arrives; stop() is kill -9.
 */
export async function startRelay(args = [], { state = ['--memory'], ws = '127.0.0.1:0' } = {}) {
  const child = spawn(
    relayBinary(),
    ['relay', 'serve', ...state, '--listen', '127.0.0.1:0', '--ws', ws, '--ready-json', ...args],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  const lines = createInterface({ input: child.stdout });
  const ready = await new Promise((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`the relay exited (${code}) before its ready line`)));
    lines.once('line', (l) => resolve(JSON.parse(l)));
  });
  return {
    ws: ready.websocket,
    tcp: ready.tcp,
    stop: () =>
      new Promise((resolve) => {
        if (child.exitCode !== null) return resolve();
        child.once('exit', () => resolve());
        child.kill('SIGKILL');
      }),
  };
}

/**
 * A WebSocket proxy in front of `target`: `cut()` closes every connection
 * through it (like a network failure); while `down`, new ones are refused.
 */
export async function startProxy(target) {
  const server = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  await new Promise((r) => server.once('listening', r));
  const pairs = new Set();
  const proxy = {
    down: false,
    url: `ws://127.0.0.1:${server.address().port}/`,
    connections: 0,
    cut() {
      for (const [a, b] of pairs) {
        a.terminate();
        b.terminate();
      }
      pairs.clear();
    },
    close: () => new Promise((r) => { proxy.cut(); server.close(() => r()); }),
  };
  server.on('connection', (client) => {
    if (proxy.down) return client.terminate();
    proxy.connections++;
    const upstream = new WebSocket(target);
    const pair = [client, upstream];
    pairs.add(pair);
    const early = [];
    upstream.on('open', () => early.splice(0).forEach((m) => upstream.send(m)));
    client.on('message', (m, binary) => {
      const data = binary ? m : m.toString();
      if (upstream.readyState === WebSocket.OPEN) upstream.send(data);
      else early.push(data);
    });
    upstream.on('message', (m, binary) => client.readyState === WebSocket.OPEN && client.send(binary ? m : m.toString()));
    const end = () => {
      pairs.delete(pair);
      client.terminate();
      upstream.terminate();
    };
    client.on('close', end);
    upstream.on('close', end);
    client.on('error', end);
    upstream.on('error', end);
  });
  return proxy;
}

/** Resolves with the first event from `client.on(type)` that satisfies `pred`. */
export function nextEvent(client, type, pred = () => true) {
  return new Promise((resolve) => {
    const off = client.on(type, (e) => {
      if (pred(e)) {
        off();
        resolve(e);
      }
    });
  });
}

export const text = (b) => new TextDecoder().decode(b);
