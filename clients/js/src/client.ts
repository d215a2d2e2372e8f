/**
 * The relay client: one WebSocket session at a time, requests matched to
 * replies by id, the relay's send window returned as the application
 * consumes what arrived, and reconnection (to the next of its relay URLs)
 * that re-joins every group, resuming after the last update handed over
 * where the relay can, and hides what the application already saw.
 *
 * @module
 */

import { ConnectionError, ProtocolError, RelayError } from './errors.js';
import {
  decodeFrame,
  encodeFrame,
  FrameError,
  VERSION,
  type Frame,
  type MemberInfo,
  type MembershipNotice,
  type Mode,
  type Role,
  type Update,
} from './frame.js';

/** The part of the WebSocket API this client uses (browsers' and `ws`'s). */
export interface WebSocketLike {
  binaryType: string;
  readonly readyState: number;
  send(data: Uint8Array): void;
  close(code?: number, reason?: string): void;
  onopen: ((ev: unknown) => void) | null;
  onmessage: ((ev: { data: unknown }) => void) | null;
  onclose: ((ev: { code: number; reason: string }) => void) | null;
  onerror: ((ev: unknown) => void) | null;
}

/** A WebSocket constructor: `globalThis.WebSocket`, or `ws`'s in Node 20. */
export type WebSocketConstructor = new (url: string) => WebSocketLike;

/** How to reconnect after the connection fails. */
export interface ReconnectOptions {
  /** Attempts before giving up (default: unlimited). */
  attempts?: number;
  /** First delay between attempts, doubled each time (default 100 ms). */
  minDelayMs?: number;
  /** Longest delay between attempts (default 5000 ms). */
  maxDelayMs?: number;
}

/** Options of {@link connect}. */
export interface ConnectOptions {
  /** Your name as other members see it (at most 255 bytes of UTF-8). */
  name?: string;
  /** A token, for a relay started with `--auth-secret-file`. */
  token?: string;
  /** The WebSocket constructor (default: `globalThis.WebSocket`). */
  WebSocket?: WebSocketConstructor;
  /** The send window to ask for, in bytes (default 0: the relay's, 256 KiB). */
  window?: number;
  /** Largest frame accepted from the relay (default 16 MiB). */
  maxIncomingFrame?: number;
  /**
   * Reconnect (to the next URL, see {@link connect}) and re-join after a
   * failure (default on); `false` to close instead. The first connection
   * tries every URL once either way.
   */
  reconnect?: boolean | ReconnectOptions;
  /** Send a token over `ws://` to a host that is not loopback (default false). */
  allowPlaintextToken?: boolean;
  /** Ping the relay this often, so its idle timeout never fires (default 60 s). */
  keepaliveMs?: number;
  /** Requests written but unanswered at most; more wait here (default 1024). */
  maxInFlight?: number;
}

/** Options of {@link Client.create}. */
export interface CreateOptions {
  /** Initial shared state (the checkpoint at sequence 0). */
  state?: Uint8Array | string;
  /** Application-defined group type, e.g. `"whiteboard"`. */
  type?: string;
  /** Default priority 0..7 (default 4). */
  priority?: number;
}

/** Options of {@link Client.join}. */
export interface JoinOptions {
  /** Default `'principal'`. */
  role?: Role;
  /** Default `'active'`. */
  mode?: Mode;
  /** Receive membership notices about other members (default true). */
  watchMembership?: boolean;
}

/** Options of {@link Client.send}. */
export interface SendOptions {
  /** Application message type, 0..65535 (default 0). */
  type?: number;
  /** Sender timestamp in microseconds (default: now, from `performance`). */
  sentAtMicros?: bigint;
}

/** A group's state as a join (or a state transfer) hands it over. */
export interface GroupState {
  group: string;
  groupType: string;
  /** The checkpoint's sequence number: `state` includes updates up to it. */
  checkpointSeq: bigint;
  /** The last sequence when the join took effect; `log` ends there. */
  headSeq: bigint;
  /** The checkpoint. */
  state: Uint8Array;
  /** Updates `checkpointSeq + 1 ..= headSeq`, in order. */
  log: Update[];
  /** Members when the join took effect, yourself included. */
  members: MemberInfo[];
}

/** What the client hands the application, by `type`. */
export type ClientEvent =
  /** A live update, after those in the join's `log`: never a duplicate, never a gap. */
  | ({ type: 'deliver' } & Update)
  /** Another member joined, left, changed role or mode, or was evicted (yourself too, for an eviction). */
  | ({ type: 'membership' } & MembershipNotice)
  /**
   * Replace your copy of the group's state: the relay resynchronized you
   * (`reason: 'resync'`), or after a reconnection the log no longer held
   * the updates you missed (`reason: 'rejoin'`). Deliveries continue after `headSeq`.
   */
  | ({ type: 'state'; reason: 'resync' | 'rejoin' } & GroupState)
  /** After a reconnection, the group's members now; updates continue without a gap. */
  | { type: 'rejoined'; group: string; members: MemberInfo[] }
  /** The group was deleted (or could not be re-joined): you are no longer a member. */
  | { type: 'groupDeleted'; group: string; error?: Error }
  /** A lock you held was released because the connection failed. */
  | { type: 'lockLost'; group: string; lock: string }
  /** The connection failed; the client is reconnecting. */
  | { type: 'disconnected'; error: Error }
  /** Connected again: every group re-joined and caught up (after its `rejoined` or `state` event); requests made meanwhile go out now. */
  | { type: 'reconnected'; clientId: bigint }
  /** The client is closed for good (by `close()`, or a failure it does not retry). */
  | { type: 'closed'; error?: Error };

/** The `type` of a {@link ClientEvent}. */
export type ClientEventType = ClientEvent['type'];
/** The event of one type. */
export type EventOf<T extends ClientEventType> = Extract<ClientEvent, { type: T }>;

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
export async function connect(urls: string | readonly string[], opts: ConnectOptions = {}): Promise<Client> {
  const client = new Client(urls, opts);
  await client.opened;
  return client;
}

interface Pending {
  frame: Frame;
  resolve: (f: Frame) => void;
  reject: (e: Error) => void;
}

/** A state transfer under way: a join's, a resync's, or a rejoin's after a reconnection. */
interface Transfer {
  reason: 'join' | 'resync' | 'rejoin';
  /** From the `Joined`; undefined until it arrives (deliveries before it are not ours). */
  info?: Omit<GroupState, 'log'>;
  /** A rejoin that asked the relay to resume (`Join.resumeAfter`): its `Joined` holds no state when seamless. */
  resumed: boolean;
  /**
   * Whether the relay's log continues what the application has (a rejoin
   * whose checkpoint is not past it): then updates go straight to the
   * application and no new state is handed over.
   */
  seamless: boolean;
  /** The last sequence taken into `log` (when not seamless). */
  cursor: bigint;
  log: Update[];
  done: (s: GroupState) => void;
  fail: (e: Error) => void;
}

interface Joined {
  name: string;
  opts: Required<JoinOptions>;
  /** The last sequence the application has (in a state it was handed, or delivered). */
  last: bigint;
  transfer?: Transfer | undefined;
  locks: Set<string>;
}

interface Queued {
  event: ClientEvent;
  /** Callbacks have seen it. */
  called: boolean;
  /** Frame bytes to credit once the application takes the event. */
  bytes: number;
  session: number;
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
  readonly opened: Promise<void>;
  private readonly urls: readonly string[];
  /** The URL of the current connection (or of the next attempt). */
  private urlIndex = 0;
  private readonly opts: ConnectOptions;
  private readonly WS: WebSocketConstructor;
  private readonly maxIncoming: number;
  private readonly maxInFlight: number;
  private ws: WebSocketLike | null = null;
  /** Bumped per connection, so stale sockets and credits are ignored. */
  private session = 0;
  /** A session was up once: failures from now on are retried. */
  private up = false;
  /** This session has its `Welcome` and has re-joined every group. */
  private live = false;
  /** This session has its `Welcome`. */
  private welcomed = false;
  /** This session's `Welcome` said the relay resumes joins (flag 0x0001). */
  private resumes = false;
  private closed = false;
  private closeError: Error | undefined;
  private id = 0n;
  private window = 0;
  private creditEvery = 1;
  private receivedBytes = 0n;
  private consumed = 0n;
  private credited = 0n;
  private nextRequest = 1;
  private pending = new Map<number, Pending>();
  /** Requests waiting for the session to come up or for room in flight. */
  private waiting: Pending[] = [];
  private groups = new Map<string, Joined>();
  private listeners = new Map<string, Set<(e: ClientEvent) => void>>();
  private queue: Queued[] = [];
  private iterating = 0;
  private wake: (() => void) | null = null;
  private keepalive: ReturnType<typeof setInterval> | null = null;
  private retryTimer: ReturnType<typeof setTimeout> | null = null;
  private attempt = 0;
  private settleOpened!: { resolve: () => void; reject: (e: Error) => void };

  /** Use {@link connect}. */
  constructor(urls: string | readonly string[], opts: ConnectOptions = {}) {
    this.urls = typeof urls === 'string' ? [urls] : [...urls];
    if (this.urls.length === 0) throw new TypeError('no relay URL: connect(url) or connect([url, ...])');
    this.opts = opts;
    const WS = opts.WebSocket ?? (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket;
    if (WS === undefined) {
      throw new TypeError('no WebSocket: pass connect(url, { WebSocket }) (e.g. the `ws` package in Node 20)');
    }
    this.WS = WS;
    this.maxIncoming = opts.maxIncomingFrame ?? DEFAULT_MAX_INCOMING;
    this.maxInFlight = opts.maxInFlight ?? DEFAULT_MAX_IN_FLIGHT;
    for (const url of this.urls) checkPlaintextToken(url, opts);
    // Checked here, so a bad name is the caller's error, not a failed connection.
    encodeFrame(0, { kind: 'Hello', maxVersion: VERSION, window: opts.window ?? 0, token: opts.token ?? '', name: opts.name ?? '' });
    this.opened = new Promise((resolve, reject) => {
      this.settleOpened = { resolve, reject };
    });
    // Awaiting `opened` (as connect() does) still sees the rejection; a
    // client made with `new` and never awaited must not crash Node with it.
    this.opened.catch(() => {});
    this.open();
  }

  /** This client's id in member lists and deliveries (changes on reconnection). */
  get clientId(): bigint {
    return this.id;
  }

  /** The relay URL of the current connection (or of the next attempt, while reconnecting). */
  get url(): string {
    return this.urls[this.urlIndex] as string;
  }

  /** The send window the relay granted, in bytes. */
  get grantedWindow(): number {
    return this.window;
  }

  /**
   * Byte counts of the current connection: frames received from the
   * relay, bytes consumed (handed over, and so credited back), and events
   * waiting for the application. `receivedBytes - consumedBytes` never
   * exceeds the window by more than one frame.
   */
  stats(): { receivedBytes: bigint; consumedBytes: bigint; queuedEvents: number } {
    return { receivedBytes: this.receivedBytes, consumedBytes: this.consumed, queuedEvents: this.queue.length };
  }

  /** Creates a group; the creator is not a member until it joins. */
  async create(group: string, opts: CreateOptions = {}): Promise<void> {
    await this.request({
      kind: 'CreateGroup',
      group,
      groupType: opts.type ?? '',
      priority: opts.priority ?? 4,
      initialState: bytes(opts.state ?? new Uint8Array()),
    });
  }

  /** Deletes a group with its log and checkpoints. */
  async deleteGroup(group: string): Promise<void> {
    await this.request({ kind: 'DeleteGroup', group });
  }

  /**
   * Joins a group and resolves with its state: the latest checkpoint and
   * every update after it up to the join (`log`). Live updates follow as
   * `deliver` events, starting right after `headSeq`.
   */
  async join(group: string, opts: JoinOptions = {}): Promise<GroupState> {
    if (this.groups.has(group)) throw new RelayError(9, `already joined ${group} (on this client)`);
    const full: Required<JoinOptions> = {
      role: opts.role ?? 'principal',
      mode: opts.mode ?? 'active',
      watchMembership: opts.watchMembership ?? true,
    };
    const g: Joined = { name: group, opts: full, last: 0n, locks: new Set() };
    this.groups.set(group, g);
    const state = new Promise<GroupState>((done, fail) => {
      g.transfer = transfer('join', done, fail);
    });
    // Rejected together with the request when the connection fails; the request's error is the one thrown.
    state.catch(() => {});
    try {
      await this.request({ kind: 'Join', group, role: full.role, mode: full.mode, watchMembership: full.watchMembership });
    } catch (e) {
      if (this.groups.get(group) === g) this.groups.delete(group);
      throw e;
    }
    return state;
  }

  /** Leaves a group (releasing your locks in it). */
  async leave(group: string): Promise<void> {
    const g = this.groups.get(group);
    await this.request({ kind: 'Leave', group });
    if (g !== undefined && this.groups.get(group) === g) this.groups.delete(group);
  }

  /**
   * Multicasts an update to a group (principals only) and resolves with
   * its sequence number once the relay has sequenced and stored it.
   */
  async send(group: string, payload: Uint8Array | string, opts: SendOptions = {}): Promise<bigint> {
    const f = await this.request({
      kind: 'Send',
      group,
      msgType: opts.type ?? 0,
      sentAtMicros: opts.sentAtMicros ?? nowMicros(),
      payload: bytes(payload),
    });
    if (f.kind !== 'Sent') throw this.unexpected(f, 'Sent');
    return f.seq;
  }

  /** Stores `state` as the group's state after every update up to `seq`. */
  async checkpoint(group: string, seq: bigint, state: Uint8Array | string): Promise<void> {
    await this.request({ kind: 'Checkpoint', group, seq, state: bytes(state) });
  }

  /** Acquires a lock, waiting (FIFO) while another member holds it. */
  async lock(group: string, lock: string): Promise<void> {
    await this.request({ kind: 'LockAcquire', group, lock, wait: true });
    this.groups.get(group)?.locks.add(lock);
  }

  /** Acquires a lock if it is free: `true` if granted, `false` if held by someone else. */
  async tryLock(group: string, lock: string): Promise<boolean> {
    try {
      await this.request({ kind: 'LockAcquire', group, lock, wait: false });
    } catch (e) {
      if (e instanceof RelayError && e.code === 'lock-busy') return false;
      throw e;
    }
    this.groups.get(group)?.locks.add(lock);
    return true;
  }

  /** Releases a lock you hold. */
  async unlock(group: string, lock: string): Promise<void> {
    this.groups.get(group)?.locks.delete(lock);
    await this.request({ kind: 'LockRelease', group, lock });
  }

  /** Changes your role in a group. */
  async changeRole(group: string, role: Role): Promise<void> {
    await this.request({ kind: 'ChangeRole', group, role });
    const g = this.groups.get(group);
    if (g !== undefined) g.opts.role = role;
  }

  /** Changes your activity mode in a group. */
  async changeMode(group: string, mode: Mode): Promise<void> {
    await this.request({ kind: 'ChangeMode', group, mode });
    const g = this.groups.get(group);
    if (g !== undefined) g.opts.mode = mode;
  }

  /** Changes a group's default priority (0..7). */
  async setPriority(group: string, priority: number): Promise<void> {
    await this.request({ kind: 'SetPriority', group, priority });
  }

  /** Round trip to the relay. */
  async ping(): Promise<void> {
    await this.request({ kind: 'Ping', nonce: BigInt(this.nextRequest) });
  }

  /**
   * Calls `cb` for every event of `type` (`'*'`: every event). Returns a
   * function that removes it.
   */
  on<T extends ClientEventType>(type: T, cb: (e: EventOf<T>) => void): () => void;
  on(type: '*', cb: (e: ClientEvent) => void): () => void;
  on(type: string, cb: (e: never) => void): () => void {
    let set = this.listeners.get(type);
    if (set === undefined) {
      set = new Set();
      this.listeners.set(type, set);
    }
    const f = cb as (e: ClientEvent) => void;
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
  events(): AsyncIterableIterator<ClientEvent> {
    this.iterating++;
    let finished = false;
    const finish = (): IteratorResult<ClientEvent> => {
      if (!finished) {
        finished = true;
        this.iterating--;
      }
      return { value: undefined, done: true };
    };
    const it: AsyncIterableIterator<ClientEvent> = {
      next: async (): Promise<IteratorResult<ClientEvent>> => {
        for (;;) {
          if (finished) return finish();
          const q = this.queue.shift();
          if (q !== undefined) {
            this.consume(q);
            return { value: q.event, done: false };
          }
          if (this.closed) return finish();
          await new Promise<void>((r) => {
            this.wake = r;
          });
        }
      },
      return: async (): Promise<IteratorResult<ClientEvent>> => {
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
  close(): void {
    this.shutdown(undefined);
  }

  // ---- the session ---------------------------------------------------

  private open(): void {
    const session = ++this.session;
    const url = this.url;
    let ws: WebSocketLike;
    try {
      ws = new this.WS(url);
    } catch (e) {
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
      if (session !== this.session) return;
      const hello: Frame = {
        kind: 'Hello',
        maxVersion: VERSION,
        window: this.opts.window ?? 0,
        token: this.opts.token ?? '',
        name: this.opts.name ?? '',
      };
      this.pending.set(this.takeId(), { frame: hello, resolve: () => {}, reject: () => {} });
      this.write(encodeFrame(this.nextRequest - 1, hello));
    };
    ws.onmessage = (ev) => {
      if (session !== this.session) return;
      try {
        this.received(session, ev.data);
      } catch (e) {
        // Our own bug, not the relay's: still never let it escape into the socket's handler.
        this.failed(session, new ProtocolError(`client error while reading a frame: ${String(e)}`));
      }
    };
    ws.onerror = () => {
      // The close event follows with the details we can know.
    };
    ws.onclose = (ev) => {
      if (session !== this.session) return;
      const why = ev.reason ? `${ev.code} ${ev.reason}` : `code ${ev.code}`;
      this.failed(session, new ConnectionError(`connection to ${url} closed (${why})`));
    };
  }

  private received(session: number, data: unknown): void {
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
      if (!this.up) this.settleOpened.reject(err);
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

  private reply(p: Pending, frame: Frame): void {
    if (frame.kind === 'Error') {
      p.reject(new RelayError(frame.code, frame.message));
      return;
    }
    switch (p.frame.kind) {
      case 'Hello':
        if (frame.kind !== 'Welcome') throw this.unexpected(frame, 'Welcome');
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

  private welcome(f: Extract<Frame, { kind: 'Welcome' }>): void {
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
    for (const g of rejoining) this.rejoin(g, one);
    one();
  }

  private ready(): void {
    const first = !this.up;
    this.up = true;
    this.live = true;
    if (first) this.settleOpened.resolve();
    this.pump();
  }

  /**
   * Re-joins `g` after a reconnection, resuming after the last update the
   * application has where the relay resumes joins; `done` runs once its
   * transfer reached the head (or failed).
   */
  private rejoin(g: Joined, done: () => void): void {
    const t = transfer('rejoin', () => done());
    t.resumed = this.resumes;
    g.transfer = t;
    const frame: Frame = { kind: 'Join', group: g.name, role: g.opts.role, mode: g.opts.mode, watchMembership: g.opts.watchMembership };
    if (t.resumed) frame.resumeAfter = g.last;
    const id = this.takeId();
    this.pending.set(id, {
      frame,
      resolve: () => {},
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
  private joined(f: Extract<Frame, { kind: 'Joined' }>): void {
    const g = this.groups.get(f.group);
    if (g === undefined) return;
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
  private transferProgress(g: Joined): void {
    const t = g.transfer;
    if (t?.info === undefined) return;
    if ((t.seamless ? g.last : t.cursor) < t.info.headSeq) return;
    g.transfer = undefined;
    const state: GroupState = { ...t.info, log: t.log };
    if (!t.seamless) g.last = t.cursor;
    switch (t.reason) {
      case 'join':
        t.done(state);
        break;
      case 'resync':
        this.emit({ type: 'state', reason: 'resync', ...state }, 0);
        break;
      case 'rejoin':
        if (t.seamless) this.emit({ type: 'rejoined', group: g.name, members: state.members }, 0);
        else this.emit({ type: 'state', reason: 'rejoin', ...state }, 0);
        t.done(state);
        break;
    }
  }

  /** A sequenced update: to a transfer's log, or to the application; duplicates dropped. */
  private deliver(session: number, f: Extract<Frame, { kind: 'Deliver' }>, size: number): void {
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
    } else {
      g.last = f.seq;
      this.emit({ type: 'deliver', ...u }, size);
    }
    this.transferProgress(g);
  }

  private unsolicited(session: number, f: Frame, size: number): void {
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
        if (g !== undefined) g.transfer = t === undefined ? transfer('resync') : transfer(t.reason, t.done, t.fail);
        return;
      }
      case 'Membership': {
        const { kind: _, ...m } = f;
        if (m.change === 'evicted' && m.client === this.id) this.groups.delete(m.group);
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
  private failed(session: number, error: Error): void {
    if (session !== this.session || this.closed) return;
    this.session++; // ignore whatever the old socket still says
    this.live = false;
    this.welcomed = false;
    this.stopKeepalive();
    this.detachSocket();
    const lost = new ConnectionError(`connection lost before the reply: ${error.message}`, { cause: error });
    const joinsInFlight = new Set<string>();
    for (const [, p] of this.pending) {
      if (p.frame.kind === 'Join') joinsInFlight.add(p.frame.group);
      p.reject(lost);
    }
    this.pending.clear();
    const policy = this.opts.reconnect ?? true;
    const limits: ReconnectOptions = typeof policy === 'object' ? policy : {};
    const refused = error instanceof RelayError && NOT_RETRIED.has(error.code);
    // Before the first session each URL is tried once; after it, the reconnect policy decides.
    const retry =
      !refused &&
      (this.up
        ? policy !== false && this.attempt < (limits.attempts ?? Infinity)
        : this.attempt < this.urls.length - 1);
    if (retry && this.up && this.attempt === 0) this.emit({ type: 'disconnected', error }, 0);
    for (const g of this.groups.values()) {
      for (const lock of g.locks) this.emit({ type: 'lockLost', group: g.name, lock }, 0);
      g.locks.clear();
      // A join sent but not finished fails (one still waiting to be sent goes out after the reconnection).
      if (g.transfer?.reason === 'join' && (joinsInFlight.has(g.name) || g.transfer.info !== undefined)) {
        // A join that had not finished fails; the application joins again if it wants.
        g.transfer.fail(lost);
        this.groups.delete(g.name);
      }
    }
    if (!retry) {
      if (!this.up) this.settleOpened.reject(error);
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
      if (!this.closed) this.open();
    }, delay);
  }

  /** Closes the current socket, if any, after silencing its handlers (nothing it still says is read). */
  private detachSocket(): void {
    const ws = this.ws;
    this.ws = null;
    if (ws === null) return;
    ws.onopen = ws.onmessage = ws.onclose = ws.onerror = null;
    try {
      ws.close(1000);
    } catch {
      // Already closing.
    }
  }

  private shutdown(error: Error | undefined): void {
    if (this.closed) return;
    this.closed = true;
    this.closeError = error;
    this.session++;
    this.stopKeepalive();
    if (this.retryTimer !== null) clearTimeout(this.retryTimer);
    this.detachSocket();
    const gone = new ConnectionError(error ? `client closed: ${error.message}` : 'client closed', { cause: error });
    if (!this.up) this.settleOpened.reject(gone);
    for (const [, p] of this.pending) p.reject(gone);
    this.pending.clear();
    for (const p of this.waiting) p.reject(gone);
    this.waiting = [];
    this.emit(error ? { type: 'closed', error } : { type: 'closed' }, 0);
    this.wake?.();
  }

  // ---- requests ------------------------------------------------------

  private request(frame: Frame): Promise<Frame> {
    if (this.closed) {
      return Promise.reject(new ConnectionError('client closed', { cause: this.closeError }));
    }
    // Encoded now, so a field that does not fit fails this call at once.
    encodeFrame(0, frame);
    return new Promise<Frame>((resolve, reject) => {
      this.waiting.push({ frame, resolve, reject });
      this.pump();
    });
  }

  /** Writes waiting requests while the session is up and in-flight room lasts. */
  private pump(): void {
    while (this.live && this.ws !== null && this.ws.readyState === OPEN && this.pending.size < this.maxInFlight) {
      const p = this.waiting.shift();
      if (p === undefined) return;
      const id = this.takeId();
      this.pending.set(id, p);
      this.write(encodeFrame(id, p.frame));
    }
  }

  private takeId(): number {
    const id = this.nextRequest;
    this.nextRequest = this.nextRequest >= 0xffffffff ? 1 : this.nextRequest + 1;
    return id;
  }

  private write(b: Uint8Array): void {
    try {
      this.ws?.send(b);
    } catch (e) {
      this.failed(this.session, new ConnectionError(`write failed: ${String(e)}`, { cause: e }));
    }
  }

  private unexpected(f: Frame, want: string): ProtocolError {
    return new ProtocolError(`the relay answered ${f.kind} where ${want} was due`);
  }

  // ---- events and credit ----------------------------------------------

  /**
   * Hands an event to the callbacks (at once) and to the iterator (queued);
   * with neither, it waits in the queue. Its bytes are credited once every
   * consumer that exists has taken it.
   */
  private emit(event: ClientEvent, size: number): void {
    const q: Queued = { event, bytes: size, session: this.session, called: false };
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

  private hasListeners(): boolean {
    for (const set of this.listeners.values()) if (set.size > 0) return true;
    return false;
  }

  /** With callbacks and no iterator, events that waited go to the callbacks. */
  private drainToCallbacks(): void {
    if (this.iterating > 0 || !this.hasListeners()) return;
    for (let q = this.queue.shift(); q !== undefined; q = this.queue.shift()) {
      if (!q.called) this.call(q.event);
      this.consume(q);
    }
  }

  private call(e: ClientEvent): void {
    for (const key of [e.type, '*']) {
      const set = this.listeners.get(key);
      if (set === undefined) continue;
      for (const cb of [...set]) {
        try {
          cb(e);
        } catch (err) {
          // The application's error, not the connection's: report it apart.
          queueMicrotask(() => {
            throw err;
          });
        }
      }
    }
  }

  /** The application took an event: its bytes count as consumed. */
  private consume(q: Queued): void {
    if (q.bytes === 0 || q.session !== this.session) return;
    this.consumed += BigInt(q.bytes);
    this.creditIfDue();
  }

  private creditIfDue(): void {
    if (!this.welcomed || this.ws === null || this.consumed - this.credited < BigInt(this.creditEvery)) return;
    this.credited = this.consumed;
    this.write(encodeFrame(0, { kind: 'Credit', consumed: this.consumed }));
  }

  private startKeepalive(): void {
    this.stopKeepalive();
    const every = this.opts.keepaliveMs ?? DEFAULT_KEEPALIVE_MS;
    this.keepalive = setInterval(() => {
      if (this.ws !== null && this.ws.readyState === OPEN) {
        const id = this.takeId();
        const ping: Frame = { kind: 'Ping', nonce: BigInt(id) };
        this.pending.set(id, { frame: ping, resolve: () => {}, reject: () => {} });
        this.write(encodeFrame(id, ping));
      }
    }, every);
  }

  private stopKeepalive(): void {
    if (this.keepalive !== null) clearInterval(this.keepalive);
    this.keepalive = null;
  }
}

function transfer(
  reason: Transfer['reason'],
  done: (s: GroupState) => void = () => {},
  fail: (e: Error) => void = () => {},
): Transfer {
  return { reason, resumed: false, seamless: false, cursor: 0n, log: [], done, fail };
}

/** UTF-8 for strings; bytes as they are. */
function bytes(b: Uint8Array | string): Uint8Array {
  return typeof b === 'string' ? new TextEncoder().encode(b) : b;
}

function nowMicros(): bigint {
  const p = (globalThis as { performance?: { timeOrigin: number; now(): number } }).performance;
  const ms = p !== undefined ? p.timeOrigin + p.now() : Date.now();
  return BigInt(Math.round(ms * 1000));
}

/** Tokens in clear only to loopback (docs/relay-protocol.md, "Tokens in clear"). */
function checkPlaintextToken(url: string, opts: ConnectOptions): void {
  if (!opts.token || opts.allowPlaintextToken) return;
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new TypeError(`not a URL: ${url} (ws://host:port/ or wss://host:port/)`);
  }
  if (u.protocol === 'wss:') return;
  const h = u.hostname.replace(/^\[|\]$/g, '');
  if (h === 'localhost' || h === '::1' || /^127\./.test(h)) return;
  throw new TypeError(
    `refusing to send a token in clear to ${u.host}: use wss://, or allowPlaintextToken: true if you accept that anyone on the path can read and replay it`,
  );
}
