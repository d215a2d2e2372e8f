/**
 * groupwire: a client for the groupwire relay (Corona-style group
 * communication: shared state, totally ordered multicast, locks,
 * checkpoints) over WebSocket, for browsers and Node.
 *
 * ```ts
 * import { connect } from 'groupwire';
 * const c = await connect('ws://127.0.0.1:7601/', { name: 'alice' });
 * const { state, log } = await c.join('board');
 * c.on('deliver', (u) => console.log(u.seq, new TextDecoder().decode(u.payload)));
 * await c.send('board', 'hello');
 * ```
 *
 * @module
 */

export { connect, Client } from './client.js';
export type {
  ClientEvent,
  ClientEventType,
  ConnectOptions,
  CreateOptions,
  EventOf,
  GroupState,
  JoinOptions,
  ReconnectOptions,
  SendOptions,
  WebSocketConstructor,
  WebSocketLike,
} from './client.js';
export { ConnectionError, ErrorCode, ProtocolError, RelayError, errorCodeName } from './errors.js';
export type { ErrorCodeName } from './errors.js';
export { decodeFrame, encodeFrame, FLAG_RESUME, FrameError, Kind, MAX_NAME_LEN, VERSION } from './frame.js';
export type {
  Envelope,
  Frame,
  JoinInfo,
  KindName,
  MemberInfo,
  MembershipChange,
  MembershipNotice,
  Mode,
  Role,
  Update,
} from './frame.js';
