// The browser test's driver: headless Chromium (Debian's, through
// playwright-core) runs browser clients against a relay the caller
// started, in step with a Rust client that the caller runs
// (crates/groupwire-cli/tests/browser.rs). The steps meet through the
// group's own updates, so nothing depends on timing:
//
//   Rust: creates GROUP (state "[]"), joins, takes lock "pen", then runs
//         this driver and sends R:0..R:N-1 once it sees a browser's update.
//   A, B: two pages on the relay's demo page join GROUP and send A:i / B:i.
//   A:    once everyone's 3N updates arrived, checkpoints (state = JSON of
//         the payloads so far); C, a third page, joins late and must get
//         that state and the log after it.
//   Lock: A waits for "pen" and says A:waiting; Rust releases; A gets it
//         and says A:got-pen; Rust finds it busy, waits for it and says
//         R:waiting; A releases; Rust gets it and says R:got-pen, R:done.
//   Demo: a drag in A's whiteboard shows up in B's; a page opened after a
//         demo page stored a checkpoint starts from it with the same drawing.
//
// Prints one JSON line: {"A": [[seq, payload], ...], "B": ..., "C": ...,
// "cState": [...], "cCheckpoint": seq, "demoSegments": n}; exits 1 with
// the reason on stderr if a step fails or takes over --timeout seconds.
//
//   node test/browser/driver.mjs --ws ws://127.0.0.1:PORT/ --group G [--n 30] [--timeout 120]
import { parseArgs } from 'node:util';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';

const { values } = parseArgs({
  options: {
    ws: { type: 'string' },
    group: { type: 'string' },
    n: { type: 'string', default: '30' },
    timeout: { type: 'string', default: '120' },
    chromium: { type: 'string', default: '/usr/bin/chromium' },
  },
});
if (!values.ws || !values.group) {
  console.error('usage: driver.mjs --ws ws://HOST:PORT/ --group GROUP [--n N] [--timeout SECONDS]');
  process.exit(2);
}
const N = Number(values.n);
const group = values.group;
const wait = Number(values.timeout) * 1000;
const http = values.ws.replace(/^ws/, 'http');
const watchdog = setTimeout(() => {
  console.error(`browser driver: no result within ${values.timeout} s`);
  process.exit(1);
}, wait + 15_000);

// A fresh profile, and the flags this machine's Chromium needs headless
// (.library/env/machines/polyglot.md): no sandbox as root, no GPU, no
// background connections to Google's hosts.
const profile = mkdtempSync(path.join(tmpdir(), 'groupwire-chromium-'));
const browser = await chromium.launchPersistentContext(profile, {
  executablePath: values.chromium,
  headless: true,
  args: [
    '--no-sandbox',
    '--disable-gpu',
    '--disable-quic',
    '--no-first-run',
    '--disable-background-networking',
    '--disable-component-update',
    '--disable-sync',
    '--disable-background-timer-throttling',
    '--disable-renderer-backgrounding',
  ],
});
browser.setDefaultTimeout(wait);

/** A page on the relay's demo page (board `demo-<group>`), its console and errors forwarded to stderr. */
async function page(name) {
  const p = await browser.newPage();
  p.on('console', (m) => m.type() === 'error' && console.error(`[${name} console] ${m.text()}`));
  p.on('pageerror', (e) => console.error(`[${name} page error] ${e.message}`));
  // every=4: the demo pages checkpoint (under their lock) every 4 updates.
  await p.goto(`${http}?board=${encodeURIComponent('demo-' + group)}&name=${name}-demo&every=4`);
  await p.waitForFunction(() => document.body.dataset.ready === 'yes');
  return p;
}

/** Connects a client in page `p` (importing the relay's /groupwire.js) and joins the group. */
async function join(p, name) {
  return p.evaluate(
    async ({ ws, group, name }) => {
      const { connect } = await import('/groupwire.js');
      const dec = new TextDecoder();
      const client = await connect(ws, { name });
      const state = await client.join(group);
      const t = { client, seen: state.log.map((u) => [String(u.seq), dec.decode(u.payload)]), errors: [] };
      client.on('deliver', (u) => {
        if (u.group === group) t.seen.push([String(u.seq), dec.decode(u.payload)]);
      });
      client.on('closed', (e) => t.errors.push(String(e.error)));
      window.t = t;
      return { checkpointSeq: String(state.checkpointSeq), state: dec.decode(state.state), log: state.log.length, members: state.members.map((m) => m.name) };
    },
    { ws: values.ws, group, name },
  );
}

const until = (p, pred, arg) => p.waitForFunction(pred, arg, { polling: 20 });
const has = (p, payload) => until(p, (x) => window.t.seen.some(([, m]) => m === x), payload);
const count = (p, prefixRe, k) =>
  until(p, ([re, k]) => window.t.seen.filter(([, m]) => new RegExp(re).test(m)).length >= k, [prefixRe, k]);

try {
  const [pa, pb] = [await page('A'), await page('B')];
  await join(pa, 'browser-A');
  await join(pb, 'browser-B');
  const sendAll = (p, prefix) =>
    p.evaluate(
      ({ group, prefix, n }) => Promise.all(Array.from({ length: n }, (_, i) => window.t.client.send(group, `${prefix}:${i}`))),
      { group, prefix, n: N },
    );
  await Promise.all([sendAll(pa, 'A'), sendAll(pb, 'B')]);
  for (const p of [pa, pb]) await count(p, '^[ABR]:\\d+$', 3 * N);

  // A checkpoints what it has; C joins late and gets it plus the log after it.
  await pa.evaluate(async (group) => {
    const upto = window.t.seen.length;
    const [seq] = window.t.seen[upto - 1];
    const state = JSON.stringify(window.t.seen.slice(0, upto).map(([, m]) => m));
    await window.t.client.checkpoint(group, BigInt(seq), state);
    await window.t.client.send(group, 'A:checkpointed');
  }, group);
  const pc = await page('C');
  await has(pa, 'A:checkpointed');
  const joinedC = await join(pc, 'browser-C');

  // The lock: Rust holds it; A waits in line, then passes it back.
  await pa.evaluate(async (group) => {
    window.t.granted = window.t.client.lock(group, 'pen').then(() => window.t.client.send(group, 'A:got-pen'));
    await window.t.client.send(group, 'A:waiting');
  }, group);
  await has(pa, 'A:got-pen');
  await has(pa, 'R:waiting');
  await pa.evaluate((group) => window.t.client.unlock(group, 'pen'), group);

  // The demo page: a drag in A's whiteboard reaches B's.
  const before = Number(await pb.evaluate(() => document.body.dataset.segments));
  const box = await pa.locator('#wrap').boundingBox();
  await pa.mouse.move(box.x + 100, box.y + 100);
  await pa.mouse.down();
  for (let i = 1; i <= 5; i++) await pa.mouse.move(box.x + 100 + 20 * i, box.y + 100 + 10 * i);
  await pa.mouse.up();
  await until(pb, (k) => Number(document.body.dataset.segments) >= k, before + 5);
  const demoSegments = Number(await pb.evaluate(() => document.body.dataset.segments));
  // Once a demo page has stored a checkpoint, a new one starts from it and shows the same drawing.
  const checkpointed = async (p) => Number((await p.evaluate(() => document.body.dataset.checkpointed)) ?? 0);
  await Promise.race([pa, pb, pc].map((p) => until(p, () => document.body.dataset.checkpointed !== undefined)));
  const stored = Math.max(...(await Promise.all([pa, pb, pc].map(checkpointed))));
  const pd = await page('D');
  const demoLate = {
    joinedAt: Number(await pd.evaluate(() => document.body.dataset.joinedAt)),
    stored,
    segments: Number(await pd.evaluate(() => document.body.dataset.segments)),
  };

  for (const p of [pa, pb, pc]) await has(p, 'R:done');
  const seen = async (p) => {
    const { seen, errors } = await p.evaluate(() => ({ seen: window.t.seen, errors: window.t.errors }));
    if (errors.length > 0) throw new Error(`a browser client closed: ${errors.join('; ')}`);
    return seen;
  };
  const result = {
    A: await seen(pa),
    B: await seen(pb),
    C: await seen(pc),
    cCheckpoint: joinedC.checkpointSeq,
    cState: JSON.parse(joinedC.state),
    cMembers: joinedC.members,
    demoSegments,
    demoLate,
  };
  process.stdout.write(JSON.stringify(result) + '\n');
  await browser.close();
  rmSync(profile, { recursive: true, force: true });
  clearTimeout(watchdog);
} catch (e) {
  console.error(`browser driver: ${e.stack ?? e}`);
  await browser.close().catch(() => {});
  rmSync(profile, { recursive: true, force: true });
  process.exit(1);
}
