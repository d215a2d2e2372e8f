//! Writes seed inputs for the targets whose inputs are structured
//! (`relay_core`, `scenario`) into `fuzz/corpus/`, so a campaign starts
//! from inputs that reach deep into the code instead of rediscovering the
//! frame layout. Run once after changing a target's input format:
//!
//! ```sh
//! cargo run -p groupwire-fuzz-targets --example seed_corpus
//! ```

use std::path::Path;

use bytes::Bytes;
use groupwire_relay::frame::{ActivityMode, Frame, Role, encode};
use groupwire_sim::scenario::builtins;

/// One `relay_core` operation: client `slot` sends `frame`.
fn send(out: &mut Vec<u8>, slot: u8, frame: &Frame) {
    let bytes = encode(7, frame);
    assert!(bytes.len() <= 255, "seed frames fit the one-byte length");
    out.extend([slot << 4, bytes.len() as u8]);
    out.extend_from_slice(&bytes);
}

fn hello(name: &str) -> Frame {
    Frame::Hello {
        max_version: 1,
        window: 0,
        token: String::new(),
        name: name.into(),
    }
}

fn main() -> std::io::Result<()> {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
    let g = || "g".to_owned();
    let mut session = Vec::new();
    send(&mut session, 0, &hello("alice"));
    send(&mut session, 1, &hello("bob"));
    send(&mut session, 2, &hello("carol"));
    send(
        &mut session,
        0,
        &Frame::CreateGroup {
            group: g(),
            group_type: "chat".into(),
            priority: 6,
            initial_state: Bytes::from_static(b"s0"),
        },
    );
    for (slot, role) in [
        (0, Role::Principal),
        (1, Role::Observer),
        (2, Role::MembershipObserver),
    ] {
        let join = Frame::Join {
            group: g(),
            role,
            mode: ActivityMode::Active,
            watch_membership: slot != 1,
        };
        send(&mut session, slot, &join);
    }
    let mut updates = session.clone();
    for i in 0..5u8 {
        let payload = Bytes::from(vec![i; 40]);
        let update = Frame::Send {
            group: g(),
            msg_type: 1,
            sent_at_micros: 5,
            payload,
        };
        send(&mut updates, 0, &update);
    }
    let checkpoint = Frame::Checkpoint {
        group: g(),
        seq: 3,
        state: Bytes::from_static(b"s3"),
    };
    send(&mut updates, 0, &checkpoint);
    let mut locks = session.clone();
    for slot in [0, 1] {
        let acquire = Frame::LockAcquire {
            group: g(),
            lock: "pen".into(),
            wait: true,
        };
        send(&mut locks, slot, &acquire);
    }
    locks.extend([0x04, 0]); // client 0 hangs up holding the lock
    let mut churn = updates.clone();
    churn.extend([0x15, 1, 50]); // half a second passes
    let role_change = Frame::ChangeRole {
        group: g(),
        role: Role::Principal,
    };
    send(&mut churn, 1, &role_change);
    send(
        &mut churn,
        0,
        &Frame::SetPriority {
            group: g(),
            priority: 2,
        },
    );
    send(&mut churn, 0, &Frame::Leave { group: g() });
    send(&mut churn, 1, &Frame::DeleteGroup { group: g() });
    send(&mut churn, 3, &Frame::Ping { nonce: 9 });
    let dir = corpus.join("relay_core");
    std::fs::create_dir_all(&dir)?;
    for (name, input) in [
        ("session", session),
        ("updates", updates),
        ("locks", locks),
        ("churn", churn),
    ] {
        std::fs::write(dir.join(format!("seed-{name}")), input)?;
    }

    let dir = corpus.join("scenario");
    std::fs::create_dir_all(&dir)?;
    for b in builtins() {
        std::fs::write(dir.join(format!("seed-{}", b.name)), (b.make)().to_toml())?;
    }
    let sets = "set:\nduration=3s\nseed=7\nloss=gilbert:p=0.01,r=0.2\nflows=[1,2]\nrtt=100ms\n";
    std::fs::write(dir.join("seed-sets"), sets)?;
    Ok(())
}
