//! A file fetch: a client asks a server for a file on a request channel,
//! and the server sends it back on a bulk channel (reliable, in order),
//! in 64 KiB chunks and then its BLAKE3 hash, which the client checks.
//!
//! ```sh
//! cargo run -p groupwire --example file_fetch            # 8 MiB, both ends here
//! cargo run -p groupwire --example file_fetch -- FILE    # serve and fetch FILE
//! ```

use std::time::Duration;

use groupwire::{Event, Qos, SendError, Session};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;
const CHUNK: usize = 64 << 10;

#[tokio::main]
#[expect(
    clippy::disallowed_methods,
    reason = "an application times its own fetch"
)]
async fn main() -> Result<()> {
    let data = match std::env::args().nth(1) {
        Some(path) => std::fs::read(path)?,
        // 8 MiB of reproducible bytes.
        None => {
            let mut v = vec![0; 8 << 20];
            blake3::Hasher::new()
                .update(b"file_fetch")
                .finalize_xof()
                .fill(&mut v);
            v
        }
    };
    let server = Session::bind("127.0.0.1:0").await?;
    let client = Session::bind("127.0.0.1:0").await?;
    let server_addr = server.local_addr();
    let server_task = tokio::spawn(serve(server, data));

    let started = std::time::Instant::now();
    let peer = client.connect(server_addr).await?;
    peer.channel("requests", Qos::reliable_ordered())?
        .send(b"the file")?;
    let (mut file, mut hash) = (Vec::new(), None);
    while hash.is_none() {
        let ev = tokio::time::timeout(Duration::from_secs(30), client.next_event()).await;
        let Ok(Some(ev)) = ev else {
            return Err("the server stopped answering".into());
        };
        if let Event::Message { payload, .. } = ev {
            match payload.split_first() {
                Some((b'D', chunk)) => file.extend_from_slice(chunk),
                Some((b'H', h)) => hash = Some(h.to_vec()),
                _ => {}
            }
        }
    }
    let secs = started.elapsed().as_secs_f64();
    if blake3::hash(&file).as_bytes()[..] != hash.unwrap_or_default()[..] {
        return Err("the hash does not match".into());
    }
    println!(
        "fetched {} bytes in {secs:.2} s ({:.0} Mbit/s), BLAKE3 checked",
        file.len(),
        file.len() as f64 * 8.0 / secs / 1e6
    );
    server_task.abort();
    Ok(())
}

/// Answers every request with the file on a bulk channel to the asker.
async fn serve(s: Session, data: Vec<u8>) -> Result<()> {
    while let Some(ev) = s.next_event().await {
        let Event::Message { channel, .. } = ev else {
            continue;
        };
        let Some(peer) = s.peer(channel.peer) else {
            continue;
        };
        let bulk = peer.channel("dataset", Qos::bulk())?;
        for chunk in data.chunks(CHUNK) {
            let msg = [&b"D"[..], chunk].concat();
            loop {
                match bulk.send(&msg) {
                    // Past the stream's queue limit: wait for it to drain.
                    Err(SendError::Full) => tokio::time::sleep(Duration::from_millis(5)).await,
                    r => break r?,
                }
            }
        }
        bulk.send([&b"H"[..], blake3::hash(&data).as_bytes()].concat())?;
    }
    Ok(())
}
