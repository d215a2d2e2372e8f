// groupwire 0.1.0: the browser client of the groupwire relay, one ES module.
// Built from clients/js/src by `npm run build`; do not edit.

// ---- frame.ts
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
};
const ROLES = ['principal', 'observer', 'membership-observer'];
const MODES = ['active', 'passive'];
const CHANGES = [
    'joined',
    'left',
    'role-changed',
    'mode-changed',
    'disconnected',
    'evicted',
];
/** Why bytes could not be decoded (the relay's `FrameError`). */
export class FrameError extends Error {
    name = 'FrameError';
}
const encoder = new TextEncoder();
const decoder = new TextDecoder('utf-8', { fatal: true });
const U16_MAX = 0xffff;
const U32_MAX = 0xffffffff;
const U64_MAX = (1n << 64n) - 1n;
class Writer {
    buf = new Uint8Array(64);
    view = new DataView(this.buf.buffer);
    len = 0;
    room(n) {
        if (this.len + n <= this.buf.length)
            return;
        let size = this.buf.length * 2;
        while (size < this.len + n)
            size *= 2;
        const next = new Uint8Array(size);
        next.set(this.buf.subarray(0, this.len));
        this.buf = next;
        this.view = new DataView(next.buffer);
    }
    u8(v, what) {
        checkInt(v, 0xff, what);
        this.room(1);
        this.view.setUint8(this.len, v);
        this.len += 1;
    }
    u16(v, what) {
        checkInt(v, U16_MAX, what);
        this.room(2);
        this.view.setUint16(this.len, v);
        this.len += 2;
    }
    u32(v, what) {
        checkInt(v, U32_MAX, what);
        this.room(4);
        this.view.setUint32(this.len, v);
        this.len += 4;
    }
    u64(v, what) {
        if (typeof v !== 'bigint' || v < 0n || v > U64_MAX) {
            throw new RangeError(`${what} must be a bigint in 0..2^64-1, got ${String(v)}`);
        }
        this.room(8);
        this.view.setBigUint64(this.len, v);
        this.len += 8;
    }
    bytes(b) {
        this.room(b.length);
        this.buf.set(b, this.len);
        this.len += b.length;
    }
    str(s, what, max = U16_MAX) {
        const b = encoder.encode(s);
        if (b.length > max) {
            throw new RangeError(`${what} is ${b.length} bytes of UTF-8; at most ${max} fit`);
        }
        this.u16(b.length, what);
        this.bytes(b);
    }
    name(s, what) {
        this.str(s, what, MAX_NAME_LEN);
    }
    blob(b, what) {
        this.u32(b.length, what);
        this.bytes(b);
    }
    finish() {
        this.view.setUint32(0, this.len - LEN_PREFIX);
        return this.buf.slice(0, this.len);
    }
}
function checkInt(v, max, what) {
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
function flags(f) {
    const resume = (f.kind === 'Join' && f.resumeAfter !== undefined) || (f.kind === 'Welcome' && f.resume === true);
    return resume ? FLAG_RESUME : 0;
}
function kindByte(kind) {
    return Kind[kind];
}
/**
 * Encodes a frame with its header and length prefix.
 * @throws RangeError if a field does not fit (a name over 255 bytes, ...).
 */
export function encodeFrame(request, f) {
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
            if (f.resumeAfter !== undefined)
                w.u64(f.resumeAfter, 'resume after');
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
function roleByte(r) {
    const i = ROLES.indexOf(r);
    if (i < 0)
        throw new RangeError(`unknown role ${String(r)} (principal, observer, membership-observer)`);
    return i + 1;
}
function modeByte(m) {
    const i = MODES.indexOf(m);
    if (i < 0)
        throw new RangeError(`unknown mode ${String(m)} (active, passive)`);
    return i + 1;
}
/** Reads fields from one frame; every method throws `FrameError` past its end. */
class Reader {
    buf;
    at;
    view;
    constructor(buf) {
        this.buf = buf;
        this.view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
        this.at = 0;
    }
    get left() {
        return this.buf.length - this.at;
    }
    seek(at) {
        this.at = at;
    }
    need(n) {
        if (this.left < n) {
            throw new FrameError(`truncated frame: needed ${n} bytes, got ${this.left}`);
        }
    }
    u8() {
        this.need(1);
        return this.view.getUint8(this.at++);
    }
    bool() {
        const v = this.u8();
        if (v > 1)
            throw new FrameError('malformed frame: boolean');
        return v === 1;
    }
    u16() {
        this.need(2);
        const v = this.view.getUint16(this.at);
        this.at += 2;
        return v;
    }
    u32() {
        this.need(4);
        const v = this.view.getUint32(this.at);
        this.at += 4;
        return v;
    }
    u64() {
        this.need(8);
        const v = this.view.getBigUint64(this.at);
        this.at += 8;
        return v;
    }
    take(n) {
        this.need(n);
        const b = this.buf.subarray(this.at, this.at + n);
        this.at += n;
        return b;
    }
    string() {
        const b = this.take(this.u16());
        try {
            return decoder.decode(b);
        }
        catch {
            throw new FrameError('malformed frame: string is not UTF-8');
        }
    }
    name() {
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
    blob() {
        return this.take(this.u32()).slice();
    }
    role() {
        const v = this.u8();
        const r = ROLES[v - 1];
        if (r === undefined)
            throw new FrameError('malformed frame: role');
        return r;
    }
    mode() {
        const v = this.u8();
        const m = MODES[v - 1];
        if (m === undefined)
            throw new FrameError('malformed frame: activity mode');
        return m;
    }
    change() {
        const v = this.u8();
        const c = CHANGES[v - 1];
        if (c === undefined)
            throw new FrameError('malformed frame: membership change');
        return c;
    }
}
const KIND_NAMES = new Map(Object.entries(Kind).map(([k, v]) => [v, k]));
/**
 * The whole length of the frame at `buf[0]` (prefix included), `null` if
 * fewer than 4 bytes are there. A `FrameError` if it exceeds `maxFrame` or
 * is below the header size.
 */
export function frameLen(buf, maxFrame) {
    if (buf.length < LEN_PREFIX)
        return null;
    const body = new DataView(buf.buffer, buf.byteOffset, 4).getUint32(0);
    const len = body + LEN_PREFIX;
    if (len > maxFrame)
        return new FrameError(`frame of ${len} bytes exceeds the cap of ${maxFrame}`);
    if (len < HEADER_LEN)
        return new FrameError('malformed frame: length below the header size');
    return len;
}
/**
 * Decodes exactly one whole frame (length prefix included) of at most
 * `maxFrame` bytes. Never throws: bad input gives a {@link FrameError}.
 */
export function decodeFrame(buf, maxFrame) {
    try {
        return decodeOrThrow(buf, maxFrame);
    }
    catch (e) {
        if (e instanceof FrameError)
            return e;
        // Nothing else is thrown by the reader; keep the promise regardless.
        return new FrameError(`malformed frame: ${String(e)}`);
    }
}
function decodeOrThrow(buf, maxFrame) {
    const len = frameLen(buf, maxFrame);
    if (len === null)
        throw new FrameError(`truncated frame: needed ${LEN_PREFIX} bytes, got ${buf.length}`);
    if (len instanceof FrameError)
        throw len;
    if (buf.length < len)
        throw new FrameError(`truncated frame: needed ${len} bytes, got ${buf.length}`);
    if (buf.length > len)
        throw new FrameError('malformed frame: bytes after the frame');
    const r = new Reader(buf);
    r.seek(LEN_PREFIX);
    const version = r.u8();
    if (version !== VERSION)
        throw new FrameError(`unsupported protocol version ${version}`);
    const kb = r.u8();
    const kind = KIND_NAMES.get(kb);
    if (kind === undefined)
        throw new FrameError(`unknown frame kind 0x${kb.toString(16).padStart(2, '0')}`);
    // Ignored but for the resume flag of Join and Welcome.
    const resume = (r.u16() & FLAG_RESUME) !== 0;
    const request = r.u32();
    const frame = body(kind, r, resume);
    if (r.left !== 0)
        throw new FrameError('malformed frame: bytes after the body');
    return { request, frame };
}
function body(kind, r, resume) {
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
            const join = { kind, group: r.name(), role: r.role(), mode: r.mode(), watchMembership: r.bool() };
            if (resume)
                join.resumeAfter = r.u64();
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
            const welcome = { kind, version: r.u8(), client: r.u64(), maxFrame: r.u32(), window: r.u32() };
            if (resume)
                welcome.resume = true;
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
            if (count > r.left / 12)
                throw new FrameError(`truncated frame: ${count} members cannot fit in ${r.left} bytes`);
            const members = [];
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

// ---- errors.ts
/**
 * Errors: {@link RelayError} for every code the relay sends (one class, a
 * typed `code`), {@link ConnectionError} when the connection ends or never
 * opens, {@link ProtocolError} when the relay's bytes make no sense.
 *
 * @module
 */
/** The relay's error codes (docs/relay-protocol.md, "Errors"). */
export const ErrorCode = {
    malformed: 1,
    'unsupported-version': 2,
    'frame-too-large': 3,
    unauthorized: 4,
    forbidden: 5,
    'no-such-group': 6,
    'group-exists': 7,
    'not-member': 8,
    'already-member': 9,
    'not-holder': 10,
    'lock-busy': 11,
    'already-held': 12,
    'bad-checkpoint': 13,
    'slow-consumer': 14,
    storage: 15,
    'protocol-violation': 16,
    'priority-not-allowed': 17,
    'invalid-argument': 18,
    'shutting-down': 19,
    timeout: 20,
};
/** Codes after which the relay closes the connection. */
const FATAL = new Set([1, 2, 3, 4, 14, 16, 19, 20]);
const NAMES = new Map(Object.entries(ErrorCode).map(([k, v]) => [v, k]));
/** The name of a numeric error code. */
export function errorCodeName(code) {
    return NAMES.get(code) ?? 'unknown';
}
/**
 * The relay refused a request (or, when `fatal`, ended the session).
 *
 * ```ts
 * try { await client.tryLock('board', 'pen'); }
 * catch (e) { if (e instanceof RelayError && e.code === 'lock-busy') { ... } }
 * ```
 */
export class RelayError extends Error {
    name = 'RelayError';
    /** The code's name, e.g. `'lock-busy'`. */
    code;
    /** The code's number on the wire. */
    codeNumber;
    /** Whether the relay closes the connection after it. */
    fatal;
    /** The relay's message. */
    detail;
    constructor(codeNumber, detail) {
        const code = errorCodeName(codeNumber);
        super(`relay error ${code} (${codeNumber}): ${detail}`);
        this.code = code;
        this.codeNumber = codeNumber;
        this.fatal = FATAL.has(codeNumber);
        this.detail = detail;
    }
}
/**
 * The connection failed or closed: `connect()` could not reach the relay,
 * or a request was in flight when the connection ended (its outcome is
 * unknown: a `send` may or may not have been sequenced). `cause` holds the
 * fatal {@link RelayError} or {@link ProtocolError}, if there was one.
 */
export class ConnectionError extends Error {
    name = 'ConnectionError';
    constructor(message, options) {
        super(message, options);
    }
}
/**
 * The relay sent something this client cannot accept: a frame that does
 * not decode, one above the client's cap, a reply to no request. The
 * connection is closed with it.
 */
export class ProtocolError extends Error {
    name = 'ProtocolError';
}

// ---- client.ts
/**
 * The relay client: one WebSocket session at a time, requests matched to
 * replies by id, the relay's send window returned as the application
 * consumes what arrived, and reconnection (to the next of its relay URLs)
 * that re-joins every group, resuming after the last update handed over
 * where the relay can, and hides what the application already saw.
 *
 * @module
 */
const DEFAULT_MAX_INCOMING = 16 << 20;
const DEFAULT_KEEPALIVE_MS = 60_000;
const DEFAULT_MAX_IN_FLIGHT = 1024;
const OPEN = 1;
/** Codes after which reconnecting cannot help: the relay refuses us, or we are wrong. */
const NOT_RETRIED = new Set(['unauthorized', 'unsupported-version', 'malformed', 'frame-too-large', 'protocol-violation']);
/**
 * Connects to a relay's WebSocket listener (`ws://host:port/` or `wss://`),
 * says `Hello` and waits for `Welcome`.
 *
 * `urls` may list several relays (the nodes of one cluster, or one relay
 * under several addresses). They are tried in order: the first session
 * goes to the first that answers (each is tried once; a refusal such as
 * `unauthorized` stops there), and after a connection fails each
 * reconnection attempt goes to the next URL after the one that failed,
 * wrapping around, with the {@link ReconnectOptions} backoff between
 * attempts.
 *
 * @throws ConnectionError if no relay can be reached.
 * @throws RelayError if the relay refuses the session (e.g. `unauthorized`).
 */
export async function connect(urls, opts = {}) {
    const client = new Client(urls, opts);
    await client.opened;
    return client;
}
/**
 * A connection to a relay. Requests return promises; events arrive through
 * {@link Client.on} callbacks or the {@link Client.events} async iterator.
 *
 * **Consume events.** The relay sends no more than its window (256 KiB by
 * default) of group messages that this client has not consumed: an event
 * counts as consumed once the callbacks have run for it (like an event
 * emitter, an event of a type nobody listens to is then dropped) or, while
 * an iterator is open, once the iterator has returned it. With no callback
 * registered and no iterator open, events wait (and the relay waits too)
 * until there is one.
 */
export class Client {
    /** Resolves once the first session is up. */
    opened;
    urls;
    /** The URL of the current connection (or of the next attempt). */
    urlIndex = 0;
    opts;
    WS;
    maxIncoming;
    maxInFlight;
    ws = null;
    /** Bumped per connection, so stale sockets and credits are ignored. */
    session = 0;
    /** A session was up once: failures from now on are retried. */
    up = false;
    /** This session has its `Welcome` and has re-joined every group. */
    live = false;
    /** This session has its `Welcome`. */
    welcomed = false;
    /** This session's `Welcome` said the relay resumes joins (flag 0x0001). */
    resumes = false;
    closed = false;
    closeError;
    id = 0n;
    window = 0;
    creditEvery = 1;
    receivedBytes = 0n;
    consumed = 0n;
    credited = 0n;
    nextRequest = 1;
    pending = new Map();
    /** Requests waiting for the session to come up or for room in flight. */
    waiting = [];
    groups = new Map();
    listeners = new Map();
    queue = [];
    iterating = 0;
    wake = null;
    keepalive = null;
    retryTimer = null;
    attempt = 0;
    settleOpened;
    /** Use {@link connect}. */
    constructor(urls, opts = {}) {
        this.urls = typeof urls === 'string' ? [urls] : [...urls];
        if (this.urls.length === 0)
            throw new TypeError('no relay URL: connect(url) or connect([url, ...])');
        this.opts = opts;
        const WS = opts.WebSocket ?? globalThis.WebSocket;
        if (WS === undefined) {
            throw new TypeError('no WebSocket: pass connect(url, { WebSocket }) (e.g. the `ws` package in Node 20)');
        }
        this.WS = WS;
        this.maxIncoming = opts.maxIncomingFrame ?? DEFAULT_MAX_INCOMING;
        this.maxInFlight = opts.maxInFlight ?? DEFAULT_MAX_IN_FLIGHT;
        for (const url of this.urls)
            checkPlaintextToken(url, opts);
        // Checked here, so a bad name is the caller's error, not a failed connection.
        encodeFrame(0, { kind: 'Hello', maxVersion: VERSION, window: opts.window ?? 0, token: opts.token ?? '', name: opts.name ?? '' });
        this.opened = new Promise((resolve, reject) => {
            this.settleOpened = { resolve, reject };
        });
        // Awaiting `opened` (as connect() does) still sees the rejection; a
        // client made with `new` and never awaited must not crash Node with it.
        this.opened.catch(() => { });
        this.open();
    }
    /** This client's id in member lists and deliveries (changes on reconnection). */
    get clientId() {
        return this.id;
    }
    /** The relay URL of the current connection (or of the next attempt, while reconnecting). */
    get url() {
        return this.urls[this.urlIndex];
    }
    /** The send window the relay granted, in bytes. */
    get grantedWindow() {
        return this.window;
    }
    /**
     * Byte counts of the current connection: frames received from the
     * relay, bytes consumed (handed over, and so credited back), and events
     * waiting for the application. `receivedBytes - consumedBytes` never
     * exceeds the window by more than one frame.
     */
    stats() {
        return { receivedBytes: this.receivedBytes, consumedBytes: this.consumed, queuedEvents: this.queue.length };
    }
    /** Creates a group; the creator is not a member until it joins. */
    async create(group, opts = {}) {
        await this.request({
            kind: 'CreateGroup',
            group,
            groupType: opts.type ?? '',
            priority: opts.priority ?? 4,
            initialState: bytes(opts.state ?? new Uint8Array()),
        });
    }
    /** Deletes a group with its log and checkpoints. */
    async deleteGroup(group) {
        await this.request({ kind: 'DeleteGroup', group });
    }
    /**
     * Joins a group and resolves with its state: the latest checkpoint and
     * every update after it up to the join (`log`). Live updates follow as
     * `deliver` events, starting right after `headSeq`.
     */
    async join(group, opts = {}) {
        if (this.groups.has(group))
            throw new RelayError(9, `already joined ${group} (on this client)`);
        const full = {
            role: opts.role ?? 'principal',
            mode: opts.mode ?? 'active',
            watchMembership: opts.watchMembership ?? true,
        };
        const g = { name: group, opts: full, last: 0n, locks: new Set() };
        this.groups.set(group, g);
        const state = new Promise((done, fail) => {
            g.transfer = transfer('join', done, fail);
        });
        // Rejected together with the request when the connection fails; the request's error is the one thrown.
        state.catch(() => { });
        try {
            await this.request({ kind: 'Join', group, role: full.role, mode: full.mode, watchMembership: full.watchMembership });
        }
        catch (e) {
            if (this.groups.get(group) === g)
                this.groups.delete(group);
            throw e;
        }
        return state;
    }
    /** Leaves a group (releasing your locks in it). */
    async leave(group) {
        const g = this.groups.get(group);
        await this.request({ kind: 'Leave', group });
        if (g !== undefined && this.groups.get(group) === g)
            this.groups.delete(group);
    }
    /**
     * Multicasts an update to a group (principals only) and resolves with
     * its sequence number once the relay has sequenced and stored it.
     */
    async send(group, payload, opts = {}) {
        const f = await this.request({
            kind: 'Send',
            group,
            msgType: opts.type ?? 0,
            sentAtMicros: opts.sentAtMicros ?? nowMicros(),
            payload: bytes(payload),
        });
        if (f.kind !== 'Sent')
            throw this.unexpected(f, 'Sent');
        return f.seq;
    }
    /** Stores `state` as the group's state after every update up to `seq`. */
    async checkpoint(group, seq, state) {
        await this.request({ kind: 'Checkpoint', group, seq, state: bytes(state) });
    }
    /** Acquires a lock, waiting (FIFO) while another member holds it. */
    async lock(group, lock) {
        await this.request({ kind: 'LockAcquire', group, lock, wait: true });
        this.groups.get(group)?.locks.add(lock);
    }
    /** Acquires a lock if it is free: `true` if granted, `false` if held by someone else. */
    async tryLock(group, lock) {
        try {
            await this.request({ kind: 'LockAcquire', group, lock, wait: false });
        }
        catch (e) {
            if (e instanceof RelayError && e.code === 'lock-busy')
                return false;
            throw e;
        }
        this.groups.get(group)?.locks.add(lock);
        return true;
    }
    /** Releases a lock you hold. */
    async unlock(group, lock) {
        this.groups.get(group)?.locks.delete(lock);
        await this.request({ kind: 'LockRelease', group, lock });
    }
    /** Changes your role in a group. */
    async changeRole(group, role) {
        await this.request({ kind: 'ChangeRole', group, role });
        const g = this.groups.get(group);
        if (g !== undefined)
            g.opts.role = role;
    }
    /** Changes your activity mode in a group. */
    async changeMode(group, mode) {
        await this.request({ kind: 'ChangeMode', group, mode });
        const g = this.groups.get(group);
        if (g !== undefined)
            g.opts.mode = mode;
    }
    /** Changes a group's default priority (0..7). */
    async setPriority(group, priority) {
        await this.request({ kind: 'SetPriority', group, priority });
    }
    /** Round trip to the relay. */
    async ping() {
        await this.request({ kind: 'Ping', nonce: BigInt(this.nextRequest) });
    }
    on(type, cb) {
        let set = this.listeners.get(type);
        if (set === undefined) {
            set = new Set();
            this.listeners.set(type, set);
        }
        const f = cb;
        set.add(f);
        // Events that waited for a consumer go to it now.
        queueMicrotask(() => this.drainToCallbacks());
        return () => {
            set.delete(f);
        };
    }
    /**
     * Every event, in order, as an async iterator; it ends after `closed`.
     * Use one iterator at a time (they share one queue).
     *
     * ```ts
     * for await (const e of client.events()) if (e.type === 'deliver') apply(e.payload);
     * ```
     */
    events() {
        this.iterating++;
        let finished = false;
        const finish = () => {
            if (!finished) {
                finished = true;
                this.iterating--;
            }
            return { value: undefined, done: true };
        };
        const it = {
            next: async () => {
                for (;;) {
                    if (finished)
                        return finish();
                    const q = this.queue.shift();
                    if (q !== undefined) {
                        this.consume(q);
                        return { value: q.event, done: false };
                    }
                    if (this.closed)
                        return finish();
                    await new Promise((r) => {
                        this.wake = r;
                    });
                }
            },
            return: async () => {
                const done = finish();
                // A next() waiting for an event ends now, not at the next event.
                const w = this.wake;
                this.wake = null;
                w?.();
                return done;
            },
            [Symbol.asyncIterator]() {
                return it;
            },
        };
        return it;
    }
    /**
     * Closes the connection for good. Requests still waiting fail with a
     * {@link ConnectionError}; iterators end after a `closed` event.
     */
    close() {
        this.shutdown(undefined);
    }
    // ---- the session ---------------------------------------------------
    open() {
        const session = ++this.session;
        const url = this.url;
        let ws;
        try {
            ws = new this.WS(url);
        }
        catch (e) {
            this.failed(session, new ConnectionError(`cannot open ${url}: ${String(e)}`, { cause: e }));
            return;
        }
        this.ws = ws;
        ws.binaryType = 'arraybuffer';
        this.receivedBytes = 0n;
        this.consumed = 0n;
        this.credited = 0n;
        this.live = false;
        this.welcomed = false;
        this.resumes = false;
        ws.onopen = () => {
            if (session !== this.session)
                return;
            const hello = {
                kind: 'Hello',
                maxVersion: VERSION,
                window: this.opts.window ?? 0,
                token: this.opts.token ?? '',
                name: this.opts.name ?? '',
            };
            this.pending.set(this.takeId(), { frame: hello, resolve: () => { }, reject: () => { } });
            this.write(encodeFrame(this.nextRequest - 1, hello));
        };
        ws.onmessage = (ev) => {
            if (session !== this.session)
                return;
            try {
                this.received(session, ev.data);
            }
            catch (e) {
                // Our own bug, not the relay's: still never let it escape into the socket's handler.
                this.failed(session, new ProtocolError(`client error while reading a frame: ${String(e)}`));
            }
        };
        ws.onerror = () => {
            // The close event follows with the details we can know.
        };
        ws.onclose = (ev) => {
            if (session !== this.session)
                return;
            const why = ev.reason ? `${ev.code} ${ev.reason}` : `code ${ev.code}`;
            this.failed(session, new ConnectionError(`connection to ${url} closed (${why})`));
        };
    }
    received(session, data) {
        if (!(data instanceof ArrayBuffer)) {
            this.failed(session, new ProtocolError('the relay sent a WebSocket text message (frames are binary)'));
            return;
        }
        const buf = new Uint8Array(data);
        this.receivedBytes += BigInt(buf.length);
        const env = decodeFrame(buf, this.maxIncoming);
        if (env instanceof FrameError) {
            this.failed(session, new ProtocolError(`the relay sent a bad frame: ${env.message}`));
            return;
        }
        const { request, frame } = env;
        const size = buf.length;
        if (frame.kind === 'Error' && (request === 0 || new RelayError(frame.code, '').fatal)) {
            this.consumed += BigInt(size);
            const err = new RelayError(frame.code, frame.message);
            if (!this.up)
                this.settleOpened.reject(err);
            this.failed(session, err);
            return;
        }
        if (request !== 0) {
            const p = this.pending.get(request);
            if (p === undefined) {
                this.failed(session, new ProtocolError(`the relay answered request ${request}, which is not pending`));
                return;
            }
            this.pending.delete(request);
            this.consumed += BigInt(size);
            this.reply(p, frame);
            this.pump();
            this.creditIfDue();
            return;
        }
        this.unsolicited(session, frame, size);
        this.creditIfDue();
    }
    reply(p, frame) {
        if (frame.kind === 'Error') {
            p.reject(new RelayError(frame.code, frame.message));
            return;
        }
        switch (p.frame.kind) {
            case 'Hello':
                if (frame.kind !== 'Welcome')
                    throw this.unexpected(frame, 'Welcome');
                this.welcome(frame);
                return;
            case 'Join':
                if (frame.kind !== 'Joined') {
                    p.reject(this.unexpected(frame, 'Joined'));
                    return;
                }
                this.joined(frame);
                p.resolve(frame);
                return;
            default:
                p.resolve(frame);
        }
    }
    welcome(f) {
        this.id = f.client;
        this.window = f.window;
        this.creditEvery = Math.max(1, Math.floor(f.window / 4));
        // The Welcome counts toward consumption but earns no Credit of its own.
        this.credited = this.consumed;
        this.attempt = 0;
        this.resumes = f.resume === true;
        this.startKeepalive();
        this.welcomed = true;
        if (!this.up) {
            this.ready();
            return;
        }
        // Re-join every group before anything else the application asked for
        // (a join asked for while disconnected is still waiting: not yet ours).
        const rejoining = [...this.groups.values()].filter((g) => g.transfer?.reason !== 'join');
        const session = this.session;
        let left = rejoining.length + 1;
        const one = () => {
            if (--left === 0 && session === this.session) {
                this.ready();
                this.emit({ type: 'reconnected', clientId: this.id }, 0);
            }
        };
        for (const g of rejoining)
            this.rejoin(g, one);
        one();
    }
    ready() {
        const first = !this.up;
        this.up = true;
        this.live = true;
        if (first)
            this.settleOpened.resolve();
        this.pump();
    }
    /**
     * Re-joins `g` after a reconnection, resuming after the last update the
     * application has where the relay resumes joins; `done` runs once its
     * transfer reached the head (or failed).
     */
    rejoin(g, done) {
        const t = transfer('rejoin', () => done());
        t.resumed = this.resumes;
        g.transfer = t;
        const frame = { kind: 'Join', group: g.name, role: g.opts.role, mode: g.opts.mode, watchMembership: g.opts.watchMembership };
        if (t.resumed)
            frame.resumeAfter = g.last;
        const id = this.takeId();
        this.pending.set(id, {
            frame,
            resolve: () => { },
            reject: (e) => {
                if (this.groups.get(g.name) === g && !(e instanceof ConnectionError)) {
                    this.groups.delete(g.name);
                    this.emit({ type: 'groupDeleted', group: g.name, error: e }, 0);
                }
                done();
            },
        });
        this.write(encodeFrame(id, frame));
    }
    /** A `Joined`: the reply to a join or rejoin, or the fresh state after a `Resync`. */
    joined(f) {
        const g = this.groups.get(f.group);
        if (g === undefined)
            return;
        const t = g.transfer ?? transfer('resync');
        g.transfer = t;
        t.info = { group: f.group, groupType: f.groupType, checkpointSeq: f.checkpointSeq, headSeq: f.headSeq, state: f.state, members: f.members };
        t.log = [];
        t.cursor = f.checkpointSeq;
        // A rejoin continues the application's copy only if the log still
        // holds everything after what it has, and nothing was lost before it.
        // A resumed one's checkpoint is what the application has (or the head
        // of a node that is behind it: what it re-sends up to there is
        // dropped); past it, the log was compacted and this is a new state.
        t.seamless =
            t.reason === 'rejoin' && f.checkpointSeq <= g.last && (t.resumed || g.last <= f.headSeq);
        this.transferProgress(g);
    }
    /** Finishes a transfer once it reached the head it announced. */
    transferProgress(g) {
        const t = g.transfer;
        if (t?.info === undefined)
            return;
        if ((t.seamless ? g.last : t.cursor) < t.info.headSeq)
            return;
        g.transfer = undefined;
        const state = { ...t.info, log: t.log };
        if (!t.seamless)
            g.last = t.cursor;
        switch (t.reason) {
            case 'join':
                t.done(state);
                break;
            case 'resync':
                this.emit({ type: 'state', reason: 'resync', ...state }, 0);
                break;
            case 'rejoin':
                if (t.seamless)
                    this.emit({ type: 'rejoined', group: g.name, members: state.members }, 0);
                else
                    this.emit({ type: 'state', reason: 'rejoin', ...state }, 0);
                t.done(state);
                break;
        }
    }
    /** A sequenced update: to a transfer's log, or to the application; duplicates dropped. */
    deliver(session, f, size) {
        const g = this.groups.get(f.group);
        const t = g?.transfer;
        if (g === undefined || (t !== undefined && t.info === undefined)) {
            // Not (or no longer) a member, or before the state it follows: consumed here.
            this.consumed += BigInt(size);
            return;
        }
        const collecting = t !== undefined && !t.seamless;
        const cursor = collecting ? t.cursor : g.last;
        if (f.seq <= cursor) {
            // Already seen (a rejoin's log replays what the application has).
            this.consumed += BigInt(size);
            return;
        }
        if (f.seq !== cursor + 1n) {
            this.failed(session, new ProtocolError(`group ${f.group}: update ${f.seq} after ${cursor} (a gap)`));
            return;
        }
        const { kind: _, ...u } = f;
        if (collecting) {
            t.cursor = f.seq;
            t.log.push(u);
            this.consumed += BigInt(size);
        }
        else {
            g.last = f.seq;
            this.emit({ type: 'deliver', ...u }, size);
        }
        this.transferProgress(g);
    }
    unsolicited(session, f, size) {
        switch (f.kind) {
            case 'Deliver':
                this.deliver(session, f, size);
                return;
            case 'Joined':
                this.consumed += BigInt(size);
                this.joined(f);
                return;
            case 'Resync': {
                this.consumed += BigInt(size);
                const g = this.groups.get(f.group);
                // Its queue was dropped; deliveries resume after the fresh `Joined`,
                // a plain state transfer. One under way (a join's, a rejoin's)
                // starts over, and still ends its join or rejoin.
                const t = g?.transfer;
                if (g !== undefined)
                    g.transfer = t === undefined ? transfer('resync') : transfer(t.reason, t.done, t.fail);
                return;
            }
            case 'Membership': {
                const { kind: _, ...m } = f;
                if (m.change === 'evicted' && m.client === this.id)
                    this.groups.delete(m.group);
                this.emit({ type: 'membership', ...m }, size);
                return;
            }
            case 'GroupDeleted':
                this.groups.get(f.group)?.transfer?.fail(new RelayError(6, `group ${f.group} was deleted during the join`));
                this.groups.delete(f.group);
                this.emit({ type: 'groupDeleted', group: f.group }, size);
                return;
            default:
                this.failed(session, new ProtocolError(`the relay sent ${f.kind} unasked`));
        }
    }
    /** The connection is gone: fail what was in flight, then reconnect or close. */
    failed(session, error) {
        if (session !== this.session || this.closed)
            return;
        this.session++; // ignore whatever the old socket still says
        this.live = false;
        this.welcomed = false;
        this.stopKeepalive();
        const ws = this.ws;
        this.ws = null;
        if (ws !== null) {
            ws.onopen = ws.onmessage = ws.onclose = ws.onerror = null;
            try {
                ws.close(1000);
            }
            catch {
                // Already closing.
            }
        }
        const lost = new ConnectionError(`connection lost before the reply: ${error.message}`, { cause: error });
        const joinsInFlight = new Set();
        for (const [, p] of this.pending) {
            if (p.frame.kind === 'Join')
                joinsInFlight.add(p.frame.group);
            p.reject(lost);
        }
        this.pending.clear();
        const policy = this.opts.reconnect ?? true;
        const limits = typeof policy === 'object' ? policy : {};
        const refused = error instanceof RelayError && NOT_RETRIED.has(error.code);
        // Before the first session each URL is tried once; after it, the reconnect policy decides.
        const retry = !refused &&
            (this.up
                ? policy !== false && this.attempt < (limits.attempts ?? Infinity)
                : this.attempt < this.urls.length - 1);
        if (retry && this.up && this.attempt === 0)
            this.emit({ type: 'disconnected', error }, 0);
        for (const g of this.groups.values()) {
            for (const lock of g.locks)
                this.emit({ type: 'lockLost', group: g.name, lock }, 0);
            g.locks.clear();
            // A join sent but not finished fails (one still waiting to be sent goes out after the reconnection).
            if (g.transfer?.reason === 'join' && (joinsInFlight.has(g.name) || g.transfer.info !== undefined)) {
                // A join that had not finished fails; the application joins again if it wants.
                g.transfer.fail(lost);
                this.groups.delete(g.name);
            }
        }
        if (!retry) {
            if (!this.up)
                this.settleOpened.reject(error);
            this.shutdown(error);
            return;
        }
        const min = limits.minDelayMs ?? 100;
        const delay = Math.min(limits.maxDelayMs ?? 5000, min * 2 ** Math.min(this.attempt, 16));
        this.attempt++;
        // The next attempt goes to the next URL (the same one, if there is one).
        this.urlIndex = (this.urlIndex + 1) % this.urls.length;
        this.retryTimer = setTimeout(() => {
            this.retryTimer = null;
            if (!this.closed)
                this.open();
        }, delay);
    }
    shutdown(error) {
        if (this.closed)
            return;
        this.closed = true;
        this.closeError = error;
        this.session++;
        this.stopKeepalive();
        if (this.retryTimer !== null)
            clearTimeout(this.retryTimer);
        const ws = this.ws;
        this.ws = null;
        if (ws !== null) {
            ws.onopen = ws.onmessage = ws.onclose = ws.onerror = null;
            try {
                ws.close(1000);
            }
            catch {
                // Already closing.
            }
        }
        const gone = new ConnectionError(error ? `client closed: ${error.message}` : 'client closed', { cause: error });
        if (!this.up)
            this.settleOpened.reject(gone);
        for (const [, p] of this.pending)
            p.reject(gone);
        this.pending.clear();
        for (const p of this.waiting)
            p.reject(gone);
        this.waiting = [];
        this.emit(error ? { type: 'closed', error } : { type: 'closed' }, 0);
        this.wake?.();
    }
    // ---- requests ------------------------------------------------------
    request(frame) {
        if (this.closed) {
            return Promise.reject(new ConnectionError('client closed', { cause: this.closeError }));
        }
        // Encoded now, so a field that does not fit fails this call at once.
        encodeFrame(0, frame);
        return new Promise((resolve, reject) => {
            this.waiting.push({ frame, resolve, reject });
            this.pump();
        });
    }
    /** Writes waiting requests while the session is up and in-flight room lasts. */
    pump() {
        while (this.live && this.ws !== null && this.ws.readyState === OPEN && this.pending.size < this.maxInFlight) {
            const p = this.waiting.shift();
            if (p === undefined)
                return;
            const id = this.takeId();
            this.pending.set(id, p);
            this.write(encodeFrame(id, p.frame));
        }
    }
    takeId() {
        const id = this.nextRequest;
        this.nextRequest = this.nextRequest >= 0xffffffff ? 1 : this.nextRequest + 1;
        return id;
    }
    write(b) {
        try {
            this.ws?.send(b);
        }
        catch (e) {
            this.failed(this.session, new ConnectionError(`write failed: ${String(e)}`, { cause: e }));
        }
    }
    unexpected(f, want) {
        return new ProtocolError(`the relay answered ${f.kind} where ${want} was due`);
    }
    // ---- events and credit ----------------------------------------------
    /**
     * Hands an event to the callbacks (at once) and to the iterator (queued);
     * with neither, it waits in the queue. Its bytes are credited once every
     * consumer that exists has taken it.
     */
    emit(event, size) {
        const q = { event, bytes: size, session: this.session, called: false };
        if (this.hasListeners()) {
            // Events that waited for a callback go first, in order.
            this.drainToCallbacks();
            this.call(event);
            q.called = true;
        }
        if (this.iterating > 0 || !q.called) {
            this.queue.push(q);
            const w = this.wake;
            this.wake = null;
            w?.();
            return;
        }
        this.consume(q);
    }
    hasListeners() {
        for (const set of this.listeners.values())
            if (set.size > 0)
                return true;
        return false;
    }
    /** With callbacks and no iterator, events that waited go to the callbacks. */
    drainToCallbacks() {
        if (this.iterating > 0 || !this.hasListeners())
            return;
        for (let q = this.queue.shift(); q !== undefined; q = this.queue.shift()) {
            if (!q.called)
                this.call(q.event);
            this.consume(q);
        }
    }
    call(e) {
        for (const key of [e.type, '*']) {
            const set = this.listeners.get(key);
            if (set === undefined)
                continue;
            for (const cb of [...set]) {
                try {
                    cb(e);
                }
                catch (err) {
                    // The application's error, not the connection's: report it apart.
                    queueMicrotask(() => {
                        throw err;
                    });
                }
            }
        }
    }
    /** The application took an event: its bytes count as consumed. */
    consume(q) {
        if (q.bytes === 0 || q.session !== this.session)
            return;
        this.consumed += BigInt(q.bytes);
        this.creditIfDue();
    }
    creditIfDue() {
        if (!this.welcomed || this.ws === null || this.consumed - this.credited < BigInt(this.creditEvery))
            return;
        this.credited = this.consumed;
        this.write(encodeFrame(0, { kind: 'Credit', consumed: this.consumed }));
    }
    startKeepalive() {
        this.stopKeepalive();
        const every = this.opts.keepaliveMs ?? DEFAULT_KEEPALIVE_MS;
        this.keepalive = setInterval(() => {
            if (this.ws !== null && this.ws.readyState === OPEN) {
                const id = this.takeId();
                const ping = { kind: 'Ping', nonce: BigInt(id) };
                this.pending.set(id, { frame: ping, resolve: () => { }, reject: () => { } });
                this.write(encodeFrame(id, ping));
            }
        }, every);
    }
    stopKeepalive() {
        if (this.keepalive !== null)
            clearInterval(this.keepalive);
        this.keepalive = null;
    }
}
function transfer(reason, done = () => { }, fail = () => { }) {
    return { reason, resumed: false, seamless: false, cursor: 0n, log: [], done, fail };
}
/** UTF-8 for strings; bytes as they are. */
function bytes(b) {
    return typeof b === 'string' ? new TextEncoder().encode(b) : b;
}
function nowMicros() {
    const p = globalThis.performance;
    const ms = p !== undefined ? p.timeOrigin + p.now() : Date.now();
    return BigInt(Math.round(ms * 1000));
}
/** Tokens in clear only to loopback (docs/relay-protocol.md, "Tokens in clear"). */
function checkPlaintextToken(url, opts) {
    if (!opts.token || opts.allowPlaintextToken)
        return;
    let u;
    try {
        u = new URL(url);
    }
    catch {
        throw new TypeError(`not a URL: ${url} (ws://host:port/ or wss://host:port/)`);
    }
    if (u.protocol === 'wss:')
        return;
    const h = u.hostname.replace(/^\[|\]$/g, '');
    if (h === 'localhost' || h === '::1' || /^127\./.test(h))
        return;
    throw new TypeError(`refusing to send a token in clear to ${u.host}: use wss://, or allowPlaintextToken: true if you accept that anyone on the path can read and replay it`);
}
