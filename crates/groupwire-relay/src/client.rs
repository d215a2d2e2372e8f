//! The client library: one TCP connection to a relay, any number of groups.
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

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, ToSocketAddrs};
use tokio::sync::{mpsc, oneshot};

use crate::frame::{
    self, ActivityMode, ErrorCode, Frame, FrameDecoder, MemberInfo, MembershipChange, Role,
};

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
}

impl ClientOptions {
    /// Options with a name and defaults otherwise.
    pub fn new(name: &str) -> Self {
        Self {
            name: name.into(),
            token: String::new(),
            window: 0,
            event_capacity: 1024,
        }
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
}

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

/// A sequenced update as delivered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// Group name.
    pub group: String,
    /// The relay's sequence number (total order within the group).
    pub seq: u64,
    /// Sender's client id.
    pub sender: u64,
    /// Application message type.
    pub msg_type: u16,
    /// The sender's timestamp (wall-clock microseconds by default).
    pub sent_at_micros: u64,
    /// The update.
    pub payload: Bytes,
}

/// The state transfer a join (or a resync) returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JoinInfo {
    /// Group name.
    pub group: String,
    /// Group type.
    pub group_type: String,
    /// Sequence the checkpoint includes; deliveries follow from the next.
    pub checkpoint_seq: u64,
    /// Last sequence assigned when the join took effect.
    pub head_seq: u64,
    /// The checkpoint state.
    pub state: Bytes,
    /// Members at join time.
    pub members: Vec<MemberInfo>,
}

/// What arrives without being asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClientEvent {
    /// A sequenced update.
    Deliver(Delivery),
    /// A membership change.
    Membership {
        /// Group name.
        group: String,
        /// The member.
        client: u64,
        /// Its name.
        name: String,
        /// What happened.
        change: MembershipChange,
        /// Role after the change.
        role: Role,
        /// Mode after the change.
        mode: ActivityMode,
    },
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
}

/// A connection to a relay. Cheap to clone; requests may run concurrently.
#[derive(Clone, Debug)]
pub struct RelayClient {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    requests: mpsc::UnboundedSender<Request>,
    next: AtomicU32,
    client_id: u64,
    window: u32,
}

struct Request {
    id: u32,
    frame: Frame,
    reply: Option<oneshot::Sender<Result<Frame, ClientError>>>,
}

impl RelayClient {
    /// Connects, says `Hello` and waits for `Welcome`.
    pub async fn connect(
        addr: impl ToSocketAddrs,
        opts: ClientOptions,
    ) -> Result<(RelayClient, mpsc::Receiver<ClientEvent>), ClientError> {
        let mut stream = TcpStream::connect(addr)
            .await
            .map_err(|e| ClientError::Connect(e.to_string()))?;
        let _ = stream.set_nodelay(true);
        let hello = frame::encode(
            1,
            &Frame::Hello {
                max_version: frame::VERSION,
                window: opts.window,
                token: opts.token.clone(),
                name: opts.name.clone(),
            },
        );
        stream
            .write_all(&hello)
            .await
            .map_err(|e| ClientError::Connect(e.to_string()))?;
        let mut decoder = FrameDecoder::new(frame::DEFAULT_MAX_FRAME);
        let mut consumed = 0u64;
        let welcome = loop {
            if let Some(f) = decoder
                .next_frame()
                .map_err(|e| ClientError::Unexpected(e.to_string()))?
            {
                consumed += f.len() as u64;
                break frame::decode(&f, usize::MAX)
                    .map_err(|e| ClientError::Unexpected(e.to_string()))?;
            }
            let n = stream
                .read_buf(decoder.buffer_mut())
                .await
                .map_err(|e| ClientError::Connect(e.to_string()))?;
            if n == 0 {
                return Err(ClientError::Closed);
            }
        };
        let (client_id, window, max_frame) = match welcome.frame {
            Frame::Welcome {
                client,
                window,
                max_frame,
                ..
            } => (client, window, max_frame),
            Frame::Error { code, message } => return Err(ClientError::Relay { code, message }),
            other => return Err(ClientError::Unexpected(format!("{:?}", other.kind()))),
        };
        let mut decoder2 = FrameDecoder::new(max_frame as usize);
        decoder2.extend(&decoder.buffer_mut().split());
        let (req_tx, req_rx) = mpsc::unbounded_channel();
        let (ev_tx, ev_rx) = mpsc::channel(opts.event_capacity.max(1));
        tokio::spawn(connection(
            stream, decoder2, consumed, window, req_rx, ev_tx,
        ));
        Ok((
            RelayClient {
                inner: Arc::new(Inner {
                    requests: req_tx,
                    next: AtomicU32::new(2),
                    client_id,
                    window,
                }),
            },
            ev_rx,
        ))
    }

    /// This client's id (as members and senders are named).
    pub fn client_id(&self) -> u64 {
        self.inner.client_id
    }

    /// The send window the relay granted.
    pub fn window(&self) -> u32 {
        self.inner.window
    }

    async fn request(&self, frame: Frame) -> Result<Frame, ClientError> {
        let id = self.inner.next.fetch_add(1, Ordering::Relaxed).max(1);
        let (tx, rx) = oneshot::channel();
        self.inner
            .requests
            .send(Request {
                id,
                frame,
                reply: Some(tx),
            })
            .map_err(|_| ClientError::Closed)?;
        rx.await.map_err(|_| ClientError::Closed)?
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
            })
            .await?
        {
            Frame::Joined {
                group,
                group_type,
                checkpoint_seq,
                head_seq,
                state,
                members,
            } => Ok(JoinInfo {
                group,
                group_type,
                checkpoint_seq,
                head_seq,
                state,
                members,
            }),
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

/// Wall-clock microseconds since the Unix epoch, for `sent_at_micros`.
#[expect(
    clippy::disallowed_methods,
    reason = "the client stamps updates with wall-clock time so receivers in other processes can measure latency"
)]
pub fn wall_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// The connection task: writes requests, reads frames, routes replies to
/// their requests and everything else to the event channel, and returns
/// credit as frames are handed over.
async fn connection(
    stream: TcpStream,
    mut decoder: FrameDecoder,
    mut consumed: u64,
    window: u32,
    mut requests: mpsc::UnboundedReceiver<Request>,
    events: mpsc::Sender<ClientEvent>,
) {
    let (mut rd, mut wr) = stream.into_split();
    let (out_tx, mut out_rx) = mpsc::unbounded_channel::<Bytes>();
    let writer = tokio::spawn(async move {
        while let Some(b) = out_rx.recv().await {
            if wr.write_all(&b).await.is_err() {
                break;
            }
        }
    });
    let mut pending: BTreeMap<u32, oneshot::Sender<Result<Frame, ClientError>>> = BTreeMap::new();
    let mut credited = consumed;
    let credit_every = u64::from(window / 4).max(1);
    let mut fatal: Option<ClientError> = None;
    'outer: loop {
        // Whole frames already buffered first.
        loop {
            let f = match decoder.next_frame() {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => {
                    fatal = Some(ClientError::Unexpected(e.to_string()));
                    break 'outer;
                }
            };
            consumed += f.len() as u64;
            let Ok(env) = frame::decode(&f, usize::MAX) else {
                fatal = Some(ClientError::Unexpected("undecodable frame".into()));
                break 'outer;
            };
            let req = env.request;
            let event = match env.frame {
                Frame::Deliver {
                    group,
                    seq,
                    sender,
                    msg_type,
                    sent_at_micros,
                    payload,
                } => Some(ClientEvent::Deliver(Delivery {
                    group,
                    seq,
                    sender,
                    msg_type,
                    sent_at_micros,
                    payload,
                })),
                Frame::Membership {
                    group,
                    client,
                    name,
                    change,
                    role,
                    mode,
                } => Some(ClientEvent::Membership {
                    group,
                    client,
                    name,
                    change,
                    role,
                    mode,
                }),
                Frame::GroupDeleted { group } => Some(ClientEvent::GroupDeleted(group)),
                Frame::Resync { group, dropped } => Some(ClientEvent::Resync { group, dropped }),
                Frame::Joined {
                    group,
                    group_type,
                    checkpoint_seq,
                    head_seq,
                    state,
                    members,
                } if req == 0 => Some(ClientEvent::State(JoinInfo {
                    group,
                    group_type,
                    checkpoint_seq,
                    head_seq,
                    state,
                    members,
                })),
                Frame::Error { code, message } if req == 0 || !pending.contains_key(&req) => {
                    fatal = Some(ClientError::Relay { code, message });
                    None
                }
                reply => {
                    if let Some(tx) = pending.remove(&req) {
                        let r = match reply {
                            Frame::Error { code, message } => {
                                Err(ClientError::Relay { code, message })
                            }
                            other => Ok(other),
                        };
                        let _ = tx.send(r);
                    }
                    None
                }
            };
            if let Some(ev) = event {
                // A dropped receiver discards events; a full one waits here.
                let _ = events.send(ev).await;
            }
            if consumed - credited >= credit_every {
                credited = consumed;
                let _ = out_tx.send(frame::encode(0, &Frame::Credit { consumed }));
            }
        }
        tokio::select! {
            r = rd.read_buf(decoder.buffer_mut()) => match r {
                Ok(0) | Err(_) => break 'outer,
                Ok(_) => {}
            },
            req = requests.recv() => match req {
                Some(r) => {
                    if let Some(tx) = r.reply {
                        pending.insert(r.id, tx);
                    }
                    let _ = out_tx.send(frame::encode(r.id, &r.frame));
                }
                None => break 'outer,
            },
        }
    }
    for (_, tx) in pending {
        let _ = tx.send(Err(fatal.clone().unwrap_or(ClientError::Closed)));
    }
    let _ = events.send(ClientEvent::Closed(fatal)).await;
    drop(out_tx);
    let _ = writer.await;
}
