//! The relay under hostile clients: starts `groupwire relay serve` as its
//! own process, measures a well-behaved member's round trip (its `Send` to
//! its own `Deliver`) alone, then again while N connections of every
//! hostile kind run together, and reports the relay's peak and current
//! resident memory (VmHWM, VmRSS from /proc/PID/status) and the member's
//! p50/p99 both ways, as a Markdown section for docs/results/reliability.md.
//!
//! ```text
//! scripts/relay_hostile.sh            # builds, runs with 100 per kind
//! cargo run -p groupwire-cli --profile test --example relay_hostile -- --per-kind 100
//! ```
//!
//! Hostile kinds: ping flooders that never read, silent connections, slow
//! readers (observers of the member's group that read 1 KiB per 50 ms),
//! clients sending oversized frames (a 2 MiB prefix and its body), clients
//! sending seeded garbage, and half-open handshakes (a partial `Hello`
//! over TCP, a partial HTTP upgrade over WebSocket). Bounded: every task
//! stops when the run ends (about 20 s at the defaults).
//!
//! Linux only (it reads /proc).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use groupwire_relay::frame::{self, ActivityMode, Frame, Role};
use groupwire_relay::{ClientEvent, ClientOptions, RelayClient};
use rand::{RngCore, SeedableRng};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

const KINDS: [&str; 6] = ["flood", "silent", "slow", "big", "garbage", "half"];

struct Args {
    per_kind: usize,
    round_trips: usize,
    relay: std::path::PathBuf,
    /// Which hostile kinds run (all by default): flood, silent, slow, big,
    /// garbage, half.
    kinds: Vec<String>,
    /// How long the hostile load runs before the member measures again.
    ramp: Duration,
    /// The member's group priority (0..=7; 4 is the default lane).
    priority: u8,
    /// Passed to the relay's `--socket-send-buffer` if given (0: the
    /// kernel's autotuning).
    send_buffer: Option<usize>,
}

fn args() -> Args {
    let mut a = Args {
        per_kind: 100,
        round_trips: 2000,
        relay: std::env::current_exe()
            .ok()
            .and_then(|p| Some(p.parent()?.parent()?.join("groupwire")))
            .unwrap_or_else(|| "groupwire".into()),
        kinds: KINDS.iter().map(|k| (*k).to_owned()).collect(),
        ramp: Duration::from_secs(3),
        priority: 4,
        send_buffer: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let v = it.next().unwrap_or_else(|| panic!("{k} needs a value"));
        match k.as_str() {
            "--per-kind" => a.per_kind = v.parse().expect("--per-kind N"),
            "--round-trips" => a.round_trips = v.parse().expect("--round-trips N"),
            "--relay" => a.relay = v.into(),
            "--ramp-secs" => a.ramp = Duration::from_secs(v.parse().expect("--ramp-secs N")),
            "--socket-send-buffer" => {
                a.send_buffer = Some(v.parse().expect("--socket-send-buffer BYTES"))
            }
            "--priority" => a.priority = v.parse().expect("--priority 0..=7"),
            "--kinds" => a.kinds = v.split(',').map(str::to_owned).collect(),
            other => {
                panic!("unknown argument {other} (--per-kind, --round-trips, --kinds, --relay)")
            }
        }
    }
    a
}

/// The relay process, killed on drop.
struct Relay {
    child: Child,
    tcp: String,
    ws: String,
}

impl Drop for Relay {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_relay(bin: &std::path::Path, send_buffer: Option<usize>) -> Relay {
    let send_buffer: Vec<String> = send_buffer
        .map(|n| vec!["--socket-send-buffer".into(), n.to_string()])
        .unwrap_or_default();
    let mut child = Command::new(bin)
        .args([
            "relay",
            "serve",
            "--memory",
            "--listen",
            "127.0.0.1:0",
            "--ws",
            "127.0.0.1:0",
            // Every client here comes from 127.0.0.1.
            "--max-conns-per-ip",
            "0",
        ])
        .args(&send_buffer)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "running {}: {e} (build it first, see scripts/relay_hostile.sh)",
                bin.display()
            )
        });
    let mut out = BufReader::new(child.stdout.take().expect("piped"));
    let mut line = String::new();
    out.read_line(&mut line).expect("address line");
    let tcp = line
        .trim()
        .strip_prefix("relay listening on ")
        .expect("tcp line")
        .to_owned();
    line.clear();
    out.read_line(&mut line).expect("ws line");
    let ws = line
        .trim()
        .strip_prefix("websocket on ws://")
        .expect("ws line")
        .trim_end_matches('/')
        .to_owned();
    Relay { child, tcp, ws }
}

/// (VmHWM, VmRSS) in KiB.
fn memory(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    (field("VmHWM:"), field("VmRSS:"))
}

fn hello(name: &str, window: u32) -> Bytes {
    frame::encode(
        1,
        &Frame::Hello {
            max_version: 1,
            window,
            token: String::new(),
            name: name.into(),
        },
    )
}

/// Round trips of the member: send, wait for its own Deliver. Returns
/// the latencies in microseconds, sorted.
async fn round_trips(c: &RelayClient, ev: &mut mpsc::Receiver<ClientEvent>, n: usize) -> Vec<u64> {
    let mut lat = Vec::with_capacity(n);
    for i in 0..n {
        let t = now();
        c.send("bench", 1, Bytes::from(vec![(i % 251) as u8; 100]))
            .await
            .expect("send");
        loop {
            match ev.recv().await.expect("event") {
                ClientEvent::Deliver(_) => break,
                ClientEvent::Closed(e) => panic!("member closed: {e:?}"),
                _ => {}
            }
        }
        lat.push(u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX));
    }
    lat.sort_unstable();
    lat
}

fn pct(sorted: &[u64], p: f64) -> u64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

#[expect(
    clippy::disallowed_methods,
    reason = "a benchmark measures wall-clock latency"
)]
fn now() -> std::time::Instant {
    std::time::Instant::now()
}

/// How often an oversized-frame or garbage client comes back after the
/// relay closed it.
const RECONNECT: Duration = Duration::from_secs(1);

/// Starts every hostile task; they run until `stop` is closed.
fn hostile(
    relay: &Relay,
    per_kind: usize,
    kinds: &[String],
    stop: &tokio::sync::watch::Receiver<bool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
    let on = |k: &str| kinds.iter().any(|x| x == k);
    let until_stop = |mut stop: tokio::sync::watch::Receiver<bool>| async move {
        let _ = stop.changed().await;
    };
    for i in 0..per_kind {
        let tcp = relay.tcp.clone();
        let ws = relay.ws.clone();
        // Ping flooder: never reads.
        if on("flood") {
            tasks.push(tokio::spawn({
                let (tcp, stop) = (tcp.clone(), stop.clone());
                async move {
                    let Ok(mut s) = TcpStream::connect(&tcp).await else {
                        return;
                    };
                    let ping = frame::encode(9, &Frame::Ping { nonce: 1 });
                    let batch: Vec<u8> = ping
                        .iter()
                        .copied()
                        .cycle()
                        .take(ping.len() * 512)
                        .collect();
                    let _ = s.write_all(&hello("flooder", 0)).await;
                    tokio::select! {
                        () = async { while s.write_all(&batch).await.is_ok() {} } => {}
                        () = until_stop(stop) => {}
                    }
                }
            }));
        }
        // Silent.
        if on("silent") {
            tasks.push(tokio::spawn({
                let (tcp, stop) = (tcp.clone(), stop.clone());
                async move {
                    let s = TcpStream::connect(&tcp).await;
                    until_stop(stop).await;
                    drop(s);
                }
            }));
        }
        // Slow reader: observer of the member's group, 1 KiB per 50 ms.
        if on("slow") {
            tasks.push(tokio::spawn({
                let (tcp, stop) = (tcp.clone(), stop.clone());
                async move {
                    let Ok(mut s) = TcpStream::connect(&tcp).await else {
                        return;
                    };
                    let join = frame::encode(
                        2,
                        &Frame::Join {
                            group: "bench".into(),
                            role: Role::Observer,
                            mode: ActivityMode::Active,
                            watch_membership: true,
                            resume_after: None,
                        },
                    );
                    let _ = s
                        .write_all(&[&hello("slow", 4096)[..], &join[..]].concat())
                        .await;
                    let mut consumed = 0u64;
                    let mut buf = [0u8; 1024];
                    tokio::select! {
                        () = async {
                            loop {
                                match s.read(&mut buf).await {
                                    Ok(0) | Err(_) => return,
                                    Ok(n) => consumed += n as u64,
                                }
                                // Credit what was read (whole frames or not:
                                // the relay only checks it never exceeds what
                                // it sent).
                                let c = frame::encode(0, &Frame::Credit { consumed });
                                if s.write_all(&c).await.is_err() {
                                    return;
                                }
                                tokio::time::sleep(Duration::from_millis(50)).await;
                            }
                        } => {}
                        () = until_stop(stop) => {}
                    }
                }
            }));
        }
        // Oversized frames: a 2 MiB prefix and its body, again and again.
        if on("big") {
            tasks.push(tokio::spawn({
                let (tcp, stop) = (tcp.clone(), stop.clone());
                async move {
                    let mut big = hello("big", 0).to_vec();
                    big.extend_from_slice(&(2u32 << 20).to_be_bytes());
                    big.extend(std::iter::repeat_n(0u8, 2 << 20));
                    tokio::select! {
                        () = async {
                            loop {
                                if let Ok(mut s) = TcpStream::connect(&tcp).await {
                                    let _ = s.write_all(&big).await;
                                    let mut sink = Vec::new();
                                    let _ = s.read_to_end(&mut sink).await;
                                }
                                tokio::time::sleep(RECONNECT).await;
                            }
                        } => {}
                        () = until_stop(stop) => {}
                    }
                }
            }));
        }
        // Garbage, from a seeded generator.
        if on("garbage") {
            tasks.push(tokio::spawn({
                let (tcp, stop) = (tcp.clone(), stop.clone());
                async move {
                    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(i as u64);
                    tokio::select! {
                        () = async {
                            loop {
                                let mut junk = vec![0u8; 4096];
                                rng.fill_bytes(&mut junk);
                                if let Ok(mut s) = TcpStream::connect(&tcp).await {
                                    let _ = s.write_all(&junk).await;
                                    let mut sink = Vec::new();
                                    let _ = s.read_to_end(&mut sink).await;
                                }
                                tokio::time::sleep(RECONNECT).await;
                            }
                        } => {}
                        () = until_stop(stop) => {}
                    }
                }
            }));
        }
        // Half-open handshakes: half a Hello over TCP, half an upgrade
        // over WebSocket.
        if on("half") {
            tasks.push(tokio::spawn({
                let stop = stop.clone();
                async move {
                    let h = hello("half", 0);
                    let t = TcpStream::connect(&tcp).await;
                    let w = TcpStream::connect(&ws).await;
                    if let (Ok(mut t), Ok(mut w)) = (t, w) {
                        let _ = t.write_all(&h[..h.len() / 2]).await;
                        let _ = w
                            .write_all(b"GET / HTTP/1.1\r\nHost: relay\r\nUpgrade: websocket\r\n")
                            .await;
                        until_stop(stop).await;
                    }
                }
            }));
        }
    }
    tasks
}

fn main() {
    let a = args();
    let relay = start_relay(&a.relay, a.send_buffer);
    let pid = relay.child.id();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    // The member runs on a runtime of its own, so its round trips do not
    // queue behind the hostile tasks in this process.
    let member_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let (c, mut ev) = member_rt.block_on(async {
        let (c, ev) = RelayClient::connect(relay.tcp.as_str(), ClientOptions::new("member"))
            .await
            .expect("member connects");
        c.create_group("bench", "bench", a.priority, Bytes::new())
            .await
            .expect("create");
        c.join("bench", Role::Principal, ActivityMode::Active, false)
            .await
            .expect("join");
        (c, ev)
    });
    // Warm up, then measure alone.
    let _ = member_rt.block_on(round_trips(&c, &mut ev, 200));
    let alone = member_rt.block_on(round_trips(&c, &mut ev, a.round_trips));
    let (hwm_alone, _) = memory(pid);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let tasks = rt.block_on(async { hostile(&relay, a.per_kind, &a.kinds, &stop_rx) });
    // Let every hostile connection get going (flooders fill their buffers
    // and are paused) before measuring again; the hostile tasks run on
    // `rt`'s worker threads meanwhile.
    std::thread::sleep(a.ramp);
    let loaded = member_rt.block_on(round_trips(&c, &mut ev, a.round_trips));
    let (hwm, rss) = memory(pid);
    let _ = stop_tx.send(true);
    rt.block_on(async {
        for t in tasks {
            let _ = t.await;
        }
    });
    {
        let (p50a, p99a) = (pct(&alone, 0.5), pct(&alone, 0.99));
        let (p50l, p99l) = (pct(&loaded, 0.5), pct(&loaded, 0.99));
        println!("## Relay under hostile clients\n");
        println!(
            "Command: `scripts/relay_hostile.sh` (runs `cargo run -p groupwire-cli --profile test --example relay_hostile -- --per-kind {} --round-trips {}`).\n",
            a.per_kind, a.round_trips
        );
        println!(
            "One `groupwire relay serve --memory` process; {} connections of each hostile kind at once ({} in all): ping flooders that never read, silent connections, slow readers (4 KiB window, 1 KiB read per 50 ms), oversized frames (2 MiB prefix and body, reconnecting), seeded garbage (reconnecting), half-open handshakes (half a Hello over TCP, half an HTTP upgrade over WebSocket). One well-behaved member measures {} round trips (its `Send` of 100 bytes to its own `Deliver`) alone, then under that load. Memory from /proc/PID/status of the relay.\n",
            a.per_kind,
            a.per_kind * 6,
            a.round_trips
        );
        println!("| | alone | under hostile load | ratio | goal |");
        println!("|---|---|---|---|---|");
        println!(
            "| member round trip p50 | {p50a} µs | {p50l} µs | {:.2}x | |",
            p50l as f64 / p50a.max(1) as f64
        );
        println!(
            "| member round trip p99 | {p99a} µs | {p99l} µs | {:.2}x | ≤ 1.2x |",
            p99l as f64 / p99a.max(1) as f64
        );
        println!(
            "| relay peak RSS (VmHWM) | {:.1} MiB | {:.1} MiB | | < 256 MiB |",
            hwm_alone as f64 / 1024.0,
            hwm as f64 / 1024.0
        );
        println!(
            "| relay RSS at the end (VmRSS) | | {:.1} MiB | | |",
            rss as f64 / 1024.0
        );
    }
}
