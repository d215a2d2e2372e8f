/**
 * The relay's wire format (docs/relay-protocol.md), byte for byte the same
 * as `crates/groupwire-relay/src/frame/mod.rs`: a big-endian `u32` length
 * (bytes after it), then `version u8`, `kind u8`, `flags u16` (zero but for {@link FLAG_RESUME}),
 * `request u32`, then the kind's body. Strings are a `u16` length then
 * UTF-8, blobs a `u32` length then bytes, names at most 255 bytes.
 *
 * {@link decodeFrame} never throws: it returns a {@link FrameError} for any
 * input it cannot read, never reads past the frame and never allocates
 * more than the frame's size. {@link encodeFrame} throws `RangeError` for
 * values that do not fit their field (a local mistake, not peer input).
 *
 * @module
 */

/** Bytes of the length prefix. */
export const LEN_PREFIX = 4;
/** Bytes from the start of a frame to its body (prefix included). */
export const HEADER_LEN = 12;
/** The protocol version this library speaks. */
export const VERSION = 1;
/** The longest group, lock or client name, in UTF-8 bytes. */
export const MAX_NAME_LEN = 255;

/** Frame kinds. Client-to-relay kinds are below 0x40. */
export const Kind = {
  Hello: 0x01,
  CreateGroup: 0x02,
  DeleteGroup: 0x03,
  Join: 0x04,
  Leave: 0x05,
  ChangeRole: 0x06,
  ChangeMode: 0x07,
  SetPriority: 0x08,
  Send: 0x09,
  Checkpoint: 0x0a,
  LockAcquire: 0x0b,
  LockRelease: 0x0c,
  Credit: 0x0d,
  Ping: 0x0e,
  Welcome: 0x40,
  Ok: 0x41,
  Sent: 0x42,
  Joined: 0x43,
  Deliver: 0x44,
  Membership: 0x45,
  LockGranted: 0x46,
  GroupDeleted: 0x47,
  Resync: 0x48,
  Error: 0x49,
  Pong: 0x4a,
} as const;

/** A member's role in a group (Corona §4.2), in decreasing privilege. */
export type Role = 'principal' | 'observer' | 'membership-observer';
/** Whether a member is actively watching a group (Corona §4.3). */
export type Mode = 'active' | 'passive';
/** What happened to a member in a membership notice. */
export type MembershipChange =
  | 'joined'
  | 'left'
  | 'role-changed'
  | 'mode-changed'
  | 'disconnected'
  | 'evicted';

const ROLES: readonly Role[] = ['principal', 'observer', 'membership-observer'];
const MODES: readonly Mode[] = ['active', 'passive'];
const CHANGES: readonly MembershipChange[] = [
  'joined',
  'left',
  'role-changed',
  'mode-changed',
  'disconnected',
  'evicted',
];

/** One member as listed in a `Joined` frame. */
export interface MemberInfo {
  client: bigint;
  name: string;
  role: Role;
  mode: Mode;
}

/** A sequenced update. */
export interface Update {
  group: string;
  seq: bigint;
  sender: bigint;
  msgType: number;
  sentAtMicros: bigint;
  payload: Uint8Array;
}

/** A state transfer: a checkpoint and the members at join time. */
export interface JoinInfo {
  group: string;
  groupType: string;
  checkpointSeq: bigint;
  headSeq: bigint;
  state: Uint8Array;
  members: MemberInfo[];
}

/** A membership change. */
export interface MembershipNotice {
  group: string;
  client: bigint;
  name: string;
  change: MembershipChange;
  role: Role;
  mode: Mode;
}

/** Every frame of protocol version 1, both directions. */
export type Frame =
  | { kind: 'Hello'; maxVersion: number; window: number; token: string; name: string }
  | { kind: 'CreateGroup'; group: string; groupType: string; priority: number; initialState: Uint8Array }
  | { kind: 'DeleteGroup'; group: string }
  /** `resumeAfter` (header flag 0x0001): resume a membership the client had, after this sequence. */
  | { kind: 'Join'; group: string; role: Role; mode: Mode; watchMembership: boolean; resumeAfter?: bigint }
  | { kind: 'Leave'; group: string }
  | { kind: 'ChangeRole'; group: string; role: Role }
  | { kind: 'ChangeMode'; group: string; mode: Mode }
  | { kind: 'SetPriority'; group: string; priority: number }
  | { kind: 'Send'; group: string; msgType: number; sentAtMicros: bigint; payload: Uint8Array }
  | { kind: 'Checkpoint'; group: string; seq: bigint; state: Uint8Array }
  | { kind: 'LockAcquire'; group: string; lock: string; wait: boolean }
  | { kind: 'LockRelease'; group: string; lock: string }
  | { kind: 'Credit'; consumed: bigint }
  | { kind: 'Ping'; nonce: bigint }
  /** `resume` (header flag 0x0001): the relay resumes joins (`Join.resumeAfter`). */
  | { kind: 'Welcome'; version: number; client: bigint; maxFrame: number; window: number; resume?: boolean }
  | { kind: 'Ok' }
  | { kind: 'Sent'; group: string; seq: bigint }
  | ({ kind: 'Joined' } & JoinInfo)
  | ({ kind: 'Deliver' } & Update)
  | ({ kind: 'Membership' } & MembershipNotice)
  | { kind: 'LockGranted'; group: string; lock: string }
  | { kind: 'GroupDeleted'; group: string }
  | { kind: 'Resync'; group: string; dropped: bigint }
  | { kind: 'Error'; code: number; message: string }
  | { kind: 'Pong'; nonce: bigint };

/** The name of a frame kind. */
export type KindName = Frame['kind'];

/** A frame and its request id (0 for frames the relay sends on its own). */
export interface Envelope {
  request: number;
  frame: Frame;
}

/** Why bytes could not be decoded (the relay's `FrameError`). */
export class FrameError extends Error {
  override readonly name = 'FrameError';
}

const encoder = new TextEncoder();
const decoder = new TextDecoder('utf-8', { fatal: true });
const U16_MAX = 0xffff;
const U32_MAX = 0xffffffff;
const U64_MAX = (1n << 64n) - 1n;

class Writer {
  private buf = new Uint8Array(64);
  private view = new DataView(this.buf.buffer);
  len = 0;

  private room(n: number): void {
    if (this.len + n <= this.buf.length) return;
    let size = this.buf.length * 2;
    while (size < this.len + n) size *= 2;
    const next = new Uint8Array(size);
    next.set(this.buf.subarray(0, this.len));
    this.buf = next;
    this.view = new DataView(next.buffer);
  }
  u8(v: number, what: string): void {
    checkInt(v, 0xff, what);
    this.room(1);
    this.view.setUint8(this.len, v);
    this.len += 1;
  }
  u16(v: number, what: string): void {
    checkInt(v, U16_MAX, what);
    this.room(2);
    this.view.setUint16(this.len, v);
    this.len += 2;
  }
  u32(v: number, what: string): void {
    checkInt(v, U32_MAX, what);
    this.room(4);
    this.view.setUint32(this.len, v);
    this.len += 4;
  }
  u64(v: bigint, what: string): void {
    if (typeof v !== 'bigint' || v < 0n || v > U64_MAX) {
      throw new RangeError(`${what} must be a bigint in 0..2^64-1, got ${String(v)}`);
    }
    this.room(8);
    this.view.setBigUint64(this.len, v);
    this.len += 8;
  }
  bytes(b: Uint8Array): void {
    this.room(b.length);
    this.buf.set(b, this.len);
    this.len += b.length;
  }
  str(s: string, what: string, max = U16_MAX): void {
    const b = encoder.encode(s);
    if (b.length > max) {
      throw new RangeError(`${what} is ${b.length} bytes of UTF-8; at most ${max} fit`);
    }
    this.u16(b.length, what);
    this.bytes(b);
  }
  name(s: string, what: string): void {
    this.str(s, what, MAX_NAME_LEN);
  }
  blob(b: Uint8Array, what: string): void {
    this.u32(b.length, what);
    this.bytes(b);
  }
  finish(): Uint8Array {
    this.view.setUint32(0, this.len - LEN_PREFIX);
    return this.buf.slice(0, this.len);
  }
}

function checkInt(v: number, max: number, what: string): void {
  if (!Number.isInteger(v) || v < 0 || v > max) {
    throw new RangeError(`${what} must be an integer in 0..${max}, got ${String(v)}`);
  }
}

/**
 * Header flag 0x0001, *resume*: on `Join`, a `resume_after u64` follows
 * its fields; on `Welcome`, the relay resumes joins. Every other flag is
 * zero when sent and ignored when received.
 */
export const FLAG_RESUME = 0x0001;

function flags(f: Frame): number {
  const resume = (f.kind === 'Join' && f.resumeAfter !== undefined) || (f.kind === 'Welcome' && f.resume === true);
  return resume ? FLAG_RESUME : 0;
}

function kindByte(kind: KindName): number {
  return Kind[kind];
}

/**
 * Encodes a frame with its header and length prefix.
 * @throws RangeError if a field does not fit (a name over 255 bytes, ...).
 */
export function encodeFrame(request: number, f: Frame): Uint8Array {
  const w = new Writer();
  w.u32(0, 'length'); // patched by finish
  w.u8(VERSION, 'version');
  w.u8(kindByte(f.kind), 'kind');
  w.u16(flags(f), 'flags');
  w.u32(request, 'request id');
  switch (f.kind) {
    case 'Hello':
      w.u8(f.maxVersion, 'max version');
      w.u32(f.window, 'window');
      w.str(f.token, 'token');
      w.name(f.name, 'client name');
      break;
    case 'CreateGroup':
      w.name(f.group, 'group name');
      w.name(f.groupType, 'group type');
      w.u8(f.priority, 'priority');
      w.blob(f.initialState, 'initial state');
      break;
    case 'DeleteGroup':
    case 'Leave':
    case 'GroupDeleted':
      w.name(f.group, 'group name');
      break;
    case 'Join':
      w.name(f.group, 'group name');
      w.u8(roleByte(f.role), 'role');
      w.u8(modeByte(f.mode), 'mode');
      w.u8(f.watchMembership ? 1 : 0, 'watch');
      if (f.resumeAfter !== undefined) w.u64(f.resumeAfter, 'resume after');
      break;
    case 'ChangeRole':
      w.name(f.group, 'group name');
      w.u8(roleByte(f.role), 'role');
      break;
    case 'ChangeMode':
      w.name(f.group, 'group name');
      w.u8(modeByte(f.mode), 'mode');
      break;
    case 'SetPriority':
      w.name(f.group, 'group name');
      w.u8(f.priority, 'priority');
      break;
    case 'Send':
      w.name(f.group, 'group name');
      w.u16(f.msgType, 'message type');
      w.u64(f.sentAtMicros, 'sent at');
      w.blob(f.payload, 'payload');
      break;
    case 'Checkpoint':
      w.name(f.group, 'group name');
      w.u64(f.seq, 'checkpoint sequence');
      w.blob(f.state, 'state');
      break;
    case 'LockAcquire':
      w.name(f.group, 'group name');
      w.name(f.lock, 'lock name');
      w.u8(f.wait ? 1 : 0, 'wait');
      break;
    case 'LockRelease':
    case 'LockGranted':
      w.name(f.group, 'group name');
      w.name(f.lock, 'lock name');
      break;
    case 'Credit':
      w.u64(f.consumed, 'consumed');
      break;
    case 'Ping':
    case 'Pong':
      w.u64(f.nonce, 'nonce');
      break;
    case 'Welcome':
      w.u8(f.version, 'version');
      w.u64(f.client, 'client id');
      w.u32(f.maxFrame, 'max frame');
      w.u32(f.window, 'window');
      break;
    case 'Ok':
      break;
    case 'Sent':
      w.name(f.group, 'group name');
      w.u64(f.seq, 'sequence');
      break;
    case 'Joined':
      w.name(f.group, 'group name');
      w.name(f.groupType, 'group type');
      w.u64(f.checkpointSeq, 'checkpoint sequence');
      w.u64(f.headSeq, 'head sequence');
      w.blob(f.state, 'state');
      w.u32(f.members.length, 'member count');
      for (const m of f.members) {
        w.u64(m.client, 'client id');
        w.name(m.name, 'member name');
        w.u8(roleByte(m.role), 'role');
        w.u8(modeByte(m.mode), 'mode');
      }
      break;
    case 'Deliver':
      w.name(f.group, 'group name');
      w.u64(f.seq, 'sequence');
      w.u64(f.sender, 'sender');
      w.u16(f.msgType, 'message type');
      w.u64(f.sentAtMicros, 'sent at');
      w.blob(f.payload, 'payload');
      break;
    case 'Membership':
      w.name(f.group, 'group name');
      w.u64(f.client, 'client id');
      w.name(f.name, 'member name');
      w.u8(CHANGES.indexOf(f.change) + 1, 'membership change');
      w.u8(roleByte(f.role), 'role');
      w.u8(modeByte(f.mode), 'mode');
      break;
    case 'Resync':
      w.name(f.group, 'group name');
      w.u64(f.dropped, 'dropped');
      break;
    case 'Error':
      w.u16(f.code, 'error code');
      w.str(f.message, 'error message');
      break;
  }
  return w.finish();
}

function roleByte(r: Role): number {
  const i = ROLES.indexOf(r);
  if (i < 0) throw new RangeError(`unknown role ${String(r)} (principal, observer, membership-observer)`);
  return i + 1;
}

function modeByte(m: Mode): number {
  const i = MODES.indexOf(m);
  if (i < 0) throw new RangeError(`unknown mode ${String(m)} (active, passive)`);
  return i + 1;
}

/** Reads fields from one frame; every method throws `FrameError` past its end. */
class Reader {
  private at: number;
  private readonly view: DataView;
  constructor(private readonly buf: Uint8Array) {
    this.view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
    this.at = 0;
  }
  get left(): number {
    return this.buf.length - this.at;
  }
  seek(at: number): void {
    this.at = at;
  }
  private need(n: number): void {
    if (this.left < n) {
      throw new FrameError(`truncated frame: needed ${n} bytes, got ${this.left}`);
    }
  }
  u8(): number {
    this.need(1);
    return this.view.getUint8(this.at++);
  }
  bool(): boolean {
    const v = this.u8();
    if (v > 1) throw new FrameError('malformed frame: boolean');
    return v === 1;
  }
  u16(): number {
    this.need(2);
    const v = this.view.getUint16(this.at);
    this.at += 2;
    return v;
  }
  u32(): number {
    this.need(4);
    const v = this.view.getUint32(this.at);
    this.at += 4;
    return v;
  }
  u64(): bigint {
    this.need(8);
    const v = this.view.getBigUint64(this.at);
    this.at += 8;
    return v;
  }
  take(n: number): Uint8Array {
    this.need(n);
    const b = this.buf.subarray(this.at, this.at + n);
    this.at += n;
    return b;
  }
  string(): string {
    const b = this.take(this.u16());
    try {
      return decoder.decode(b);
    } catch {
      throw new FrameError('malformed frame: string is not UTF-8');
    }
  }
  name(): string {
    const n = this.u16();
    if (n > MAX_NAME_LEN) {
      // The Rust decoder reads the bytes first; a short frame is truncated either way.
      this.need(n);
      throw new FrameError('malformed frame: name longer than 255 bytes');
    }
    this.at -= 2;
    return this.string();
  }
  /** A blob, copied out of the frame so it outlives the socket's buffer. */
  blob(): Uint8Array {
    return this.take(this.u32()).slice();
  }
  role(): Role {
    const v = this.u8();
    const r = ROLES[v - 1];
    if (r === undefined) throw new FrameError('malformed frame: role');
    return r;
  }
  mode(): Mode {
    const v = this.u8();
    const m = MODES[v - 1];
    if (m === undefined) throw new FrameError('malformed frame: activity mode');
    return m;
  }
  change(): MembershipChange {
    const v = this.u8();
    const c = CHANGES[v - 1];
    if (c === undefined) throw new FrameError('malformed frame: membership change');
    return c;
  }
}

const KIND_NAMES = new Map<number, KindName>(
  Object.entries(Kind).map(([k, v]) => [v, k as KindName]),
);

/**
 * The whole length of the frame at `buf[0]` (prefix included), `null` if
 * fewer than 4 bytes are there. A `FrameError` if it exceeds `maxFrame` or
 * is below the header size.
 */
export function frameLen(buf: Uint8Array, maxFrame: number): number | null | FrameError {
  if (buf.length < LEN_PREFIX) return null;
  const body = new DataView(buf.buffer, buf.byteOffset, 4).getUint32(0);
  const len = body + LEN_PREFIX;
  if (len > maxFrame) return new FrameError(`frame of ${len} bytes exceeds the cap of ${maxFrame}`);
  if (len < HEADER_LEN) return new FrameError('malformed frame: length below the header size');
  return len;
}

/**
 * Decodes exactly one whole frame (length prefix included) of at most
 * `maxFrame` bytes. Never throws: bad input gives a {@link FrameError}.
 */
export function decodeFrame(buf: Uint8Array, maxFrame: number): Envelope | FrameError {
  try {
    return decodeOrThrow(buf, maxFrame);
  } catch (e) {
    if (e instanceof FrameError) return e;
    // Nothing else is thrown by the reader; keep the promise regardless.
    return new FrameError(`malformed frame: ${String(e)}`);
  }
}

function decodeOrThrow(buf: Uint8Array, maxFrame: number): Envelope {
  const len = frameLen(buf, maxFrame);
  if (len === null) throw new FrameError(`truncated frame: needed ${LEN_PREFIX} bytes, got ${buf.length}`);
  if (len instanceof FrameError) throw len;
  if (buf.length < len) throw new FrameError(`truncated frame: needed ${len} bytes, got ${buf.length}`);
  if (buf.length > len) throw new FrameError('malformed frame: bytes after the frame');
  const r = new Reader(buf);
  r.seek(LEN_PREFIX);
  const version = r.u8();
  if (version !== VERSION) throw new FrameError(`unsupported protocol version ${version}`);
  const kb = r.u8();
  const kind = KIND_NAMES.get(kb);
  if (kind === undefined) throw new FrameError(`unknown frame kind 0x${kb.toString(16).padStart(2, '0')}`);
  // Ignored but for the resume flag of Join and Welcome.
  const resume = (r.u16() & FLAG_RESUME) !== 0;
  const request = r.u32();
  const frame = body(kind, r, resume);
  if (r.left !== 0) throw new FrameError('malformed frame: bytes after the body');
  return { request, frame };
}

function body(kind: KindName, r: Reader, resume: boolean): Frame {
  switch (kind) {
    case 'Hello':
      return { kind, maxVersion: r.u8(), window: r.u32(), token: r.string(), name: r.name() };
    case 'CreateGroup':
      return { kind, group: r.name(), groupType: r.name(), priority: r.u8(), initialState: r.blob() };
    case 'DeleteGroup':
    case 'Leave':
    case 'GroupDeleted':
      return { kind, group: r.name() };
    case 'Join': {
      const join: Frame = { kind, group: r.name(), role: r.role(), mode: r.mode(), watchMembership: r.bool() };
      if (resume) join.resumeAfter = r.u64();
      return join;
    }
    case 'ChangeRole':
      return { kind, group: r.name(), role: r.role() };
    case 'ChangeMode':
      return { kind, group: r.name(), mode: r.mode() };
    case 'SetPriority':
      return { kind, group: r.name(), priority: r.u8() };
    case 'Send':
      return { kind, group: r.name(), msgType: r.u16(), sentAtMicros: r.u64(), payload: r.blob() };
    case 'Checkpoint':
      return { kind, group: r.name(), seq: r.u64(), state: r.blob() };
    case 'LockAcquire':
      return { kind, group: r.name(), lock: r.name(), wait: r.bool() };
    case 'LockRelease':
    case 'LockGranted':
      return { kind, group: r.name(), lock: r.name() };
    case 'Credit':
      return { kind, consumed: r.u64() };
    case 'Ping':
    case 'Pong':
      return { kind, nonce: r.u64() };
    case 'Welcome': {
      const welcome: Frame = { kind, version: r.u8(), client: r.u64(), maxFrame: r.u32(), window: r.u32() };
      if (resume) welcome.resume = true;
      return welcome;
    }
    case 'Ok':
      return { kind };
    case 'Sent':
      return { kind, group: r.name(), seq: r.u64() };
    case 'Joined': {
      const group = r.name();
      const groupType = r.name();
      const checkpointSeq = r.u64();
      const headSeq = r.u64();
      const state = r.blob();
      const count = r.u32();
      // Each member takes at least 12 bytes: a bogus count fails as
      // truncated before it allocates.
      if (count > r.left / 12) throw new FrameError(`truncated frame: ${count} members cannot fit in ${r.left} bytes`);
      const members: MemberInfo[] = [];
      for (let i = 0; i < count; i++) {
        members.push({ client: r.u64(), name: r.name(), role: r.role(), mode: r.mode() });
      }
      return { kind, group, groupType, checkpointSeq, headSeq, state, members };
    }
    case 'Deliver':
      return {
        kind,
        group: r.name(),
        seq: r.u64(),
        sender: r.u64(),
        msgType: r.u16(),
        sentAtMicros: r.u64(),
        payload: r.blob(),
      };
    case 'Membership':
      return {
        kind,
        group: r.name(),
        client: r.u64(),
        name: r.name(),
        change: r.change(),
        role: r.role(),
        mode: r.mode(),
      };
    case 'Resync':
      return { kind, group: r.name(), dropped: r.u64() };
    case 'Error':
      return { kind, code: r.u16(), message: r.string() };
  }
}
