//! A telepointer: one peer moves a pointer 30 times a second on an
//! awareness channel, the other shows it. Losing a few positions is fine,
//! they are stale a moment later (Dyck & Gutwin), so the channel asks for a
//! message error rate between 5% and 6% and groupwire spends no more
//! redundancy than that needs.
//!
//! ```sh
//! cargo run -p groupwire --example telepointer                 # both ends here, 5 s
//! cargo run -p groupwire --example telepointer -- listen 7400  # the viewer
//! cargo run -p groupwire --example telepointer -- connect 127.0.0.1:7400
//! ```

use std::net::SocketAddr;
use std::time::Duration;

use groupwire::{Event, Qos, Session};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

#[tokio::main]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["listen", port] => view(Session::bind(format!("0.0.0.0:{port}")).await?).await,
        ["connect", addr] => {
            move_pointer(Session::bind("0.0.0.0:0").await?, addr.parse()?, 1800).await
        }
        [] => {
            let viewer = Session::bind("127.0.0.1:0").await?;
            let mover = Session::bind("127.0.0.1:0").await?;
            let task = tokio::spawn(move_pointer(mover, viewer.local_addr(), 150));
            view(viewer).await?;
            task.await?
        }
        _ => Err("usage: telepointer [listen PORT | connect ADDR]".into()),
    }
}

/// Sends `n` positions along a circle, one every 33 ms.
async fn move_pointer(s: Session, to: SocketAddr, n: u32) -> Result<()> {
    let peer = s.connect(to).await?;
    let pointer = peer.channel("telepointer", Qos::awareness().mer_band(0.05, 0.06))?;
    let mut tick = tokio::time::interval(Duration::from_millis(33));
    for i in 0..n {
        tick.tick().await;
        let a = f64::from(i) / 30.0;
        let (x, y) = (
            (400.0 + 300.0 * a.cos()) as u16,
            (300.0 + 200.0 * a.sin()) as u16,
        );
        let mut msg = i.to_be_bytes().to_vec();
        msg.extend_from_slice(&x.to_be_bytes());
        msg.extend_from_slice(&y.to_be_bytes());
        pointer.send(msg)?;
    }
    if let Some(r) = pointer.report() {
        println!(
            "\nsent {} positions on {}: {} bytes on the wire for {} of payload",
            r.stats.sent, r.mechanism, r.stats.wire_bytes, r.stats.sent_bytes
        );
    }
    s.close().await?;
    Ok(())
}

/// Shows the pointer until it has been still for two seconds.
async fn view(s: Session) -> Result<()> {
    let (mut newest, mut got, mut recovered) = (None::<u32>, 0u32, 0u32);
    loop {
        let patience = Duration::from_secs(if got == 0 { 3600 } else { 2 });
        let Ok(Some(ev)) = tokio::time::timeout(patience, s.next_event()).await else {
            break;
        };
        match ev {
            Event::Message {
                payload,
                via,
                recovered: r,
                ..
            } if payload.len() == 8 => {
                let i = u32::from_be_bytes(payload[..4].try_into()?);
                let x = u16::from_be_bytes(payload[4..6].try_into()?);
                let y = u16::from_be_bytes(payload[6..8].try_into()?);
                got += 1;
                recovered += u32::from(r);
                if newest.is_none_or(|n| i > n) {
                    newest = Some(i);
                    print!(
                        "\rpointer at ({x:3}, {y:3}) via {via:<5}  positions {got}, rebuilt {recovered}   "
                    );
                }
            }
            Event::MechanismChanged { from, to, .. } => {
                println!("\nthe selector moved the pointer from {from} to {to}")
            }
            _ => {}
        }
    }
    let sent = newest.map_or(0, |n| n + 1);
    println!("\nreceived {got} of {sent} positions ({recovered} rebuilt by redundancy)");
    Ok(())
}
