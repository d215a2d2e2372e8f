//! The client library: one connection to a relay, any number of groups.
//!
//! The connection runs over TCP ([`RelayClient::connect`], the relay's
//! `--listen` address) or WebSocket ([`RelayClient::connect_ws`], its `--ws`
//! address, one frame per binary message), each plain or inside TLS
//! ([`RelayClient::connect_tls`], `wss://`); [`RelayClient::connect_url`]
//! picks by the address (`host:port`, `tcp://host:port`, `tls://host:port`,
//! `ws://host:port/` or `wss://host:port/`). All carry the same frames, so
//! everything after connecting is the same.
//!
//! **Tokens never travel in clear by accident**: a client with a token
//! refuses to send it over a plaintext transport
//! ([`ClientError::PlaintextToken`]) unless the relay's address is a
//! loopback address (the bytes never leave the host; see
//! [`PlaintextToken`]) or the caller opts in with
//! [`ClientOptions::plaintext_token`].
//!
//! ```no_run
//! # async fn demo() -> Result<(), groupwire_relay::client::ClientError> {
//! use bytes::Bytes;
//! use groupwire_relay::client::{ClientEvent, ClientOptions, RelayClient};
//! use groupwire_relay::frame::{ActivityMode, Role};
//!
//! let (client, mut events) = RelayClient::connect("127.0.0.1:7600", ClientOptions::new("alice")).await?;
//! client.create_group("chat", "chat", 6, Bytes::new()).await?;
//! let joined = client.join("chat", Role::Principal, ActivityMode::Active, true).await?;
//! let seq = client.send("chat", 1, Bytes::from_static(b"hello")).await?;
//! while let Some(ev) = events.recv().await {
//!     if let ClientEvent::Deliver(d) = ev {
//!         println!("{} #{} from {}: {:?}", d.group, d.seq, d.sender, d.payload);
//!     }
//! }
//! # let _ = (joined, seq);
//! # Ok(()) }
//! ```
//!
//! Drain the event receiver: the client credits the relay's send window
//! only for frames it has handed to the application, so a client that
//! stops reading events is eventually treated as a slow consumer (which is
//! the point). Dropping the receiver discards events instead.
//!
//! Frame sizes: a request larger than the relay's cap (announced in its
//! `Welcome`, see [`RelayClient::max_frame`]) fails locally with
//! [`ClientError::FrameTooLarge`] instead of making the relay drop the
//! connection; frames from the relay are accepted up to
//! [`ClientOptions::max_incoming_frame`].

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use groupwire_metrics::ChannelSnapshot;
use groupwire_tokio::{Clock, Deadline};
use tokio::net::ToSocketAddrs;
use tokio::sync::{mpsc, oneshot};

use crate::frame::{self, ActivityMode, ErrorCode, Frame, Role, Update};
pub use crate::frame::{JoinInfo, MembershipNotice};
use crate::tls::ClientTls;
use transport::{Connection, FrameReader, FrameWriter, ReadError};

pub mod core;
pub mod meter;
mod transport;

pub use self::core::{ClientCore, CoreEvent, RequestId};
pub use self::meter::RelayMeters;

/// Connection options.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// Name shown to other members.
    pub name: String,
    /// Token (empty for a relay without authentication).
    pub token: String,
    /// Send window to ask for (0: the relay's default).
    pub window: u32,
    /// Capacity of the event channel.
    pub event_capacity: usize,
    /// Largest frame accepted from the relay, length prefix included; a
    /// larger one ends the connection. Default
    /// [`DEFAULT_MAX_INCOMING_FRAME`].
    pub max_incoming_frame: usize,
    /// Roots trusted for `tls://` and `wss://` (`None`:
    /// [`ClientTls::webpki_roots`]).
    pub tls: Option<ClientTls>,
    /// When the token may go over a plaintext transport (default
    /// [`PlaintextToken::LoopbackOnly`]).
    pub plaintext_token: PlaintextToken,
    /// The client sends a `Ping` this often, so a relay's idle timeout
    /// (5 min by default) does not close a connection that only listens.
    /// Default [`DEFAULT_KEEPALIVE`].
    pub keepalive: Duration,
    /// Meter every group's traffic ([`RelayClient::channels`],
    /// [`ClientCore::channel_snapshots`]). On by default; a load generator
    /// that measures on its own turns it off.
    pub metered: bool,
    /// The wall clock (µs since the Unix epoch) at `Instant::ZERO` of the
    /// clock driving a [`ClientCore`], so the meters can compare it with
    /// the senders' stamps (one-way latency). [`RelayClient`] sets it from
    /// its own clock; `None` measures latency above each sender's lowest
    /// transit instead.
    pub shared_clock_micros: Option<u64>,
    /// Remember the groups joined and the last update handed over in each,
    /// so that a reconnect resumes them (see [`RelayClient::connect_failover`])
    /// and a delivery is never handed over twice. On by default; a load
    /// generator that never reconnects turns it off.
    pub resume: bool,
    /// After losing its relay, a client from
    /// [`RelayClient::connect_failover`] waits this long before its second
    /// attempt (the first is at once, to the next address), doubling up
    /// to [`reconnect_max_delay`](Self::reconnect_max_delay). Default
    /// 50 ms.
    pub reconnect_delay: Duration,
    /// The longest wait between two reconnect attempts. Default 2 s.
    pub reconnect_max_delay: Duration,
    /// How long a client from [`RelayClient::connect_failover`] keeps
    /// trying to reconnect before it gives up
    /// ([`ClientEvent::Closed`]). Default 60 s.
    pub reconnect_for: Duration,
}

/// When a client sends its token over a plaintext (not TLS) transport.
/// Without a token, or inside TLS, this does not apply.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum PlaintextToken {
    /// Never: only inside TLS.
    Never,
    /// Only to a loopback address (127.0.0.0/8, ::1), where the bytes never
    /// leave the host. The default.
    #[default]
    LoopbackOnly,
    /// To any address: anyone on the path can read and replay the token.
    /// For networks the caller trusts (the CLI's
    /// `--insecure-plaintext-token`).
    Always,
}

/// The default [`ClientOptions::keepalive`]: well inside the relay's
/// default idle timeout (5 min).
pub const DEFAULT_KEEPALIVE: Duration = Duration::from_secs(60);

impl ClientOptions {
    /// Options with a name and defaults otherwise.
    pub fn new(name: &str) -> Self {
        Self {
            name: name.into(),
            token: String::new(),
            window: 0,
            event_capacity: 1024,
            max_incoming_frame: DEFAULT_MAX_INCOMING_FRAME,
            tls: None,
            plaintext_token: PlaintextToken::default(),
            keepalive: DEFAULT_KEEPALIVE,
            metered: true,
            shared_clock_micros: None,
            resume: true,
            reconnect_delay: Duration::from_millis(50),
            reconnect_max_delay: Duration::from_secs(2),
            reconnect_for: Duration::from_secs(60),
        }
    }

    /// Sets the keepalive period ([`ClientOptions::keepalive`]); a
    /// connection that hears nothing for two periods is given up.
    pub fn keepalive(mut self, period: Duration) -> Self {
        self.keepalive = period;
        self
    }

    /// Sets how long a failover client keeps trying to reconnect
    /// ([`ClientOptions::reconnect_for`]).
    pub fn reconnect_for(mut self, d: Duration) -> Self {
        self.reconnect_for = d;
        self
    }

    /// Trusts these roots for `tls://` and `wss://` (e.g. a deployment's
    /// own CA, [`ClientTls::from_ca_file`]).
    pub fn tls(mut self, tls: ClientTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Sets when the token may go over a plaintext transport. Prefer
    /// `tls://` or `wss://` to [`PlaintextToken::Always`].
    pub fn plaintext_token(mut self, when: PlaintextToken) -> Self {
        self.plaintext_token = when;
        self
    }

    /// Sets the token.
    pub fn token(mut self, token: &str) -> Self {
        self.token = token.into();
        self
    }

    /// Sets the requested send window.
    pub fn window(mut self, bytes: u32) -> Self {
        self.window = bytes;
        self
    }

    /// Sets the largest frame accepted from the relay. Raise it for a relay
    /// started with a `--max-frame` near or above
    /// [`DEFAULT_MAX_INCOMING_FRAME`].
    pub fn max_incoming_frame(mut self, bytes: usize) -> Self {
        self.max_incoming_frame = bytes;
        self
    }
}

/// Default for [`ClientOptions::max_incoming_frame`]: 16 MiB.
///
/// Not the relay's announced cap, which bounds what the relay *accepts*:
/// frames it originates can be larger (a `Deliver` is 16 bytes longer than
/// the `Send` it carries, a `Joined` lists every member), and a WebSocket
/// client must fix its limit before the `Welcome` arrives. Sixteen times
/// the relay's default cap ([`frame::DEFAULT_MAX_FRAME`]) leaves room for
/// both while still bounding what one frame can make the client buffer.
pub const DEFAULT_MAX_INCOMING_FRAME: usize = 16 * frame::DEFAULT_MAX_FRAME;

/// A failed request or a lost connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The relay refused the request.
    #[error("relay error {code}: {message}")]
    Relay {
        /// Its code.
        code: ErrorCode,
        /// Its message.
        message: String,
    },
    /// The connection is gone.
    #[error("connection to the relay closed")]
    Closed,
    /// Connecting failed.
    #[error("connect: {0}")]
    Connect(String),
    /// The relay answered with something unexpected.
    #[error("unexpected reply {0}")]
    Unexpected(String),
    /// The request would be a frame larger than the relay accepts
    /// ([`RelayClient::max_frame`]); nothing was sent.
    #[error("request of {len} bytes exceeds the relay's frame cap of {max} bytes")]
    FrameTooLarge {
        /// The encoded request, length prefix included.
        len: usize,
        /// The relay's cap.
        max: usize,
    },
    /// The relay address or URL is not one the client can use.
    #[error("invalid relay address {addr:?}: {reason}")]
    InvalidAddress {
        /// The address as given.
        addr: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The client has a token and the transport is plaintext where
    /// [`ClientOptions::plaintext_token`] does not allow it; nothing was
    /// sent. Use TLS (`tls://`, `wss://`).
    #[error(
        "refusing to send a token in clear over a plaintext connection; \
         use tls:// or wss://, or allow it explicitly (--insecure-plaintext-token)"
    )]
    PlaintextToken,
    /// Nothing came from the relay for two keepalive periods: the
    /// connection is taken as dead.
    #[error("no word from the relay for two keepalive periods")]
    KeepaliveTimeout,
    /// The connection was lost before the reply came; a client from
    /// [`RelayClient::connect_failover`] reconnects, but does not repeat
    /// the request. It may or may not have taken effect: a `send` may
    /// have been stored (then it is delivered, also to this client, with
    /// the sequence number it was given), a lock may have been granted
    /// (and is released with the lost connection, or when its node's
    /// lease runs out).
    #[error(
        "connection to the relay lost before the reply; the request may or may not have taken effect"
    )]
    Interrupted,
}

impl ClientError {
    /// The relay's error code, if this is a relay error.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            ClientError::Relay { code, .. } => Some(*code),
            _ => None,
        }
    }
}

/// What arrives without being asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClientEvent {
    /// A sequenced update.
    Deliver(Update),
    /// A membership change.
    Membership(MembershipNotice),
    /// The group was deleted.
    GroupDeleted(String),
    /// The relay dropped a backlog (slow consumer); a fresh state follows.
    Resync {
        /// Group name.
        group: String,
        /// Frames dropped.
        dropped: u64,
    },
    /// A fresh state transfer after a resync or role change.
    State(JoinInfo),
    /// The connection closed; with the relay's fatal error if there was one.
    Closed(Option<ClientError>),
    /// A client from [`RelayClient::connect_failover`] lost its relay and
    /// is connected again, to `url`, with a new client id. Requests in
    /// flight when it was lost failed with [`ClientError::Interrupted`],
    /// and the locks it held are no longer its own. It re-joins every
    /// group it was in, each resuming after the last update it handed
    /// over: the deliveries go on with no gap and no duplicate, or (where
    /// the log was compacted past that update) with `Resync` and `State`.
    Reconnected {
        /// The relay it is connected to now.
        url: String,
        /// Its client id there.
        client_id: u64,
    },
    /// A group could not be re-joined after a reconnect; the client is no
    /// longer a member. `NO_SUCH_GROUP` if it was deleted meanwhile, or
    /// (on a cluster) created through another node so recently that the
    /// new node does not know it yet: a client may join it again.
    RejoinFailed {
        /// Group name.
        group: String,
        /// Why.
        error: ClientError,
    },
}

/// A connection to a relay. Cheap to clone; requests may run concurrently.
#[derive(Clone, Debug)]
pub struct RelayClient {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    requests: mpsc::UnboundedSender<Command>,
    info: Arc<Info>,
}

/// What the `Welcome` of the current connection said (a reconnect
/// changes it).
#[derive(Debug, Default)]
struct Info {
    client_id: AtomicU64,
    window: AtomicU32,
    max_frame: AtomicUsize,
}

impl Info {
    fn set(&self, w: &Welcomed) {
        self.client_id.store(w.client_id, Ordering::Relaxed);
        self.window.store(w.window, Ordering::Relaxed);
        self.max_frame.store(w.max_frame, Ordering::Relaxed);
    }
}

/// A connection past its `Welcome`.
struct Welcomed {
    reader: FrameReader,
    writer: FrameWriter,
    client_id: u64,
    window: u32,
    max_frame: usize,
}

/// Where a client from [`RelayClient::connect_failover`] reconnects.
struct Failover {
    urls: Vec<String>,
    /// The one connected last.
    current: usize,
    opts: ClientOptions,
}

/// What the handle asks of the connection task.
enum Command {
    /// A request to the relay.
    Request {
        frame: Frame,
        reply: oneshot::Sender<Result<Frame, ClientError>>,
    },
    /// The channel measures (`finish`: judge what is pending first).
    Channels {
        finish: bool,
        reply: oneshot::Sender<Vec<ChannelSnapshot>>,
    },
}

impl RelayClient {
    /// Connects over TCP, says `Hello` and waits for `Welcome`.
    pub async fn connect(
        addr: impl ToSocketAddrs,
        opts: ClientOptions,
    ) -> Result<(RelayClient, mpsc::Receiver<ClientEvent>), ClientError> {
        let conn = transport::connect_tcp(addr, None, opts.max_incoming_frame).await?;
        Self::start(conn, opts, None).await
    }

    /// Connects over TCP inside TLS to `host:port` (a relay started with
    /// `--tls-cert`), checking the relay's certificate against
    /// [`ClientOptions::tls`] and the name `host`, then says `Hello`.
    /// A certificate the roots do not vouch for is
    /// [`ClientError::Connect`], naming the TLS error.
    pub async fn connect_tls(
        host_port: &str,
        opts: ClientOptions,
    ) -> Result<(RelayClient, mpsc::Receiver<ClientEvent>), ClientError> {
        let host = host_of(host_port).ok_or_else(|| ClientError::InvalidAddress {
            addr: host_port.to_owned(),
            reason: "expected host:port".into(),
        })?;
        let tls = opts.tls.clone().unwrap_or_else(ClientTls::webpki_roots);
        let conn =
            transport::connect_tcp(host_port, Some((&tls, host)), opts.max_incoming_frame).await?;
        Self::start(conn, opts, None).await
    }

    /// Connects over WebSocket to the relay's `--ws` address (`url` like
    /// `ws://127.0.0.1:7601/`, or `wss://relay.example:7601/` for a relay
    /// with TLS; the relay serves any path), says `Hello` and waits for
    /// `Welcome`. Everything after that is as for
    /// [`connect`](Self::connect): same requests, same events.
    ///
    /// A `url` that is not a `ws://` or `wss://` URL is
    /// [`ClientError::InvalidAddress`]; a refused connection, a failed TLS
    /// handshake or a failed HTTP upgrade is [`ClientError::Connect`].
    pub async fn connect_ws(
        url: &str,
        opts: ClientOptions,
    ) -> Result<(RelayClient, mpsc::Receiver<ClientEvent>), ClientError> {
        let tls = opts.tls.clone().unwrap_or_else(ClientTls::webpki_roots);
        let conn = transport::connect_ws(url, &tls, opts.max_incoming_frame).await?;
        Self::start(conn, opts, None).await
    }

    /// Connects over the transport `addr` names: `host:port` or
    /// `tcp://host:port` for TCP ([`connect`](Self::connect)),
    /// `tls://host:port` for TCP inside TLS ([`connect_tls`](Self::connect_tls)),
    /// `ws://host:port/path` or `wss://host:port/path` for WebSocket
    /// ([`connect_ws`](Self::connect_ws)). Other schemes are
    /// [`ClientError::InvalidAddress`].
    pub async fn connect_url(
        addr: &str,
        opts: ClientOptions,
    ) -> Result<(RelayClient, mpsc::Receiver<ClientEvent>), ClientError> {
        let conn = dial(addr, &opts).await?;
        Self::start(conn, opts, None).await
    }

    /// Connects to the first of `urls` (each as for
    /// [`connect_url`](Self::connect_url): nodes of one relay cluster, or
    /// one relay that may restart) that answers, and **fails over**: when
    /// the connection is lost (closed, reset, no word for two keepalive
    /// periods, or the relay shutting down), the client connects to the
    /// next address (then the one after, waiting
    /// [`ClientOptions::reconnect_delay`] doubling up to
    /// [`ClientOptions::reconnect_max_delay`] between attempts, for up to
    /// [`ClientOptions::reconnect_for`]), says `Hello` again and re-joins
    /// every group it was in, each resuming after the last update it
    /// handed over: no gap, no duplicate, and `Resync` then `State` only
    /// where the log was compacted past it. The application sees
    /// [`ClientEvent::Reconnected`].
    ///
    /// Requests in flight when the connection is lost fail with
    /// [`ClientError::Interrupted`] and are not repeated: a `send` may or
    /// may not have been stored (if it was, it is delivered like any
    /// other update); a lock being acquired may or may not have been
    /// granted, and locks held are lost with the connection. Requests made
    /// while the client reconnects wait for the new connection. Errors
    /// other than a lost connection (a refused token, a protocol error)
    /// end the client as for [`connect_url`](Self::connect_url).
    ///
    /// Fails with the last address's error if none of them answers.
    pub async fn connect_failover<S: AsRef<str>>(
        urls: &[S],
        opts: ClientOptions,
    ) -> Result<(RelayClient, mpsc::Receiver<ClientEvent>), ClientError> {
        let urls: Vec<String> = urls.iter().map(|u| u.as_ref().to_owned()).collect();
        let mut last = ClientError::InvalidAddress {
            addr: String::new(),
            reason: "no relay address".into(),
        };
        for (current, url) in urls.iter().enumerate() {
            let failover = Failover {
                urls: urls.clone(),
                current,
                opts: opts.clone(),
            };
            match dial(url, &opts).await {
                Ok(conn) => match Self::start(conn, opts.clone(), Some(failover)).await {
                    Ok(client) => return Ok(client),
                    Err(e) => last = e,
                },
                Err(e) => last = e,
            }
            tracing::debug!(url, error = %last, "relay not reachable, trying the next");
        }
        Err(last)
    }

    /// Says `Hello` on a fresh connection, waits for `Welcome`, then hands
    /// the connection to its task.
    async fn start(
        conn: Connection,
        opts: ClientOptions,
        failover: Option<Failover>,
    ) -> Result<(RelayClient, mpsc::Receiver<ClientEvent>), ClientError> {
        let clock = Clock::start();
        let opts = ClientOptions {
            shared_clock_micros: Some(clock.wall_micros(groupwire_proto::Instant::ZERO)),
            ..opts
        };
        let mut core = ClientCore::new(clock.now(), &opts);
        let welcomed = handshake(conn, &mut core, &clock, &opts).await?;
        let info = Arc::new(Info::default());
        info.set(&welcomed);
        let (req_tx, req_rx) = mpsc::unbounded_channel();
        let (ev_tx, ev_rx) = mpsc::channel(opts.event_capacity.max(1));
        tokio::spawn(run(
            welcomed,
            core,
            clock,
            req_rx,
            ev_tx,
            failover,
            Arc::clone(&info),
        ));
        Ok((
            RelayClient {
                inner: Arc::new(Inner {
                    requests: req_tx,
                    info,
                }),
            },
            ev_rx,
        ))
    }

    /// This client's id (as members and senders are named); a reconnect
    /// ([`ClientEvent::Reconnected`]) changes it.
    pub fn client_id(&self) -> u64 {
        self.inner.info.client_id.load(Ordering::Relaxed)
    }

    /// The send window the relay granted.
    pub fn window(&self) -> u32 {
        self.inner.info.window.load(Ordering::Relaxed)
    }

    /// The largest frame the relay accepts, length prefix included (from
    /// its `Welcome`). A request that would be larger fails with
    /// [`ClientError::FrameTooLarge`] without being sent.
    pub fn max_frame(&self) -> usize {
        self.inner.info.max_frame.load(Ordering::Relaxed)
    }

    async fn request(&self, frame: Frame) -> Result<Frame, ClientError> {
        let (tx, rx) = oneshot::channel();
        self.inner
            .requests
            .send(Command::Request { frame, reply: tx })
            .map_err(|_| ClientError::Closed)?;
        rx.await.map_err(|_| ClientError::Closed)?
    }

    /// The channel measures of every group this client sent to or received
    /// from (Leigh et al. §4: bandwidth, one-way latency from the senders'
    /// stamps, Figure 4 and RFC 3550 jitter, the updates the relay dropped
    /// for this client and their burstiness; see [`meter`]). Each call
    /// starts a new interval for the rates: call it once a second for live
    /// figures. [`ClientError::Closed`] once the connection is over.
    pub async fn channels(&self) -> Result<Vec<ChannelSnapshot>, ClientError> {
        self.channels_inner(false).await
    }

    /// As [`channels`](Self::channels), after judging every update still
    /// pending (a trailing gap counts as dropped): for the last report of a
    /// run.
    pub async fn final_channels(&self) -> Result<Vec<ChannelSnapshot>, ClientError> {
        self.channels_inner(true).await
    }

    async fn channels_inner(&self, finish: bool) -> Result<Vec<ChannelSnapshot>, ClientError> {
        let (tx, rx) = oneshot::channel();
        self.inner
            .requests
            .send(Command::Channels { finish, reply: tx })
            .map_err(|_| ClientError::Closed)?;
        rx.await.map_err(|_| ClientError::Closed)
    }

    async fn ok(&self, frame: Frame) -> Result<(), ClientError> {
        match self.request(frame).await? {
            Frame::Ok => Ok(()),
            other => Err(ClientError::Unexpected(format!("{:?}", other.kind()))),
        }
    }

    /// Creates a group with a type, a default priority (0..=7) and an initial state.
    pub async fn create_group(
        &self,
        group: &str,
        group_type: &str,
        priority: u8,
        initial_state: Bytes,
    ) -> Result<(), ClientError> {
        self.ok(Frame::CreateGroup {
            group: group.into(),
            group_type: group_type.into(),
            priority,
            initial_state,
        })
        .await
    }

    /// Deletes a group.
    pub async fn delete_group(&self, group: &str) -> Result<(), ClientError> {
        self.ok(Frame::DeleteGroup {
            group: group.into(),
        })
        .await
    }

    /// Joins a group; returns the state transfer. Updates after
    /// `checkpoint_seq` follow as [`ClientEvent::Deliver`].
    pub async fn join(
        &self,
        group: &str,
        role: Role,
        mode: ActivityMode,
        watch_membership: bool,
    ) -> Result<JoinInfo, ClientError> {
        match self
            .request(Frame::Join {
                group: group.into(),
                role,
                mode,
                watch_membership,
                resume_after: None,
            })
            .await?
        {
            Frame::Joined(j) => Ok(j),
            other => Err(ClientError::Unexpected(format!("{:?}", other.kind()))),
        }
    }

    /// Leaves a group.
    pub async fn leave(&self, group: &str) -> Result<(), ClientError> {
        self.ok(Frame::Leave {
            group: group.into(),
        })
        .await
    }

    /// Changes this client's role in a group.
    pub async fn change_role(&self, group: &str, role: Role) -> Result<(), ClientError> {
        self.ok(Frame::ChangeRole {
            group: group.into(),
            role,
        })
        .await
    }

    /// Changes this client's activity mode in a group.
    pub async fn change_mode(&self, group: &str, mode: ActivityMode) -> Result<(), ClientError> {
        self.ok(Frame::ChangeMode {
            group: group.into(),
            mode,
        })
        .await
    }

    /// Changes a group's default priority.
    pub async fn set_priority(&self, group: &str, priority: u8) -> Result<(), ClientError> {
        self.ok(Frame::SetPriority {
            group: group.into(),
            priority,
        })
        .await
    }

    /// Multicasts an update stamped with the wall clock; returns its
    /// sequence number once the relay has made it durable.
    pub async fn send(
        &self,
        group: &str,
        msg_type: u16,
        payload: Bytes,
    ) -> Result<u64, ClientError> {
        self.send_at(group, msg_type, wall_micros(), payload).await
    }

    /// [`send`](Self::send) with an explicit timestamp.
    pub async fn send_at(
        &self,
        group: &str,
        msg_type: u16,
        sent_at_micros: u64,
        payload: Bytes,
    ) -> Result<u64, ClientError> {
        match self
            .request(Frame::Send {
                group: group.into(),
                msg_type,
                sent_at_micros,
                payload,
            })
            .await?
        {
            Frame::Sent { seq, .. } => Ok(seq),
            other => Err(ClientError::Unexpected(format!("{:?}", other.kind()))),
        }
    }

    /// Stores the group state after update `seq`.
    pub async fn checkpoint(&self, group: &str, seq: u64, state: Bytes) -> Result<(), ClientError> {
        self.ok(Frame::Checkpoint {
            group: group.into(),
            seq,
            state,
        })
        .await
    }

    /// Acquires a lock, waiting behind its holder.
    pub async fn lock(&self, group: &str, lock: &str) -> Result<(), ClientError> {
        match self
            .request(Frame::LockAcquire {
                group: group.into(),
                lock: lock.into(),
                wait: true,
            })
            .await?
        {
            Frame::Ok | Frame::LockGranted { .. } => Ok(()),
            other => Err(ClientError::Unexpected(format!("{:?}", other.kind()))),
        }
    }

    /// Acquires a lock if it is free; `Ok(false)` if someone holds it.
    pub async fn try_lock(&self, group: &str, lock: &str) -> Result<bool, ClientError> {
        match self
            .ok(Frame::LockAcquire {
                group: group.into(),
                lock: lock.into(),
                wait: false,
            })
            .await
        {
            Ok(()) => Ok(true),
            Err(e) if e.code() == Some(ErrorCode::LOCK_BUSY) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Releases a lock.
    pub async fn unlock(&self, group: &str, lock: &str) -> Result<(), ClientError> {
        self.ok(Frame::LockRelease {
            group: group.into(),
            lock: lock.into(),
        })
        .await
    }

    /// Round trip to the relay.
    pub async fn ping(&self) -> Result<(), ClientError> {
        match self.request(Frame::Ping { nonce: 7 }).await? {
            Frame::Pong { .. } => Ok(()),
            other => Err(ClientError::Unexpected(format!("{:?}", other.kind()))),
        }
    }
}

/// Wall-clock microseconds since the Unix epoch, for `sent_at_micros` (the
/// driver clock's reading, re-exported here for the relay's users).
pub use groupwire_tokio::wall_micros;

/// Whether `Hello` may carry the token on this transport: always without
/// a token, inside TLS, or to a loopback address; otherwise only if the
/// caller opted in.
fn plaintext_token_allowed(opts: &ClientOptions, encrypted: bool, loopback: bool) -> bool {
    opts.token.is_empty()
        || encrypted
        || match opts.plaintext_token {
            PlaintextToken::Never => false,
            PlaintextToken::LoopbackOnly => loopback,
            PlaintextToken::Always => true,
        }
}

/// The host of `host:port` (an IPv6 host keeps its brackets).
fn host_of(host_port: &str) -> Option<&str> {
    let (host, port) = host_port.rsplit_once(':')?;
    (!host.is_empty() && port.parse::<u16>().is_ok()).then_some(host)
}

/// A relay address as [`RelayClient::connect_url`] reads it.
#[derive(Debug, PartialEq, Eq)]
enum RelayAddr<'a> {
    /// `host:port`, for [`RelayClient::connect`].
    Tcp(&'a str),
    /// `host:port` of a TLS listener, for [`RelayClient::connect_tls`].
    Tls(&'a str),
    /// A whole `ws://` or `wss://` URL, for [`RelayClient::connect_ws`].
    Ws(&'a str),
}

fn parse_addr(addr: &str) -> Result<RelayAddr<'_>, ClientError> {
    let invalid = |reason: &str| ClientError::InvalidAddress {
        addr: addr.to_owned(),
        reason: reason.to_owned(),
    };
    let Some((scheme, rest)) = addr.split_once("://") else {
        if addr.is_empty() {
            return Err(invalid("empty"));
        }
        return Ok(RelayAddr::Tcp(addr));
    };
    if scheme.eq_ignore_ascii_case("tcp") || scheme.eq_ignore_ascii_case("tls") {
        let hostport = rest.strip_suffix('/').unwrap_or(rest);
        if hostport.is_empty() || hostport.contains('/') {
            return Err(invalid(&format!(
                "expected {}://host:port",
                scheme.to_ascii_lowercase()
            )));
        }
        if scheme.eq_ignore_ascii_case("tls") {
            if host_of(hostport).is_none() {
                return Err(invalid("expected tls://host:port"));
            }
            return Ok(RelayAddr::Tls(hostport));
        }
        Ok(RelayAddr::Tcp(hostport))
    } else if scheme.eq_ignore_ascii_case("ws") || scheme.eq_ignore_ascii_case("wss") {
        Ok(RelayAddr::Ws(addr))
    } else {
        Err(invalid(
            "unknown scheme; use host:port, tcp://host:port, tls://host:port, ws://host:port/ or wss://host:port/",
        ))
    }
}

/// Opens the transport `addr` names (see [`RelayClient::connect_url`]).
async fn dial(addr: &str, opts: &ClientOptions) -> Result<Connection, ClientError> {
    match parse_addr(addr)? {
        RelayAddr::Tcp(hostport) => {
            transport::connect_tcp(hostport, None, opts.max_incoming_frame).await
        }
        RelayAddr::Tls(hostport) => {
            let host = host_of(hostport).ok_or_else(|| ClientError::InvalidAddress {
                addr: hostport.to_owned(),
                reason: "expected host:port".into(),
            })?;
            let tls = opts.tls.clone().unwrap_or_else(ClientTls::webpki_roots);
            transport::connect_tcp(hostport, Some((&tls, host)), opts.max_incoming_frame).await
        }
        RelayAddr::Ws(url) => {
            let tls = opts.tls.clone().unwrap_or_else(ClientTls::webpki_roots);
            transport::connect_ws(url, &tls, opts.max_incoming_frame).await
        }
    }
}

/// Says the `Hello` `core` has queued on `conn` and waits for the
/// `Welcome`.
async fn handshake(
    conn: Connection,
    core: &mut ClientCore,
    clock: &Clock,
    opts: &ClientOptions,
) -> Result<Welcomed, ClientError> {
    let Connection {
        mut reader,
        mut writer,
        encrypted,
        loopback,
    } = conn;
    if !plaintext_token_allowed(opts, encrypted, loopback) {
        writer.close().await;
        return Err(ClientError::PlaintextToken);
    }
    loop {
        while let Some(b) = core.poll_transmit() {
            writer
                .send(b)
                .await
                .map_err(|e| ClientError::Connect(e.to_string()))?;
        }
        match core.poll_event() {
            Some(CoreEvent::Connected {
                client_id,
                window,
                max_frame,
            }) => {
                return Ok(Welcomed {
                    reader,
                    writer,
                    client_id,
                    window,
                    max_frame,
                });
            }
            Some(CoreEvent::Closed(e)) => return Err(e.unwrap_or(ClientError::Closed)),
            Some(other) => return Err(ClientError::Unexpected(format!("{other:?}"))),
            None => {}
        }
        let f = reader
            .next_frame()
            .await
            .map_err(ReadError::into_connect_error)?;
        core.handle_frame(clock.now(), f);
    }
}

/// How one connection ended.
enum End {
    /// The handles are gone: the client is done.
    Dropped,
    /// The connection is over, with the relay's fatal error if it sent
    /// one.
    Lost(Option<ClientError>),
}

/// Whether a client that can fail over reconnects after `fatal`: after a
/// lost connection, a keepalive timeout, or a relay shutting down or
/// timing the client out; not after a refusal or a protocol error, which
/// another attempt would only repeat.
fn reconnects_after(fatal: &Option<ClientError>) -> bool {
    match fatal {
        None | Some(ClientError::Closed | ClientError::KeepaliveTimeout) => true,
        Some(ClientError::Relay { code, .. }) => {
            *code == ErrorCode::SHUTTING_DOWN || *code == ErrorCode::TIMEOUT
        }
        Some(_) => false,
    }
}

/// The client's task: drives one connection after another (one only
/// without failover), and tells the application when it is over.
async fn run(
    mut conn: Welcomed,
    mut core: ClientCore,
    clock: Clock,
    mut requests: mpsc::UnboundedReceiver<Command>,
    events: mpsc::Sender<ClientEvent>,
    mut failover: Option<Failover>,
    info: Arc<Info>,
) {
    let mut held = VecDeque::new();
    loop {
        let can_fail_over = failover.is_some();
        let fatal = match connection(
            conn,
            &mut core,
            &clock,
            &mut requests,
            &events,
            &mut held,
            can_fail_over,
        )
        .await
        {
            End::Dropped => return,
            End::Lost(fatal) => fatal,
        };
        let next = match failover.as_mut() {
            Some(f) if reconnects_after(&fatal) => {
                tracing::info!(url = %f.urls[f.current], error = ?fatal, "relay lost, failing over");
                reconnect(f, &mut core, &clock, &mut requests, &mut held).await
            }
            _ => None,
        };
        let Some((welcomed, url)) = next else {
            for cmd in held.drain(..) {
                fail(cmd, &mut core, &clock, ClientError::Closed);
            }
            let _ = events.send(ClientEvent::Closed(fatal)).await;
            return;
        };
        info.set(&welcomed);
        let client_id = welcomed.client_id;
        tracing::info!(url, client_id, "reconnected");
        let _ = events
            .send(ClientEvent::Reconnected { url, client_id })
            .await;
        conn = welcomed;
    }
}

/// Answers a command that will not reach a relay.
fn fail(cmd: Command, core: &mut ClientCore, clock: &Clock, e: ClientError) {
    match cmd {
        Command::Request { reply, .. } => {
            let _ = reply.send(Err(e));
        }
        Command::Channels { finish, reply } => {
            if finish {
                core.finish_channels();
            }
            let _ = reply.send(core.channel_snapshots(clock.now()));
        }
    }
}

/// Finds a relay again: the next address at once, then each in turn with
/// a growing wait, until one welcomes the client or
/// [`ClientOptions::reconnect_for`] is over. Requests made meanwhile are
/// `held` for the new connection (channel measures are answered at once);
/// `None` if none answered or the handles are gone.
async fn reconnect(
    f: &mut Failover,
    core: &mut ClientCore,
    clock: &Clock,
    requests: &mut mpsc::UnboundedReceiver<Command>,
    held: &mut VecDeque<Command>,
) -> Option<(Welcomed, String)> {
    let give_up = clock.tokio_after(f.opts.reconnect_for);
    let mut delay = f.opts.reconnect_delay;
    for attempt in 0u32.. {
        if attempt > 0 {
            let wake = clock.tokio_after(delay).min(give_up);
            delay = (delay * 2).min(f.opts.reconnect_max_delay);
            loop {
                tokio::select! {
                    () = tokio::time::sleep_until(wake) => break,
                    cmd = requests.recv() => match cmd {
                        Some(Command::Request { frame, reply }) => {
                            held.push_back(Command::Request { frame, reply });
                        }
                        Some(cmd @ Command::Channels { .. }) => {
                            fail(cmd, core, clock, ClientError::Closed);
                        }
                        None => return None,
                    },
                }
            }
        }
        f.current = (f.current + 1) % f.urls.len();
        let url = f.urls[f.current].clone();
        core.reconnect(clock.now());
        let attempt = async {
            let conn = dial(&url, &f.opts).await?;
            handshake(conn, core, clock, &f.opts).await
        };
        match tokio::time::timeout(CONNECT_TIMEOUT, attempt).await {
            Ok(Ok(welcomed)) => return Some((welcomed, url)),
            Ok(Err(e)) => tracing::debug!(url, error = %e, "reconnect failed"),
            Err(_) => tracing::debug!(url, "reconnect timed out"),
        }
        if clock.tokio_after(Duration::ZERO) >= give_up {
            return None;
        }
    }
    None
}

/// How long one reconnect attempt (connect, TLS, `Hello` to `Welcome`)
/// may take before the next address is tried: a node that accepts but
/// never answers must not stall a failover.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// One connection: a tokio driver around [`ClientCore`]. It writes
/// what the core queues, feeds it the relay's frames, sends replies to
/// their requests and everything else to the event channel. The core
/// credits a frame once it is handed over here, and a full event channel
/// stops this task from reading, so a client that stops reading events is
/// eventually a slow consumer to the relay. Transport-blind: `reader` and
/// `writer` hide whether frames travel over TCP or WebSocket.
///
/// When the connection is lost, requests awaiting replies fail with the
/// relay's fatal error (or [`ClientError::Closed`]), or with
/// [`ClientError::Interrupted`] if the client will reconnect
/// (`can_fail_over` and [`reconnects_after`]); without reconnecting,
/// [`ClientEvent::Closed`] is left to the caller.
async fn connection(
    conn: Welcomed,
    core: &mut ClientCore,
    clock: &Clock,
    requests: &mut mpsc::UnboundedReceiver<Command>,
    events: &mpsc::Sender<ClientEvent>,
    held: &mut VecDeque<Command>,
    can_fail_over: bool,
) -> End {
    let Welcomed {
        mut reader,
        mut writer,
        ..
    } = conn;
    // Writes go through their own task so that a relay that is slow to read
    // never stops this one from reading (and crediting) what it sends.
    let (out_tx, mut out_rx) = mpsc::unbounded_channel::<Bytes>();
    let writer = tokio::spawn(async move {
        while let Some(b) = out_rx.recv().await {
            if writer.send(b).await.is_err() {
                break;
            }
        }
        writer.close().await;
    });
    let mut pending: BTreeMap<RequestId, oneshot::Sender<Result<Frame, ClientError>>> =
        BTreeMap::new();
    let submit = |core: &mut ClientCore, cmd: Command, pending: &mut BTreeMap<_, _>| match cmd {
        Command::Request { frame, reply } => match core.request(&frame) {
            Ok(id) => {
                pending.insert(id, reply);
            }
            Err(e) => {
                let _ = reply.send(Err(e));
            }
        },
        cmd @ Command::Channels { .. } => fail(cmd, core, clock, ClientError::Closed),
    };
    for cmd in held.drain(..) {
        submit(core, cmd, &mut pending);
    }
    let mut keepalive = Deadline::new();
    let end = 'run: loop {
        loop {
            while let Some(b) = core.poll_transmit() {
                let _ = out_tx.send(b);
            }
            let Some(ev) = core.poll_event() else { break };
            match ev {
                CoreEvent::Reply { id, result } => {
                    if let Some(tx) = pending.remove(&id) {
                        let _ = tx.send(result);
                    }
                }
                // A dropped receiver discards events; a full one waits here.
                CoreEvent::Deliver(v) => {
                    let _ = events.send(ClientEvent::Deliver(v.to_update())).await;
                }
                CoreEvent::Event(e) => {
                    let _ = events.send(e).await;
                }
                CoreEvent::Closed(e) => break 'run End::Lost(e),
                CoreEvent::Connected { .. } => {}
            }
        }
        keepalive.set(core.poll_timeout().map(|t| clock.to_tokio(t)));
        tokio::select! {
            // Frames first: a keepalive that fell due while this task
            // waited on the application must not end a connection whose
            // frames are waiting to be read.
            biased;
            f = reader.next_frame() => match f {
                Ok(f) => core.handle_frame(clock.now(), f),
                Err(e) => break End::Lost(e.into_fatal()),
            },
            () = keepalive.wait() => core.handle_timeout(clock.now()),
            req = requests.recv() => match req {
                Some(cmd) => submit(core, cmd, &mut pending),
                None => break End::Dropped,
            },
        }
    };
    while let Some(b) = core.poll_transmit() {
        let _ = out_tx.send(b);
    }
    drop(out_tx);
    match &end {
        End::Lost(fatal) if can_fail_over && reconnects_after(fatal) => {
            for (_, tx) in pending {
                let _ = tx.send(Err(ClientError::Interrupted));
            }
            // The relay is gone: nothing left to write worth waiting for.
            writer.abort();
        }
        End::Lost(fatal) => {
            for (_, tx) in pending {
                let _ = tx.send(Err(fatal.clone().unwrap_or(ClientError::Closed)));
            }
            let _ = writer.await;
        }
        End::Dropped => {
            for (_, tx) in pending {
                let _ = tx.send(Err(ClientError::Closed));
            }
            let _ = events.send(ClientEvent::Closed(None)).await;
            let _ = writer.await;
        }
    }
    end
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_pick_their_transport() {
        assert_eq!(
            parse_addr("127.0.0.1:7600"),
            Ok(RelayAddr::Tcp("127.0.0.1:7600"))
        );
        assert_eq!(
            parse_addr("relay.example:7600"),
            Ok(RelayAddr::Tcp("relay.example:7600"))
        );
        assert_eq!(
            parse_addr("tcp://[::1]:7600/"),
            Ok(RelayAddr::Tcp("[::1]:7600"))
        );
        assert_eq!(parse_addr("TCP://h:1"), Ok(RelayAddr::Tcp("h:1")));
        assert_eq!(
            parse_addr("ws://127.0.0.1:7601/"),
            Ok(RelayAddr::Ws("ws://127.0.0.1:7601/"))
        );
        assert_eq!(
            parse_addr("WS://h:1/any/path"),
            Ok(RelayAddr::Ws("WS://h:1/any/path"))
        );
        assert_eq!(
            parse_addr("wss://relay.example:7601/"),
            Ok(RelayAddr::Ws("wss://relay.example:7601/"))
        );
        assert_eq!(
            parse_addr("tls://relay.example:7600"),
            Ok(RelayAddr::Tls("relay.example:7600"))
        );
        assert_eq!(parse_addr("TLS://[::1]:1/"), Ok(RelayAddr::Tls("[::1]:1")));
    }

    #[test]
    fn a_token_goes_in_clear_only_to_loopback_or_when_allowed() {
        let none = ClientOptions::new("a").plaintext_token(PlaintextToken::Never);
        let token = ClientOptions::new("a").token("t");
        let never = token.clone().plaintext_token(PlaintextToken::Never);
        let always = token.clone().plaintext_token(PlaintextToken::Always);
        // (options, encrypted, loopback, allowed)
        for (opts, enc, lo, want) in [
            (&none, false, false, true),
            (&token, false, false, false),
            (&token, true, false, true),
            (&token, false, true, true),
            (&never, false, true, false),
            (&never, true, false, true),
            (&always, false, false, true),
        ] {
            assert_eq!(
                plaintext_token_allowed(opts, enc, lo),
                want,
                "{enc} {lo} {:?}",
                opts.plaintext_token
            );
        }
    }

    #[test]
    fn unusable_addresses_say_why() {
        for (addr, why) in [
            ("", "empty"),
            ("tcp://", "tcp://host:port"),
            ("tcp://h:1/path", "tcp://host:port"),
            ("tls://h", "tls://host:port"),
            ("tls://:7600", "tls://host:port"),
            ("tls://h:1/x", "tls://host:port"),
            ("http://h:1/", "unknown scheme"),
        ] {
            match parse_addr(addr) {
                Err(ClientError::InvalidAddress { addr: a, reason }) => {
                    assert_eq!(a, addr);
                    assert!(reason.contains(why), "{addr}: {reason}");
                }
                other => panic!("{addr}: {other:?}"),
            }
        }
    }
}
