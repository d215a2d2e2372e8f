//! The relay client's protocol core driven by a hostile relay.

use std::time::Duration;

use bytes::Bytes;
use groupwire_proto::Instant;
use groupwire_relay::ClientOptions;
use groupwire_relay::client::meter::MAX_GROUPS;
use groupwire_relay::client::{ClientCore, CoreEvent};
use groupwire_relay::frame::{self, ActivityMode, Frame, Role, encode};

/// The groups the client joins; the relay may name any others.
const JOINED: [&str; 2] = ["a", "b"];

/// A [`ClientCore`] that has been welcomed and asked to join two groups,
/// then fed the input as the relay's byte stream: `[op, len, len bytes]`
/// operations, where `op`'s low bit picks whether the bytes are handed in
/// as stream bytes or as one whole frame (WebSocket), and its other bits
/// let that many milliseconds pass first. The client drains after each
/// operation, as the drain contract says, and a snapshot of its channel
/// measures is taken every few operations.
///
/// Checks: nothing panics; the core meters only groups it joined (a relay
/// cannot make it allocate meters by naming groups); every snapshot is
/// consistent (losses at most what was judged, rebuilt paths none, a
/// latency count at most the deliveries and duplicates).
pub fn relay_client(data: &[u8]) {
    let _ = run(data);
}

/// [`relay_client`]'s body; the last snapshots.
fn run(data: &[u8]) -> Vec<groupwire_metrics::ChannelSnapshot> {
    let opts = ClientOptions {
        shared_clock_micros: Some(1_000_000),
        ..ClientOptions::new("fuzz")
    };
    let mut now = Instant::ZERO;
    let mut core = ClientCore::new(now, &opts);
    core.handle_bytes(
        now,
        &encode(
            1,
            &Frame::Welcome {
                version: frame::VERSION,
                client: 1,
                max_frame: 1 << 20,
                window: 1 << 16,
                resume: true,
            },
        ),
    );
    drain(&mut core);
    for g in JOINED {
        let _ = core.request(&Frame::Join {
            group: g.into(),
            role: Role::Principal,
            mode: ActivityMode::Active,
            watch_membership: true,
            resume_after: None,
        });
    }
    drain(&mut core);
    let mut rest = data;
    let mut ops = 0u32;
    while let [op, len, tail @ ..] = rest {
        let n = usize::from(*len).min(tail.len());
        let (body, next) = tail.split_at(n);
        rest = next;
        now += Duration::from_millis(u64::from(op >> 1));
        if op & 1 == 0 {
            core.handle_bytes(now, body);
        } else {
            core.handle_frame(now, Bytes::copy_from_slice(body));
        }
        if drain(&mut core) {
            break;
        }
        ops += 1;
        if ops % 8 == 0 {
            check(&mut core, now);
        }
    }
    core.finish_channels();
    check(&mut core, now + Duration::from_secs(1))
}

/// Drains transmits and events; whether the connection closed.
fn drain(core: &mut ClientCore) -> bool {
    loop {
        while core.poll_transmit().is_some() {}
        match core.poll_event() {
            Some(CoreEvent::Closed(_)) => return true,
            Some(_) => {}
            None => return core.is_closed(),
        }
    }
}

fn check(core: &mut ClientCore, now: Instant) -> Vec<groupwire_metrics::ChannelSnapshot> {
    let snaps = core.channel_snapshots(now);
    assert!(snaps.len() <= JOINED.len().min(MAX_GROUPS));
    for s in &snaps {
        assert!(
            JOINED.iter().any(|g| s.channel == format!("relay {g}")),
            "{}",
            s.channel
        );
        assert!(s.loss.residual_lost <= s.loss.judged);
        assert_eq!(s.loss.wire_lost, s.loss.residual_lost);
        let delivered: u64 = s.paths.values().sum();
        assert_eq!(delivered, s.paths["arrived"], "nothing is rebuilt");
        assert!(delivered <= s.inbound.packets);
        // A duplicate still reached the application: its latency counts.
        assert!(s.latency_total.count <= delivered + s.loss.duplicates);
    }
    snaps
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The committed seeds reach the meters (a harness that never got past
    /// the handshake would pass every input and find nothing).
    #[test]
    fn the_seeds_reach_the_meters() {
        let dir = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../fuzz/corpus/relay_client"
        );
        let gap = run(&std::fs::read(format!("{dir}/gap_and_unjoined")).expect("seed"));
        let [a, b] = &gap[..] else { panic!("{gap:?}") };
        assert_eq!((a.loss.judged, a.loss.residual_lost), (12, 2));
        assert_eq!(a.latency_total.count, 8, "1 and 2 replay the log");
        assert_eq!(b.paths["arrived"], 1);
        let resync = run(&std::fs::read(format!("{dir}/resync_replay")).expect("seed"));
        let a = &resync[0];
        assert_eq!((a.loss.judged, a.loss.residual_lost), (16, 4));
        assert_eq!(a.latency_total.count, 4 + 2);
    }
}
