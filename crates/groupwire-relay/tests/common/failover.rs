//! Failover checks shared by `tests/failover.rs` (one relay that restarts)
//! and `tests/cluster.rs` (nodes on one NATS): a sender that keeps
//! sending through a failover, a watcher's deliveries, and the one check
//! that matters: every acknowledged update delivered once, in order.

use std::time::Duration;

use bytes::Bytes;
use groupwire_relay::storage::Update;
use groupwire_relay::{ClientError, ClientEvent, ClientOptions, RelayClient};
use tokio::sync::{mpsc, watch};

use super::LIMIT;

/// Options of a failover client named `name`: a short keepalive, so a
/// silent relay is noticed within a test's time too.
pub(crate) fn opts(name: &str) -> ClientOptions {
    ClientOptions::new(name).keepalive(Duration::from_secs(2))
}

/// A client of the first of `urls` that answers, failing over to the
/// others.
pub(crate) async fn failover_client(
    urls: &[String],
    name: &str,
) -> (RelayClient, mpsc::Receiver<ClientEvent>) {
    RelayClient::connect_failover(urls, opts(name))
        .await
        .expect("connect")
}

/// What a sender got back.
#[derive(Debug, Default)]
pub(crate) struct Sent {
    /// Acknowledged updates: (sequence, payload).
    pub(crate) acked: Vec<(u64, Bytes)>,
    /// Sends that failed with [`ClientError::Interrupted`]: stored or not.
    pub(crate) interrupted: Vec<Bytes>,
}

/// Sends `u{i}` to `group` for every `i` of `range`, each acknowledged.
pub(crate) async fn send_numbered(
    c: &RelayClient,
    group: &str,
    range: std::ops::RangeInclusive<u32>,
) {
    for i in range {
        c.send(group, 1, Bytes::from(format!("u{i}")))
            .await
            .expect("send");
    }
}

/// How long a send of [`keep_sending`] waits before it says so.
const SLOW_SEND: Duration = Duration::from_secs(5);

/// Sends `{tag}{i}` to `group`, one after another, until `stop` says so.
pub(crate) fn keep_sending(
    c: &RelayClient,
    group: &'static str,
    tag: &'static str,
    mut stop: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<Sent> {
    let c = c.clone();
    tokio::spawn(async move {
        let mut sent = Sent::default();
        for i in 0.. {
            if *stop.borrow_and_update() {
                break;
            }
            let payload = Bytes::from(format!("{tag}{i}"));
            let send = c.send(group, 1, payload.clone());
            tokio::pin!(send);
            // A send left unanswered is said while it waits: when a
            // watcher then hears nothing, the output tells a stalled
            // group from a stalled delivery.
            let answer = loop {
                tokio::select! {
                    r = &mut send => break r,
                    () = tokio::time::sleep(SLOW_SEND) => eprintln!(
                        "sender {tag}: {tag}{i} unanswered for {SLOW_SEND:?} (last acknowledged: {:?})",
                        sent.acked.last().map(|(seq, _)| seq)
                    ),
                }
            };
            match answer {
                Ok(seq) => sent.acked.push((seq, payload)),
                Err(ClientError::Interrupted) => sent.interrupted.push(payload),
                Err(e) => panic!(
                    "send {tag}{i} after {} acked, {} interrupted: {e}",
                    sent.acked.len(),
                    sent.interrupted.len()
                ),
            }
        }
        sent
    })
}

/// What a watcher saw.
#[derive(Debug, Default)]
pub(crate) struct Watched {
    pub(crate) updates: Vec<Update>,
    /// The `url` of each `Reconnected`.
    pub(crate) reconnects: Vec<String>,
    /// `Resync` then `State`: (dropped, the state's checkpoint_seq).
    pub(crate) resyncs: Vec<(u64, u64)>,
}

impl Watched {
    /// Reads `events` until `done(self)`, at most [`LIMIT`] per event.
    pub(crate) async fn until(
        &mut self,
        events: &mut mpsc::Receiver<ClientEvent>,
        mut done: impl FnMut(&Self) -> bool,
    ) {
        let mut dropped = None;
        while !done(self) {
            match tokio::time::timeout(LIMIT, events.recv()).await {
                Ok(Some(ClientEvent::Deliver(u))) => self.updates.push(u),
                Ok(Some(ClientEvent::Reconnected { url, .. })) => self.reconnects.push(url),
                Ok(Some(ClientEvent::Resync { dropped: d, .. })) => dropped = Some(d),
                Ok(Some(ClientEvent::State(j))) => {
                    self.resyncs
                        .push((dropped.take().expect("Resync first"), j.checkpoint_seq));
                }
                Ok(Some(ClientEvent::Closed(e))) => panic!("watcher closed: {e:?}"),
                Ok(Some(ClientEvent::RejoinFailed { group, error })) => {
                    panic!("watcher's re-join of {group} failed: {error}")
                }
                Ok(Some(_)) => {}
                Ok(None) => panic!("watcher's events ended"),
                Err(_) => panic!(
                    "nothing for {LIMIT:?}; {} updates, last {:?}, reconnects {:?}",
                    self.updates.len(),
                    self.updates.last().map(|u| u.seq),
                    self.reconnects
                ),
            }
        }
    }

    /// The last sequence delivered.
    pub(crate) fn last(&self) -> u64 {
        self.updates.last().map_or(0, |u| u.seq)
    }

    /// After the watcher's node went away: waits for its reconnect and 20
    /// more updates, stops `sender` through `stop`, waits for the last
    /// update it had acknowledged, and checks that every one arrived
    /// once and in order. Returns what was sent.
    pub(crate) async fn through_failover(
        &mut self,
        events: &mut mpsc::Receiver<ClientEvent>,
        stop: watch::Sender<bool>,
        sender: tokio::task::JoinHandle<Sent>,
    ) -> Sent {
        self.until(events, |w| !w.reconnects.is_empty()).await;
        let at_reconnect = self.updates.len();
        self.until(events, |w| w.updates.len() >= at_reconnect + 20)
            .await;
        stop.send(true).expect("sender runs");
        let sent = sender.await.expect("sender");
        let last_acked = sent.acked.last().expect("acked").0;
        self.until(events, |w| w.last() >= last_acked).await;
        assert_exactly_once_in_order(self, &sent, 1);
        sent
    }

    /// Waits for the last update acknowledged in `sent` (sorted), then
    /// checks that every one arrived once and in order from #1, with no
    /// resync (nothing was compacted). `who` names the watcher in a failure.
    pub(crate) async fn got_every_ack_without_resync(
        &mut self,
        events: &mut mpsc::Receiver<ClientEvent>,
        sent: &Sent,
        who: usize,
    ) {
        let last = sent.acked.last().expect("acked").0;
        self.until(events, |w| w.last() >= last).await;
        assert_exactly_once_in_order(self, sent, 1);
        assert!(
            self.resyncs.is_empty(),
            "watcher {who}: no compaction, no resync"
        );
    }
}

/// Every update of `watched` follows the one before it (`first` first):
/// no gap, no duplicate; every acknowledged update is among them with
/// its payload; each interrupted send is there at most once.
pub(crate) fn assert_exactly_once_in_order(watched: &Watched, sent: &Sent, first: u64) {
    let seqs: Vec<u64> = watched.updates.iter().map(|u| u.seq).collect();
    let want: Vec<u64> = (first..first + seqs.len() as u64).collect();
    assert_eq!(seqs, want, "no gap, no duplicate, in order");
    for (seq, payload) in &sent.acked {
        let i = usize::try_from(seq - first).expect("small");
        let got = watched
            .updates
            .get(i)
            .unwrap_or_else(|| panic!("acknowledged #{seq} not delivered"));
        assert_eq!(&got.payload, payload, "#{seq}");
    }
    for p in &sent.interrupted {
        let n = watched.updates.iter().filter(|u| u.payload == p).count();
        assert!(n <= 1, "interrupted {p:?} delivered {n} times");
    }
}
