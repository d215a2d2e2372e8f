//! What the accept loops and connection tasks need to hold against hostile
//! and broken clients: the per-address connection cap, the registry of
//! connections that have not sent `Hello` yet (shed first when file
//! descriptors run out), the driver's counters, the WebSocket upgrade with
//! the demo page or an HTTP error for requests that are not one, WebSocket
//! close codes, and the lingering close that lets a fatal error reach the
//! client.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::Notify;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};

use super::demo;
use super::place::Placement;
use crate::core::RelayStats;
use crate::frame::{self, ErrorCode, Frame};
use crate::sched::ConnId;

/// Connection limits, from [`ServerConfig`](super::ServerConfig).
#[derive(Clone, Copy, Debug)]
pub(super) struct Limits {
    pub(super) handshake_timeout: Duration,
    pub(super) idle_timeout: Option<Duration>,
    pub(super) max_conns_per_ip: usize,
    pub(super) max_frame: usize,
    pub(super) socket_send_buffer: Option<usize>,
    /// Answer plain `GET /` and `GET /groupwire.js` with the demo page.
    pub(super) demo_page: bool,
    /// The server's clock, for the connection's timers.
    pub(super) clock: groupwire_tokio::Clock,
}

/// The driver's own counters, merged into [`RelayStats`].
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) input_pauses: AtomicU64,
    pub(super) handshake_timeouts: AtomicU64,
    pub(super) idle_timeouts: AtomicU64,
    pub(super) refused_per_ip: AtomicU64,
    pub(super) shed_for_descriptors: AtomicU64,
}

impl Counters {
    pub(super) fn add_to(&self, s: &mut RelayStats) {
        s.input_pauses = self.input_pauses.load(Ordering::Relaxed);
        s.handshake_timeouts = self.handshake_timeouts.load(Ordering::Relaxed);
        s.idle_timeouts = self.idle_timeouts.load(Ordering::Relaxed);
        s.refused_per_ip = self.refused_per_ip.load(Ordering::Relaxed);
        s.shed_for_descriptors = self.shed_for_descriptors.load(Ordering::Relaxed);
    }
}

/// State shared by both accept loops and every connection task.
#[derive(Debug)]
pub(super) struct Gate {
    pub(super) limits: Limits,
    pub(super) counters: Counters,
    /// Where connection tasks run (see `place`).
    pub(super) placement: Placement,
    /// Open connections per source address.
    per_ip: Mutex<BTreeMap<IpAddr, usize>>,
    /// Connections that have not sent a frame yet, oldest (lowest id)
    /// first, with the signal that closes them.
    fresh: Mutex<BTreeMap<ConnId, Arc<Notify>>>,
}

impl Gate {
    pub(super) fn new(limits: Limits, placement: Placement) -> Arc<Self> {
        Arc::new(Self {
            limits,
            counters: Counters::default(),
            placement,
            per_ip: Mutex::new(BTreeMap::new()),
            fresh: Mutex::new(BTreeMap::new()),
        })
    }

    /// Admits a connection from `ip`, or `None` (counted) if that address
    /// already has [`Limits::max_conns_per_ip`] open.
    pub(super) fn admit(self: &Arc<Self>, conn: ConnId, ip: IpAddr) -> Option<Ticket> {
        {
            let mut per_ip = self
                .per_ip
                .lock()
                .expect("never poisoned: no panics inside");
            let n = per_ip.entry(ip).or_insert(0);
            let cap = self.limits.max_conns_per_ip;
            if cap != 0 && *n >= cap {
                self.counters.refused_per_ip.fetch_add(1, Ordering::Relaxed);
                return None;
            }
            *n += 1;
        }
        let shed = Arc::new(Notify::new());
        self.fresh
            .lock()
            .expect("never poisoned: no panics inside")
            .insert(conn, shed.clone());
        Some(Ticket {
            gate: self.clone(),
            conn,
            ip,
            shed,
        })
    }

    /// Closes the oldest connection that has not sent a frame yet (the
    /// accept loop ran out of file descriptors). Its id, if there was one.
    pub(super) fn shed_oldest(&self) -> Option<ConnId> {
        let (conn, shed) = self
            .fresh
            .lock()
            .expect("never poisoned: no panics inside")
            .pop_first()?;
        self.counters
            .shed_for_descriptors
            .fetch_add(1, Ordering::Relaxed);
        // `notify_one` keeps the wake-up if the task is not waiting yet.
        shed.notify_one();
        Some(conn)
    }
}

/// A connection's place at the gate: released when the task ends.
#[derive(Debug)]
pub(super) struct Ticket {
    gate: Arc<Gate>,
    conn: ConnId,
    ip: IpAddr,
    /// Notified when the relay sheds this connection.
    pub(super) shed: Arc<Notify>,
}

impl Ticket {
    /// The connection sent its first frame: it is no longer shed first.
    pub(super) fn greeted(&self) {
        self.gate
            .fresh
            .lock()
            .expect("never poisoned: no panics inside")
            .remove(&self.conn);
    }

    pub(super) fn gate(&self) -> &Gate {
        &self.gate
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.greeted();
        let mut per_ip = self
            .gate
            .per_ip
            .lock()
            .expect("never poisoned: no panics inside");
        if let Some(n) = per_ip.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                per_ip.remove(&self.ip);
            }
        }
    }
}

/// Whether an accept error means the process or system is out of file
/// descriptors (EMFILE, ENFILE).
pub(super) fn out_of_descriptors(e: &std::io::Error) -> bool {
    #[cfg(unix)]
    {
        matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
    }
    #[cfg(not(unix))]
    {
        let _ = e;
        false
    }
}

/// How long a closing connection's input is read and discarded after the
/// relay's last frame went out, so the kernel does not answer unread input
/// with a reset that could destroy that frame before the client reads it
/// (the "lingering close" of HTTP servers).
pub(super) const LINGER: Duration = Duration::from_secs(2);
/// Most bytes discarded during [`LINGER`].
const LINGER_BYTES: usize = 4 << 20;

/// Discarded by one lingering connection before it lets another read.
const LINGER_SLICE: usize = 64 << 10;

/// One lingering connection reads at a time, a slice at a time, the
/// others queued fairly behind it. Lingering is garbage disposal:
/// clients that sent megabytes after a fatal error (a 2 MiB frame over
/// the limit, say) would otherwise fill the runtime's run queue, each
/// reading a slice per turn, and the core task and every well-behaved
/// client's reader and writer would wait behind all of them (a member's
/// round trip p99 went from 0.2 to 1.3 ms beside 100 clients
/// reconnecting each second with a 2 MiB frame, and is about 0.8 ms with
/// the gate: `examples/relay_hostile.rs --isolate --kinds big`). Through
/// the gate they wait behind one slice at most; the clients wait on
/// TCP's flow control.
static LINGERING: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(1);

/// A read through [`LINGERING`] that waits this long lets the gate go:
/// a client that trickles holds up other lingering clients at most this
/// long (it never holds up anyone else: a task waiting on its socket is
/// not in the run queue).
const LINGER_STALL: Duration = Duration::from_millis(10);

/// Reads and discards `rd` until EOF, an error, [`LINGER_BYTES`] or
/// [`LINGER`], a [`LINGER_SLICE`] at a time through [`LINGERING`].
pub(super) async fn linger<R: AsyncRead + Unpin>(rd: &mut R) {
    let drain = async {
        // A slice per read: 8 KiB reads made 256 syscalls of a 2 MiB body.
        let mut buf = vec![0u8; LINGER_SLICE];
        let mut total = 0;
        while total < LINGER_BYTES {
            let Ok(turn) = LINGERING.acquire().await else {
                return;
            };
            let mut slice = 0;
            let stalled = loop {
                match tokio::time::timeout(LINGER_STALL, rd.read(&mut buf)).await {
                    Ok(Ok(0) | Err(_)) => return,
                    Ok(Ok(n)) => slice += n,
                    Err(_) => break true,
                }
                if slice >= LINGER_SLICE {
                    break false;
                }
            };
            drop(turn);
            total += slice;
            if stalled {
                // Nothing came: wait for more without the gate.
                match rd.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => total += n,
                }
            }
        }
    };
    let _ = tokio::time::timeout(LINGER, drain).await;
}

/// The WebSocket close frame that goes with the relay's last frame (a
/// fatal `Error`): a close code (RFC 6455 §7.4.1) and the error's name and
/// message as the reason (at most 123 bytes, §5.5).
pub(super) fn close_frame(last: &[u8]) -> CloseFrame {
    let (code, message) = match frame::decode(last, usize::MAX) {
        Ok(frame::Envelope {
            frame: Frame::Error { code, message },
            ..
        }) => (code, message),
        _ => (ErrorCode(0), String::new()),
    };
    let close = match code {
        ErrorCode::FRAME_TOO_LARGE => CloseCode::Size,
        ErrorCode::SHUTTING_DOWN => CloseCode::Away,
        ErrorCode::MALFORMED | ErrorCode::UNSUPPORTED_VERSION => CloseCode::Protocol,
        ErrorCode::PROTOCOL_VIOLATION
        | ErrorCode::UNAUTHORIZED
        | ErrorCode::SLOW_CONSUMER
        | ErrorCode::TIMEOUT => CloseCode::Policy,
        _ => CloseCode::Normal,
    };
    let mut reason = format!("{}: {message}", code.name());
    if reason.len() > MAX_CLOSE_REASON {
        let mut end = MAX_CLOSE_REASON;
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        reason.truncate(end);
    }
    CloseFrame {
        code: close,
        reason: reason.into(),
    }
}

/// RFC 6455 §5.5: a control frame's payload is at most 125 bytes, two of
/// them the close code.
const MAX_CLOSE_REASON: usize = 123;

/// Largest HTTP request head accepted for the WebSocket upgrade.
const MAX_REQUEST_HEAD: usize = 8 << 10;

/// Why an upgrade request was refused (already answered, if the socket
/// took it).
#[derive(Debug)]
pub(super) struct Refused(pub(super) &'static str);

/// Reads an HTTP request head and upgrades to WebSocket (RFC 6455 §4.2),
/// or answers with an HTTP error (405, 426 or 400 with a short text body)
/// and returns `Err`. The caller bounds the time.
pub(super) async fn ws_upgrade<S>(
    mut stream: S,
    config: WebSocketConfig,
    demo_page: bool,
) -> Result<WebSocketStream<S>, Refused>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut buf = Vec::with_capacity(1024);
    let head_len = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > MAX_REQUEST_HEAD {
            refuse(&mut stream, 431, "Request Header Fields Too Large", "").await;
            return Err(Refused("request head too large"));
        }
        let mut chunk = [0u8; 1024];
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return Err(Refused("closed during the upgrade")),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut req = httparse::Request::new(&mut headers);
    let parsed = req.parse(&buf[..head_len]);
    if !matches!(parsed, Ok(httparse::Status::Complete(_))) {
        refuse(&mut stream, 400, "Bad Request", "").await;
        return Err(Refused("not an HTTP request"));
    }
    if req.method != Some("GET") {
        refuse(&mut stream, 405, "Method Not Allowed", "Allow: GET\r\n").await;
        return Err(Refused("not a GET"));
    }
    let header = |name: &str| {
        req.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .and_then(|h| std::str::from_utf8(h.value).ok())
    };
    let has_token = |name: &str, token: &str| {
        header(name).is_some_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
    };
    let upgrade_hint = "Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n";
    if demo_page && !has_token("upgrade", "websocket") {
        // One response to one complete, bounded request head, then close:
        // no keep-alive, no body read, nothing the request can make larger.
        match req.path.and_then(demo::page) {
            Some(page) => serve_page(&mut stream, page).await,
            None => refuse(&mut stream, 404, "Not Found", "").await,
        }
        return Err(Refused("a plain HTTP request (demo page)"));
    }
    if !has_token("upgrade", "websocket") || header("sec-websocket-version") != Some("13") {
        refuse(&mut stream, 426, "Upgrade Required", upgrade_hint).await;
        return Err(Refused("no WebSocket upgrade"));
    }
    let Some(key) = header("sec-websocket-key").filter(|_| has_token("connection", "upgrade"))
    else {
        refuse(&mut stream, 400, "Bad Request", upgrade_hint).await;
        return Err(Refused("incomplete WebSocket upgrade"));
    };
    let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
    let response = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n\r\n"
    );
    if stream.write_all(response.as_bytes()).await.is_err() || stream.flush().await.is_err() {
        return Err(Refused("closed during the upgrade"));
    }
    let rest = buf.split_off(head_len);
    Ok(WebSocketStream::from_partially_read(stream, rest, Role::Server, Some(config)).await)
}

/// Writes a demo page (`200 OK`) and closes.
async fn serve_page<S: AsyncWrite + Unpin>(stream: &mut S, page: demo::Page) {
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: {}\r\nContent-Length: {}\r\n{}Connection: close\r\n\r\n",
        page.content_type,
        page.body.len(),
        demo::HEADERS,
    );
    if stream.write_all(head.as_bytes()).await.is_ok() {
        let _ = stream.write_all(page.body.as_bytes()).await;
    }
    let _ = stream.shutdown().await;
}

/// Writes an HTTP error response with a one-line body and closes.
async fn refuse<S: AsyncWrite + Unpin>(stream: &mut S, status: u16, reason: &str, extra: &str) {
    let body = format!(
        "{status} {reason}: this is a groupwire relay WebSocket endpoint; connect with a WebSocket client (docs/relay-protocol.md)\n"
    );
    let response = format!(
        "HTTP/1.1 {status} {reason}\r\n{extra}Content-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_frames_carry_a_code_and_a_bounded_reason() {
        let err = |code, message: &str| {
            frame::encode(
                0,
                &Frame::Error {
                    code,
                    message: message.into(),
                },
            )
        };
        let c = close_frame(&err(ErrorCode::FRAME_TOO_LARGE, "too big"));
        assert_eq!(c.code, CloseCode::Size);
        assert_eq!(c.reason.as_str(), "frame-too-large: too big");
        let c = close_frame(&err(ErrorCode::PROTOCOL_VIOLATION, &"é".repeat(200)));
        assert_eq!(c.code, CloseCode::Policy);
        assert!(c.reason.len() <= MAX_CLOSE_REASON, "{}", c.reason.len());
        assert_eq!(
            close_frame(&err(ErrorCode::SHUTTING_DOWN, "")).code,
            CloseCode::Away
        );
    }
}
