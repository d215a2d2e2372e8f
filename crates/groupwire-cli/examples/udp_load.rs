//! A UDP load generator, a checking sink and a plain UDP relay, for
//! measuring `groupwire tunnel` (scripts/results.sh tunnel, scripts/perf.sh tunnel).
//!
//! ```text
//! udp_load send  --to ADDR --rate PER_SEC --size BYTES --duration SECS [--batch N]
//! udp_load recv  --bind ADDR --duration SECS --json FILE [--deadlines-ms 10,30,100]
//!                (prints its address first)
//! udp_load relay --listen ADDR --forward ADDR --duration SECS (prints its address first)
//! ```
//!
//! Every datagram carries its sequence number (8 bytes), its send time
//! (wall-clock microseconds, 8 bytes) and filler computed from the
//! sequence number, so the sink checks each one is byte-identical to what
//! was sent without storing anything, and measures one-way latency (sender
//! and sink on one host). `--rate 0` sends as fast as the socket takes.
//! The sink's `within_ms` counts the distinct datagrams that arrived within
//! each of `--deadlines-ms` (default 10, 30 and 100 ms) of being sent, so a
//! bench can score loss within a delay budget (scripts/peers_bench.py): to
//! an application with that budget a later datagram is as good as lost.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use groupwire_tokio::{BatchedUdpSocket, Clock, DatagramSocket, RecvBatch};
use hdrhistogram::Histogram;

fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: Option<T>) -> T {
    match args.iter().position(|a| a == name) {
        Some(i) => args
            .get(i + 1)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name}: bad value")),
        None => default.unwrap_or_else(|| panic!("{name} is required")),
    }
}

fn fill(seq: u64, buf: &mut [u8]) {
    for (i, b) in buf.iter_mut().enumerate().skip(HEADER) {
        *b = (seq.wrapping_mul(31).wrapping_add(i as u64 * 7) % 251) as u8;
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    match args.get(1).map(String::as_str) {
        Some("send") => rt.block_on(send(&args)),
        Some("recv") => rt.block_on(recv(&args)),
        Some("relay") => rt.block_on(relay(&args)),
        _ => panic!("usage: udp_load send|recv|relay ..."),
    }
}

async fn bind(addr: SocketAddr) -> BatchedUdpSocket {
    let s = BatchedUdpSocket::bind(addr).await.expect("bind");
    let _ = s.set_recv_buffer_size(8 << 20);
    let _ = s.set_send_buffer_size(8 << 20);
    s
}

async fn send(args: &[String]) {
    let to: SocketAddr = arg(args, "--to", None);
    let rate: f64 = arg(args, "--rate", Some(2000.0));
    let size: usize = arg(args, "--size", Some(1000));
    let secs: f64 = arg(args, "--duration", Some(10.0));
    let batch: usize = arg(args, "--batch", Some(1));
    let size = size.max(HEADER);
    let sock = bind("127.0.0.1:0".parse().expect("addr")).await;
    let clock = Clock::start();
    let start = clock.now();
    let end = start + Duration::from_secs_f64(secs);
    let mut buf = vec![0u8; size * batch];
    let mut seq = 0u64;
    let (mut sent, mut errors) = (0u64, 0u64);
    loop {
        let now = clock.now();
        if now >= end {
            break;
        }
        if rate > 0.0 {
            let due = start + Duration::from_secs_f64(seq as f64 / rate);
            if due > now {
                tokio::time::sleep_until(clock.to_tokio(due)).await;
            }
        }
        let wall = clock.wall_now_micros();
        for (j, d) in buf.chunks_mut(size).enumerate() {
            let s = seq + j as u64;
            d[..8].copy_from_slice(&s.to_be_bytes());
            d[8..16].copy_from_slice(&wall.to_be_bytes());
            fill(s, d);
        }
        let r = if batch == 1 {
            sock.send_to(&buf, to).await
        } else {
            sock.send_segments(&buf, size, to).await
        };
        match r {
            Ok(_) => sent += batch as u64,
            Err(_) => errors += batch as u64,
        }
        seq += batch as u64;
    }
    let secs = clock.now().saturating_duration_since(start).as_secs_f64();
    println!(
        "{{\"sent\": {sent}, \"send_errors\": {errors}, \"seconds\": {secs:.3}, \"size\": {size}}}"
    );
}

async fn recv(args: &[String]) {
    let at: SocketAddr = arg(args, "--bind", Some("127.0.0.1:0".parse().expect("addr")));
    let secs: f64 = arg(args, "--duration", Some(10.0));
    let json: String = arg(args, "--json", None);
    let deadlines: String = arg(args, "--deadlines-ms", Some("10,30,100".to_string()));
    let deadlines: Vec<u64> = deadlines
        .split(',')
        .map(|d| d.trim().parse().expect("--deadlines-ms: bad value"))
        .collect();
    let sock = bind(at).await;
    eprintln!("recv {}", sock.local_addr().expect("bound"));
    let clock = Clock::start();
    let mut batch = RecvBatch::new(32, 65_536);
    let mut seen = BTreeSet::new();
    let (mut datagrams, mut bytes, mut corrupt, mut dup) = (0u64, 0u64, 0u64, 0u64);
    let mut lat = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("bounds");
    let mut first = None;
    let mut last = clock.now();
    let mut check = Vec::new();
    let stop = tokio::time::sleep(Duration::from_secs_f64(secs));
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => break,
            r = sock.recv_batch(&mut batch) => {
                if r.is_err() { continue; }
                let now = clock.now();
                let wall = clock.wall_micros(now);
                first.get_or_insert(now);
                last = now;
                for (_, d) in batch.iter() {
                    datagrams += 1;
                    bytes += d.len() as u64;
                    if d.len() < HEADER { corrupt += 1; continue; }
                    let seq = u64::from_be_bytes(d[..8].try_into().expect("8 bytes"));
                    let sent = u64::from_be_bytes(d[8..16].try_into().expect("8 bytes"));
                    check.clear();
                    check.extend_from_slice(d);
                    fill(seq, &mut check);
                    if check != d { corrupt += 1; continue; }
                    if !seen.insert(seq) { dup += 1; continue; }
                    lat.saturating_record(wall.saturating_sub(sent));
                }
            }
        }
    }
    let span = first.map_or(0.0, |f| last.saturating_duration_since(f).as_secs_f64());
    let q = |x| lat.value_at_quantile(x);
    // The histogram keeps 3 significant digits, so a count is exact to
    // 0.1% of the deadline.
    let within = deadlines
        .iter()
        .map(|&d| format!("\"{d}\": {}", lat.count_between(0, d * 1000)))
        .collect::<Vec<_>>()
        .join(", ");
    let out = format!(
        "{{\"datagrams\": {datagrams}, \"unique\": {}, \"bytes\": {bytes}, \"corrupt\": {corrupt}, \"duplicates\": {dup}, \"max_seq\": {}, \"span_seconds\": {span:.4}, \"latency_us\": {{\"p50\": {}, \"p90\": {}, \"p99\": {}, \"max\": {}}}, \"within_ms\": {{{within}}}}}\n",
        seen.len(),
        seen.last().copied().unwrap_or(0),
        q(0.5),
        q(0.9),
        q(0.99),
        q(1.0)
    );
    std::fs::write(&json, out).expect("write json");
}

/// Forwards datagrams from anyone to `--forward`, and nothing back: the
/// plain-UDP baseline hop.
async fn relay(args: &[String]) {
    let listen: SocketAddr = arg(args, "--listen", Some("127.0.0.1:0".parse().expect("addr")));
    let forward: SocketAddr = arg(args, "--forward", None);
    let secs: f64 = arg(args, "--duration", Some(10.0));
    let sock = bind(listen).await;
    let out = bind("127.0.0.1:0".parse().expect("addr")).await;
    eprintln!("relay {}", sock.local_addr().expect("bound"));
    let mut batch = RecvBatch::new(32, 65_536);
    let mut scratch = Vec::new();
    let stop = tokio::time::sleep(Duration::from_secs_f64(secs));
    tokio::pin!(stop);
    let max = out.max_send_segments().max(1);
    loop {
        tokio::select! {
            () = &mut stop => break,
            r = sock.recv_batch(&mut batch) => {
                if r.is_err() { continue; }
                // Same-size runs in one GSO send, as the tunnel does.
                let ds: Vec<&[u8]> = batch.iter().map(|(_, d)| d).collect();
                let mut i = 0;
                while i < ds.len() {
                    let n = ds[i].len();
                    let mut j = i + 1;
                    while j < ds.len() && j - i < max && ds[j].len() == n && (j - i + 1) * n <= 65_507 { j += 1; }
                    if j - i == 1 {
                        let _ = out.send_to(ds[i], forward).await;
                    } else {
                        scratch.clear();
                        for d in &ds[i..j] { scratch.extend_from_slice(d); }
                        let _ = out.send_segments(&scratch, n, forward).await;
                    }
                    i = j;
                }
            }
        }
    }
}

/// Sequence number and send time.
const HEADER: usize = 16;
