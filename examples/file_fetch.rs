//! A file fetch: a client asks a server for a file on a request channel,
//! and the server sends it back on a bulk channel with
//! `Channel::send_file` (chunks, then its BLAKE3 hash); the client's
//! `FileReceiver` stores it in a directory and checks the hash.
//!
//! ```sh
//! cargo run -p groupwire --example file_fetch            # 8 MiB, both ends here
//! cargo run -p groupwire --example file_fetch -- FILE    # serve and fetch FILE
//! ```

use std::path::PathBuf;
use std::time::Duration;

use groupwire::{Event, FileEvent, FileReceiver, Qos, Session};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

#[tokio::main]
#[expect(
    clippy::disallowed_methods,
    reason = "an application times its own fetch"
)]
async fn main() -> Result<()> {
    let scratch = std::env::temp_dir().join(format!("file_fetch-{}", std::process::id()));
    let inbox = scratch.join("fetched");
    std::fs::create_dir_all(&inbox)?;
    let given = std::env::args().nth(1);
    let path = match &given {
        Some(path) => PathBuf::from(path),
        // 8 MiB of reproducible bytes.
        None => {
            let mut v = vec![0; 8 << 20];
            blake3::Hasher::new()
                .update(b"file_fetch")
                .finalize_xof()
                .fill(&mut v);
            let p = scratch.join("data.bin");
            std::fs::write(&p, v)?;
            p
        }
    };
    let server = Session::bind("127.0.0.1:0").await?;
    let client = Session::bind("127.0.0.1:0").await?;
    let server_addr = server.local_addr();
    let server_task = tokio::spawn(serve(server, path.clone()));

    let started = std::time::Instant::now();
    let peer = client.connect(server_addr).await?;
    peer.channel("requests", Qos::reliable_ordered())?
        .send(b"the file")?;
    let mut files = FileReceiver::new(&inbox);
    let fetched = loop {
        let ev = tokio::time::timeout(Duration::from_secs(30), client.next_event()).await;
        let Ok(Some(ev)) = ev else {
            return Err("the server stopped answering".into());
        };
        if let Event::Message {
            channel, payload, ..
        } = ev
        {
            match files.take(channel, &payload) {
                Some(FileEvent::Done { path, size, .. }) => break (path, size),
                Some(FileEvent::Failed { error, .. }) => return Err(error.into()),
                _ => {}
            }
        }
    };
    let secs = started.elapsed().as_secs_f64();
    println!(
        "fetched {} bytes to {} in {secs:.2} s ({:.0} Mbit/s), BLAKE3 checked",
        fetched.1,
        fetched.0.display(),
        fetched.1 as f64 * 8.0 / secs / 1e6
    );
    server_task.abort();
    if given.is_none() {
        std::fs::remove_dir_all(&scratch)?;
    }
    Ok(())
}

/// Answers every request with the file on a bulk channel to the asker.
async fn serve(s: Session, path: PathBuf) -> Result<()> {
    while let Some(ev) = s.next_event().await {
        let Event::Message { channel, .. } = ev else {
            continue;
        };
        let Some(peer) = s.peer(channel.peer) else {
            continue;
        };
        // Waits while the stream's queue is full.
        peer.channel("dataset", Qos::bulk())?
            .send_file(&path)
            .await?;
    }
    Ok(())
}
