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
} as const;

/** A known error code's name; `'unknown'` for a code this library predates. */
export type ErrorCodeName = keyof typeof ErrorCode | 'unknown';

/** Codes after which the relay closes the connection. */
const FATAL: ReadonlySet<number> = new Set([1, 2, 3, 4, 14, 16, 19, 20]);

const NAMES = new Map<number, ErrorCodeName>(
  Object.entries(ErrorCode).map(([k, v]) => [v, k as ErrorCodeName]),
);

/** The name of a numeric error code. */
export function errorCodeName(code: number): ErrorCodeName {
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
  override readonly name = 'RelayError';
  /** The code's name, e.g. `'lock-busy'`. */
  readonly code: ErrorCodeName;
  /** The code's number on the wire. */
  readonly codeNumber: number;
  /** Whether the relay closes the connection after it. */
  readonly fatal: boolean;
  /** The relay's message. */
  readonly detail: string;

  constructor(codeNumber: number, detail: string) {
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
  override readonly name = 'ConnectionError';
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

/**
 * The relay sent something this client cannot accept: a frame that does
 * not decode, one above the client's cap, a reply to no request. The
 * connection is closed with it.
 */
export class ProtocolError extends Error {
  override readonly name = 'ProtocolError';
}
