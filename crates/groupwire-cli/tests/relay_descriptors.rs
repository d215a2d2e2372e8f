//! The relay as a process with few file descriptors: silent connections
//! use them all up, and a real client must still get in (the accept loop
//! sheds the oldest connection that has not said Hello).
#![cfg(unix)]

use std::io::BufReader;
use std::process::{Command, Stdio};
use std::time::Duration;

use groupwire_relay::{ClientOptions, RelayClient};

mod common;
use common::Relay;

#[test]
fn a_relay_out_of_descriptors_sheds_silent_connections_and_keeps_accepting() {
    // 64 descriptors: about 50 connections after the runtime's own. The
    // handshake timeout is far away, so only shedding can make room.
    let script = format!(
        "ulimit -n 64 && exec '{}' relay serve --memory --listen 127.0.0.1:0 --handshake-timeout 1h --idle-timeout off",
        env!("CARGO_BIN_EXE_groupwire")
    );
    let mut relay = Relay::spawn(
        Command::new("sh")
            .args(["-c", &script])
            .stderr(Stdio::piped()),
    );
    let stderr = relay.child.stderr.take().expect("piped stderr");
    let addr = relay.addr.clone();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(60), async {
            // 100 connections that never say a word: more than the relay
            // has descriptors for.
            let mut silent = Vec::new();
            for _ in 0..100 {
                silent.push(
                    tokio::net::TcpStream::connect(addr.as_str())
                        .await
                        .expect("the kernel completes the handshake"),
                );
            }
            let (c, _ev) = RelayClient::connect(addr.as_str(), ClientOptions::new("real"))
                .await
                .expect("a real client gets in");
            c.ping().await.expect("and is served");
            // Some silent ones were closed to make room.
            let mut closed = 0;
            for s in &mut silent {
                let mut b = [0u8; 1];
                if let Ok(Ok(0)) = tokio::time::timeout(
                    Duration::from_millis(1),
                    tokio::io::AsyncReadExt::read(s, &mut b),
                )
                .await
                {
                    closed += 1;
                }
            }
            assert!(closed >= 1, "no silent connection was shed");
        })
        .await
        .expect("in time");
    });
    drop(relay);
    let mut log = String::new();
    let _ = std::io::Read::read_to_string(&mut BufReader::new(stderr), &mut log);
    assert!(log.contains("out of file descriptors"), "logged: {log}");
}
