//! The relay's protocol core driven by four hostile clients.

use std::time::Duration;

use bytes::Bytes;
use groupwire_proto::Instant;
use groupwire_relay::CoreConfig;
use groupwire_relay::core::RelayCore;
use groupwire_relay::frame::{Frame, decode, encode};
use groupwire_relay::sched::ConnId;
use groupwire_relay::storage::{MemoryStorage, execute};

/// Client slots; each holds one connection at a time.
const SLOTS: usize = 4;

/// Steps one input may take to drain the core; far above what any input
/// needs, so reaching it means the core livelocked.
const MAX_STEPS: usize = 100_000;

/// The relay core (with memory storage run in-line, as the server's
/// storage thread would) fed what four clients send, whatever it is: the
/// same frames reach it over TCP and over WebSocket, so this covers both
/// transports' input past the framing.
///
/// The input is a list of operations `[op, len, len bytes]`: the high
/// nibble of `op` picks the client, the low nibble what it does (send the
/// bytes as one frame, which most ops do; hang up and reconnect; let time
/// pass by the first byte in 10 ms steps). Every client credits what it
/// receives, as a reading client does.
///
/// Checks: nothing panics, every frame the relay emits decodes, and the
/// core drains to quiescence after each input.
pub fn relay_core(data: &[u8]) {
    let mut core = RelayCore::new(CoreConfig {
        transfer_page_bytes: 4 << 10,
        ..CoreConfig::default()
    });
    let mut store = MemoryStorage::new();
    let mut now = Instant::ZERO;
    let mut next_conn = ConnId(1);
    let mut slots = [0; SLOTS].map(|_| {
        let c = next_conn;
        next_conn = ConnId(next_conn.0 + 1);
        core.handle_connect(now, c);
        Slot {
            conn: c,
            consumed: 0,
        }
    });
    let mut rest = data;
    while let [op, len, tail @ ..] = rest {
        let n = usize::from(*len).min(tail.len());
        let (body, next) = tail.split_at(n);
        rest = next;
        let slot = usize::from(op >> 4) % SLOTS;
        match (op & 0x0f) % 6 {
            4 => {
                core.handle_disconnect(now, slots[slot].conn);
                slots[slot] = Slot {
                    conn: next_conn,
                    consumed: 0,
                };
                core.handle_connect(now, next_conn);
                next_conn = ConnId(next_conn.0 + 1);
            }
            5 => {
                let steps = body.first().copied().unwrap_or(1);
                now += Duration::from_millis(10 * u64::from(steps));
                core.handle_timeout(now);
            }
            _ => core.handle_frame(now, slots[slot].conn, &Bytes::copy_from_slice(body)),
        }
        pump(&mut core, &mut store, &mut slots, &mut next_conn, now);
    }
}

/// A client's connection and the bytes it has read from it.
struct Slot {
    conn: ConnId,
    consumed: u64,
}

/// Runs storage and transmits until the core has nothing more to do.
fn pump(
    core: &mut RelayCore,
    store: &mut MemoryStorage,
    slots: &mut [Slot; SLOTS],
    next_conn: &mut ConnId,
    now: Instant,
) {
    for _ in 0..MAX_STEPS {
        let mut progress = false;
        let ops: Vec<_> = std::iter::from_fn(|| core.poll_storage()).collect();
        if !ops.is_empty() {
            progress = true;
            for done in execute(store, ops) {
                core.handle_storage(now, done);
            }
        }
        while let Some(t) = core.poll_transmit(now) {
            progress = true;
            core.handle_written(t.conn, t.frame.len());
            if let Err(e) = decode(&t.frame, usize::MAX) {
                panic!("the relay emitted a frame that does not decode: {e:?}");
            }
            let Some(slot) = slots.iter_mut().find(|s| s.conn == t.conn) else {
                continue; // written to a connection already gone
            };
            slot.consumed += t.frame.len() as u64;
            if t.close_after {
                core.handle_disconnect(now, slot.conn);
                *slot = Slot {
                    conn: *next_conn,
                    consumed: 0,
                };
                core.handle_connect(now, *next_conn);
                *next_conn = ConnId(next_conn.0 + 1);
            } else {
                let credit = encode(
                    0,
                    &Frame::Credit {
                        consumed: slot.consumed,
                    },
                );
                core.handle_frame(now, slot.conn, &credit);
            }
        }
        if !progress {
            return;
        }
    }
    panic!("the relay core did not drain in {MAX_STEPS} steps");
}
