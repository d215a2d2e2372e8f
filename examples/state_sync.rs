//! Shared state: one peer moves the shapes of a whiteboard, the other
//! keeps a replica. Each update carries the whole shape with its version,
//! so a lost one is repaired by the next (latest wins) and the channel asks
//! only that at most 0.1% be lost for good; every 100 updates a snapshot
//! goes on a reliable channel, so the replica converges whatever was lost.
//!
//! ```sh
//! cargo run -p groupwire --example state_sync
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use groupwire::{Event, Qos, Session};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;
/// Shape id -> (version, x, y).
type Board = BTreeMap<u16, (u32, u16, u16)>;

fn encode(board: &Board, ids: impl Iterator<Item = u16>) -> Vec<u8> {
    let mut out = Vec::new();
    for id in ids {
        let (v, x, y) = board[&id];
        for field in [u32::from(id), v, u32::from(x), u32::from(y)] {
            out.extend_from_slice(&field.to_be_bytes());
        }
    }
    out
}

fn apply(board: &mut Board, msg: &[u8]) {
    for rec in msg.chunks_exact(16) {
        let f = |i: usize| u32::from_be_bytes(rec[i * 4..i * 4 + 4].try_into().expect("4 bytes"));
        let (id, v, x, y) = (f(0) as u16, f(1), f(2) as u16, f(3) as u16);
        if board.get(&id).is_none_or(|&(old, _, _)| v > old) {
            board.insert(id, (v, x, y));
        }
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let replica_side = Session::bind("127.0.0.1:0").await?;
    let owner = Session::bind("127.0.0.1:0").await?;
    let peer = owner.connect(replica_side.local_addr()).await?;
    let updates = peer.channel("state", Qos::low_latency().max_loss(0.001))?;
    let snapshots = peer.channel("snapshot", Qos::reliable_ordered())?;

    let mut board: Board = (0..16).map(|id| (id, (0, 0, 0))).collect();
    let mut rng = 0x9e37_79b9_7f4a_7c15_u64; // a fixed seed: the same run every time
    for step in 1..=1000u32 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let id = (rng % 16) as u16;
        board.insert(
            id,
            (step, (rng >> 16) as u16 % 800, (rng >> 32) as u16 % 600),
        );
        updates.send(encode(&board, [id].into_iter()))?;
        if step % 100 == 0 {
            snapshots.send(encode(&board, board.keys().copied()))?;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }

    let mut replica = Board::new();
    let (mut via_updates, mut via_snapshots) = (0, 0);
    while replica != board {
        let ev = tokio::time::timeout(Duration::from_secs(10), replica_side.next_event()).await;
        let Ok(Some(ev)) = ev else { break };
        if let Event::Message {
            channel, payload, ..
        } = ev
        {
            let name = replica_side.channel(channel).map(|c| c.name().to_owned());
            match name.as_deref() {
                Some("state") => via_updates += 1,
                _ => via_snapshots += 1,
            }
            apply(&mut replica, &payload);
        }
    }
    println!("updates received: {via_updates} of 1000; snapshots: {via_snapshots}");
    if let Some(r) = updates.report() {
        println!(
            "the state channel ran on {} ({} wire bytes for {} of payload)",
            r.mechanism, r.stats.wire_bytes, r.stats.sent_bytes
        );
    }
    if replica != board {
        return Err("the replica did not converge".into());
    }
    println!("replica equals the owner's board: {} shapes", replica.len());
    Ok(())
}
