//! `groupwire tunnel` as a user runs it: app sender → tunnel A → (link
//! emulator) → tunnel B → app receiver, separate processes on loopback,
//! free ports, each bounded by `--duration`.

use std::collections::BTreeMap;
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

mod common;
use common::{arg, emulate_to, stats, tunnel_forwarding, tunnel_to_peer};

/// The test's own clock: it times real processes, not machines.
#[expect(clippy::disallowed_methods, reason = "test timing of real processes")]
fn clock() -> std::time::Instant {
    std::time::Instant::now()
}

/// Datagram `seq`: sequence number, filler derived from it.
fn datagram(seq: u64, len: usize) -> Vec<u8> {
    let mut d: Vec<u8> = (0..len)
        .map(|i| (seq.wrapping_mul(131).wrapping_add(i as u64 * 17) % 253) as u8)
        .collect();
    d[..8].copy_from_slice(&seq.to_be_bytes());
    d
}

/// What the receiving application saw: arrival time (since start) by
/// sequence number, and how many datagrams were not byte-identical to one
/// sent.
struct Received {
    at: BTreeMap<u64, Duration>,
    corrupt: u64,
}

/// Sends up to `count` datagrams at `rate` per second to `to` while `rx`
/// collects for `listen` in total; returns the send times of those sent
/// (index = sequence number) and what arrived.
///
/// On a busy machine the sender falls behind `rate`; it stops once
/// `listen` minus a grace second has passed, so every datagram it sent had
/// time to cross the path. Callers count losses over `sent.len()`, what
/// was really sent, never over `count`.
fn exchange(
    to: SocketAddr,
    rx: &UdpSocket,
    count: u64,
    rate: f64,
    listen: Duration,
) -> (Vec<Duration>, Received) {
    let send_until = listen.saturating_sub(Duration::from_secs(1));
    let tx = UdpSocket::bind("127.0.0.1:0").expect("bind sender");
    let start = clock();
    std::thread::scope(|s| {
        let recv = s.spawn(|| {
            rx.set_read_timeout(Some(Duration::from_millis(100)))
                .expect("timeout");
            let mut got = Received {
                at: BTreeMap::new(),
                corrupt: 0,
            };
            let mut buf = [0u8; 2048];
            while clock().duration_since(start) < listen {
                let Ok(n) = rx.recv(&mut buf) else { continue };
                let d = &buf[..n];
                let seq = u64::from_be_bytes(d[..8.min(n)].try_into().unwrap_or([0xff; 8]));
                let now = clock().duration_since(start);
                if n < 8 || d != datagram(seq, n).as_slice() {
                    got.corrupt += 1;
                } else {
                    got.at.entry(seq).or_insert(now);
                }
            }
            got
        });
        let mut sent = Vec::new();
        for seq in 0..count {
            let due = Duration::from_secs_f64(seq as f64 / rate);
            let now = clock().duration_since(start);
            if now > send_until {
                break;
            }
            if due > now {
                std::thread::sleep(due - now);
            }
            sent.push(clock().duration_since(start));
            let len = 100 + (seq as usize * 37) % 900;
            tx.send_to(&datagram(seq, len), to).expect("send");
        }
        (sent, recv.join().expect("receiver thread"))
    })
}

/// The tunnel's residual loss over what it was given: the far tunnel's
/// datagrams handed to the application against the near tunnel's taken
/// from it. Not what the test's own socket read: on a loaded host that
/// socket overflows while its reader waits for a core (CI once read 79%
/// where the tunnel delivered 99%), which is the host's loss, not the
/// tunnel's. What the application did read must be no more than that.
fn tunnel_residual(sa: &serde_json::Value, sb: &serde_json::Value, got: &Received) -> f64 {
    let taken = sa["sent"]["app_datagrams"].as_f64().expect("a number");
    let handed = sb["received"]["app_datagrams"].as_f64().expect("a number");
    assert!(taken > 500.0, "the tunnel took only {taken} datagrams");
    assert!(
        got.at.len() as f64 <= handed && !got.at.is_empty(),
        "the application reads what the tunnel handed out ({} of {handed})",
        got.at.len()
    );
    1.0 - handed / taken
}

/// The issue's channel: Gilbert loss, 10% long-run, mean burst 4
/// (`r = 1/4`, `p = r · 0.1 / 0.9`).
const GILBERT_10_4: &str = "gilbert:p=0.027778,r=0.25";

/// One run of the tunnel over the emulated Gilbert channel: side B
/// forwards to an application socket, the emulator loses 10% in bursts of
/// 4 on the way, and side A runs with `fec` (its FEC flags) while 2000
/// datagrams/s go in. Checks what holds on a loaded machine as on an idle
/// one: every datagram arrives byte-identical, the link really lost, and
/// FEC took the residual far below the link's loss, whatever that loss
/// turned out to be. The link's loss is measured at the receiving tunnel,
/// so it includes socket-buffer drops of a busy host, and the residual is
/// counted over the datagrams the application really sent. (An earlier
/// fixed bound, 1% residual over the 10 000 datagrams meant to be sent,
/// failed under load: the sender reached 1250 of its 2000 datagrams/s.)
struct GilbertRun {
    /// A's `--ready-json` line.
    a_ready: serde_json::Value,
    /// A's output.
    a_out: String,
    /// A's and B's `--stats-json`.
    sa: serde_json::Value,
    sb: serde_json::Value,
    /// Residual and the link's measured loss.
    residual: f64,
    link_loss: f64,
}

fn run_over_gilbert(fec: &[&str]) -> GilbertRun {
    let dir = tempfile::tempdir().expect("tempdir");
    let (a_json, b_json) = (dir.path().join("a.json"), dir.path().join("b.json"));
    let app_rx = UdpSocket::bind("127.0.0.1:0").expect("bind receiver");
    let b_args = ["--duration", "10s", "--quiet", "--stats-json", arg(&b_json)];
    let b = tunnel_forwarding(app_rx.local_addr().expect("bound"), &b_args);
    let emu_args = ["--loss", GILBERT_10_4, "--seed", "7", "--duration", "10s"];
    let emu = emulate_to(b.addr("link"), &emu_args);
    let mut args = fec.to_vec();
    args.extend_from_slice(&["--duration", "9s", "--quiet", "--stats-json", arg(&a_json)]);
    let a = tunnel_to_peer(emu.addr("listen"), &args);
    let a_ready = a.ready.clone();
    let (sent, got) = exchange(
        a.addr("app"),
        &app_rx,
        10_000,
        2000.0,
        Duration::from_secs(7),
    );
    let (a_out, _, emu_out) = (a.finish().0, b.finish(), emu.finish().0);
    let (sa, sb) = (stats(&a_json), stats(&b_json));
    assert_eq!(got.corrupt, 0, "every datagram byte-identical to one sent");
    assert!(sent.len() > 1000, "only {} datagrams sent", sent.len());
    assert!(
        got.at.keys().all(|&seq| (seq as usize) < sent.len()),
        "only datagrams sent arrive"
    );
    let residual = tunnel_residual(&sa, &sb, &got);
    let rb = &sb["received"];
    let link_loss = rb["lost_packets"].as_f64().expect("n")
        / (rb["packets"].as_f64().expect("n") + rb["lost_packets"].as_f64().expect("n"));
    assert!(link_loss > 0.05, "the link lost {link_loss}: {emu_out}");
    // On an idle host the residual is about a tenth of a percent against
    // 10% on the link; "far below" leaves room for a host too busy to
    // keep the tunnel's pace.
    assert!(
        residual < 0.3 * link_loss,
        "residual {residual} vs link {link_loss}: {a_out}\n{sb}"
    );
    GilbertRun {
        a_ready,
        a_out,
        sa,
        sb,
        residual,
        link_loss,
    }
}

/// GMIAD at k = 20 rebuilds the bursts; the sender's view, from the far
/// side's reports, agrees; the channel measures say the loss was bursty.
#[test]
fn tunnel_rebuilds_gilbert_burst_loss_to_a_small_residual() {
    let run = run_over_gilbert(&["--fec", "gmiad", "--k", "20", "--block-wait", "20ms"]);
    let (sa, sb, a_out) = (&run.sa, &run.sb, &run.a_out);
    let rb = &sb["received"];
    assert!(rb["recovered"].as_u64() > Some(100), "{sb}");
    let far_below = 0.3 * run.link_loss;
    assert!(run.residual < far_below);
    let reported = sa["sent"]["residual_loss"].as_f64();
    assert!(
        reported.expect("the far side's reports arrived") < far_below,
        "{sa}"
    );
    assert!(sa["sent"]["overhead"].as_f64() > Some(0.1), "{sa}");
    assert!(a_out.contains("residual loss"), "{a_out}");
    // The channel measures: block FEC's latency is half the sender's round
    // trip plus what recovery added, and every rebuilt datagram counts on
    // the block path; the wire's loss is bursty (Gilbert r well below 1 - p).
    let c = &sb["channel"];
    assert_eq!(c["latency_kind"], "half_rtt", "{c}");
    assert_eq!(c["paths"]["block"], rb["recovered"], "{c}");
    assert!(c["latency_total"]["count"].as_u64() > Some(1000), "{c}");
    let (p, r) = (
        c["burst"]["gilbert_p"].as_f64(),
        c["burst"]["gilbert_r"].as_f64(),
    );
    assert!(p.zip(r).is_some_and(|(p, r)| p + r < 0.9), "{c}");
}

/// The default controller (`--fec target`) on the same channel: the
/// residual is far below the link's loss and the summary names the code it
/// chose within the budget (a block of at most 45 ms of datagrams at
/// 2000/s, k <= 91, under `--max-delay 50ms`).
#[test]
fn target_tunnel_rebuilds_gilbert_loss_and_reports_its_code() {
    let run = run_over_gilbert(&["--target-loss", "1%", "--max-delay", "50ms"]);
    let (sa, a_out) = (&run.sa, &run.a_out);
    assert_eq!(run.a_ready["fec"], "target", "{}", run.a_ready);
    let code = &sa["sent"]["target"];
    let (k, m) = (code["k"].as_u64(), code["m"].as_u64());
    assert!(k.is_some_and(|k| (1..=91).contains(&k)), "{sa}");
    assert!(m.is_some_and(|m| m > 0), "{sa}");
    assert_eq!(code["target"], 0.01, "{sa}");
    assert!(a_out.contains("  code                 k="), "{a_out}");
}

#[test]
fn low_rate_datagrams_arrive_without_waiting_for_a_block() {
    let dir = tempfile::tempdir().expect("tempdir");
    let b_json = dir.path().join("b.json");
    let app_rx = UdpSocket::bind("127.0.0.1:0").expect("bind receiver");
    let b_args = ["--duration", "4s", "--quiet", "--stats-json", arg(&b_json)];
    let b = tunnel_forwarding(app_rx.local_addr().expect("bound"), &b_args);
    let a = tunnel_to_peer(b.addr("link"), &["--duration", "4s", "--quiet"]);
    let count = 40;
    let (sent, got) = exchange(a.addr("app"), &app_rx, count, 20.0, Duration::from_secs(3));
    a.finish();
    b.finish();
    assert_eq!(got.corrupt, 0);
    assert_eq!(got.at.len(), sent.len(), "all arrive on a lossless path");
    // A stalled block would hold each datagram until its block of 20
    // fills: up to 19 × 50 ms, about half a second on average. A busy
    // host delays a few datagrams by a scheduling slice; the median
    // tells the two apart, and nothing waits for a whole block.
    let mut delays: Vec<Duration> = got
        .at
        .iter()
        .map(|(seq, at)| at.saturating_sub(sent[*seq as usize]))
        .collect();
    delays.sort();
    let median = delays[delays.len() / 2];
    assert!(
        median < Duration::from_millis(50),
        "median {median:?}: {delays:?}"
    );
    let max = delays[delays.len() - 1];
    assert!(max < Duration::from_millis(950), "max {max:?}: {delays:?}");
    // Short blocks keep the controller's repair ratio (GMIAD's 8 of 20).
    let s = stats(&b_json);
    assert_eq!(s["received"]["unrecovered"].as_u64(), Some(0), "{s}");
}

#[test]
fn garbage_at_the_tunnel_is_counted_and_dropped_and_traffic_goes_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let b_json = dir.path().join("b.json");
    let app_rx = UdpSocket::bind("127.0.0.1:0").expect("bind receiver");
    let b_args = ["--duration", "4s", "--quiet", "--stats-json", arg(&b_json)];
    let b = tunnel_forwarding(app_rx.local_addr().expect("bound"), &b_args);
    let b_link = b.addr("link");
    let junk = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let garbage: Vec<Vec<u8>> = vec![
        vec![],
        vec![1],
        vec![0xff; 1500],
        // A plausible header: version 1, block data kind, then nonsense.
        [1u8, 3, 0, 0, 0, 0, 0, 0, 9, 9, 9].to_vec(),
    ];
    // Before the tunnel knows its peer: nothing here is a valid packet.
    for g in &garbage {
        junk.send_to(g, b_link).expect("send");
    }
    std::thread::sleep(Duration::from_millis(100));
    let a = tunnel_to_peer(b_link, &["--duration", "4s", "--quiet"]);
    let (to, count) = (a.addr("app"), 200);
    let sock = UdpSocket::bind("127.0.0.1:0").expect("bind");
    // Learn the peer with one datagram, then garbage from a stranger and
    // at the listen side's link socket too, then traffic. B has learned
    // its peer once it forwards that datagram (a fixed wait was not long
    // enough on a loaded machine: the second wave counted as before the
    // peer too); it is sent again until it arrives, and its number is
    // outside the traffic's.
    app_rx
        .set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    let mut buf = [0u8; 2048];
    let learned = (0..50).any(|_| {
        sock.send_to(&datagram(1_000_000, 50), to).expect("send");
        app_rx.recv(&mut buf).is_ok()
    });
    assert!(learned, "B never forwarded the first datagram");
    for g in &garbage {
        junk.send_to(g, b_link).expect("send");
        junk.send_to(g, a.addr("link")).expect("send");
    }
    let (sent, got) = exchange(to, &app_rx, count, 400.0, Duration::from_secs(3));
    let a_out = a.finish().0;
    b.finish();
    assert_eq!(got.corrupt, 0);
    assert_eq!(got.at.range(..count).count(), sent.len(), "{a_out}");
    let s = stats(&b_json);
    let d = &s["dropped"];
    assert_eq!(
        d["invalid_before_peer"].as_u64(),
        Some(garbage.len() as u64),
        "{s}"
    );
    assert_eq!(d["foreign"].as_u64(), Some(garbage.len() as u64), "{s}");
    assert!(a_out.contains("dropped              4"), "{a_out}");
}

/// Side B forwarding to an application socket, the emulator losing 5%
/// at random on the way, side A sending 6000 datagrams at 1000/s; both
/// sides with `--fec fec` and B with `b_extra` too. Returns what was sent
/// and received, A's output, the emulator's, and both sides' stats.
fn lossy_run(
    fec: &str,
    b_extra: &[&str],
    during: impl FnOnce(&common::Proc),
) -> (
    Vec<Duration>,
    Received,
    String,
    String,
    serde_json::Value,
    serde_json::Value,
) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (a_json, b_json) = (dir.path().join("a.json"), dir.path().join("b.json"));
    let app_rx = UdpSocket::bind("127.0.0.1:0").expect("bind receiver");
    let mut b_args = vec![
        "--fec",
        fec,
        "--duration",
        "8s",
        "--quiet",
        "--stats-json",
        arg(&b_json),
    ];
    b_args.extend_from_slice(b_extra);
    let b = tunnel_forwarding(app_rx.local_addr().expect("bound"), &b_args);
    let emu_args = [
        "--loss",
        "bernoulli:0.05",
        "--seed",
        "7",
        "--duration",
        "8s",
    ];
    let emu = emulate_to(b.addr("link"), &emu_args);
    let a = tunnel_to_peer(
        emu.addr("listen"),
        &[
            "--fec",
            fec,
            "--duration",
            "7s",
            "--quiet",
            "--stats-json",
            arg(&a_json),
        ],
    );
    assert_eq!(a.ready["fec"], fec, "{}", a.ready);
    let (sent, got) = exchange(a.addr("app"), &app_rx, 6000, 1000.0, Duration::from_secs(5));
    during(&b);
    let (a_out, _, emu_out) = (a.finish().0, b.finish(), emu.finish().0);
    (sent, got, a_out, emu_out, stats(&a_json), stats(&b_json))
}

/// `--fec sliding:w=W,o=O` (RFC 8681's sliding-window code, issue 15)
/// over a lossy emulated path: every datagram byte-identical, the
/// residual far below the link's loss (counted over what was really
/// sent), losses rebuilt by the receiving tunnel, and no reports (the
/// code is open loop, as XOR).
#[test]
fn sliding_tunnel_rebuilds_random_loss() {
    let fec = "sliding:w=20,o=0.3";
    let (sent, got, a_out, emu_out, sa, sb) = lossy_run(fec, &[], |_| {});
    assert_eq!(got.corrupt, 0, "every datagram byte-identical to one sent");
    assert!(sent.len() > 500, "only {} datagrams sent", sent.len());
    let residual = tunnel_residual(&sa, &sb, &got);
    let c = &sb["channel"];
    let n = |v: &serde_json::Value| v.as_f64().expect("a number");
    let wire = n(&c["loss"]["wire_loss"]);
    assert!(wire > 0.02, "the link lost {wire}: {emu_out}\n{c}");
    assert!(sb["received"]["recovered"].as_u64() > Some(20), "{sb}");
    assert!(
        residual < 0.3 * wire,
        "residual {residual} vs link {wire}: {a_out}\n{sb}"
    );
    assert!(sa["sent"]["residual_loss"].is_null(), "open loop: {sa}");
    assert!(sa["sent"]["repair_packets"].as_u64() > Some(100), "{sa}");
    assert!(a_out.contains(&format!("--fec {fec}")), "{a_out}");
}

/// `--fec sliding:target`: the target controller on the sliding-window
/// code (issue 15), closed loop over the same lossy path: every datagram
/// byte-identical, the residual far below the link's loss, and the far
/// side's reports reach the sender (its residual is known), which sends
/// repairs for the loss it measured.
#[test]
fn sliding_target_tunnel_closes_its_loop_and_rebuilds_random_loss() {
    let fec = "sliding:target";
    let (sent, got, a_out, emu_out, sa, sb) = lossy_run(fec, &[], |_| {});
    assert_eq!(got.corrupt, 0, "every datagram byte-identical to one sent");
    assert!(sent.len() > 500, "only {} datagrams sent", sent.len());
    let residual = tunnel_residual(&sa, &sb, &got);
    let n = |v: &serde_json::Value| v.as_f64().expect("a number");
    let wire = n(&sb["channel"]["loss"]["wire_loss"]);
    assert!(wire > 0.02, "the link lost {wire}: {emu_out}\n{sb}");
    assert!(sb["received"]["recovered"].as_u64() > Some(20), "{sb}");
    assert!(
        residual < 0.3 * wire,
        "residual {residual} vs link {wire}: {a_out}\n{sb}"
    );
    assert!(
        sa["sent"]["residual_loss"].is_number(),
        "closed loop: the far side reports: {sa}"
    );
    assert!(sa["sent"]["repair_packets"].as_u64() > Some(100), "{sa}");
    assert!(
        a_out.contains("--fec sliding:target --target-loss"),
        "{a_out}"
    );
}

/// `--fec xor:LxD` (Leigh et al.'s XOR parity in SMPTE 2022-1 rows and
/// columns) over a lossy emulated path: every datagram byte-identical,
/// the residual far below the link's loss (counted over what was really
/// sent, as above), parity rebuilt by the receiving tunnel, and no reports
/// (the scheme is open loop).
#[test]
fn xor_tunnel_rebuilds_random_loss() {
    let dir = tempfile::tempdir().expect("tempdir");
    let b_lines = dir.path().join("b.jsonl");
    let mut scrape = String::new();
    let (sent, got, a_out, emu_out, sa, sb) = lossy_run(
        "xor:4x4",
        &["--metrics", "127.0.0.1:0", "--metrics-json", arg(&b_lines)],
        // The Prometheus endpoint answers while the tunnel runs.
        |b| scrape = http_get(b.addr("metrics"), "/metrics"),
    );
    assert_eq!(got.corrupt, 0, "every datagram byte-identical to one sent");
    assert!(sent.len() > 500, "only {} datagrams sent", sent.len());
    let residual = tunnel_residual(&sa, &sb, &got);
    let rb = &sb["received"];
    let n = |v: &serde_json::Value| v.as_f64().expect("a number");
    // Media packets that arrived: delivered less rebuilt.
    let arrived = n(&rb["delivered"]) - n(&rb["recovered"]);
    let link_loss = n(&rb["lost_packets"]) / (arrived + n(&rb["lost_packets"]));
    assert!(link_loss > 0.02, "the link lost {link_loss}: {emu_out}");
    assert!(rb["recovered"].as_u64() > Some(20), "{sb}");
    assert!(
        residual < 0.3 * link_loss,
        "residual {residual} vs link {link_loss}: {a_out}\n{sb}"
    );
    assert!(sa["sent"]["residual_loss"].is_null(), "open loop: {sa}");
    assert!(sa["sent"]["repair_packets"].as_u64() > Some(100), "{sa}");
    assert!(a_out.contains("--fec xor:4x4"), "{a_out}");
    assert!(a_out.contains("open loop"), "{a_out}");

    // The channel measures (Leigh et al. §4): one JSON line a second and
    // one at the end, agreeing with the tunnel's own counts.
    assert!(scrape.starts_with("HTTP/1.1 200"), "{scrape}");
    assert!(
        scrape.contains(
            r#"groupwire_channel_delivered_total{channel="tunnel xor:4x4",path="arrived"}"#
        ),
        "{scrape}"
    );
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&b_lines)
        .expect("metrics json lines")
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    assert!(lines.len() >= 2, "{lines:?}");
    let c = lines.last().expect("a final line");
    assert_eq!(c, &sb["channel"], "the last line is the report's channel");
    assert_eq!(c["latency_kind"], "one_way", "{c}");
    let judged = n(&c["loss"]["judged"]);
    assert!(judged > 500.0 && judged <= sent.len() as f64, "{c}");
    let wire = n(&c["loss"]["wire_loss"]);
    assert!(
        (wire - link_loss).abs() < 0.2 * link_loss,
        "wire {wire} vs {link_loss}: {c}"
    );
    assert!(n(&c["loss"]["residual_loss"]) < 0.3 * wire, "{c}");
    let rebuilt = n(&c["paths"]["xor_row"]) + n(&c["paths"]["xor_column"]);
    assert_eq!(rebuilt, n(&rb["recovered"]), "{c}");
    assert!(
        c["jitter_rfc3550_ms"].is_number() && c["jitter_fig4_total_ms"].is_number(),
        "{c}"
    );
    // Bernoulli loss: a fitted Gilbert chain with p + r near 1.
    let (p, r) = (n(&c["burst"]["gilbert_p"]), n(&c["burst"]["gilbert_r"]));
    assert!((p + r - 1.0).abs() < 0.25, "p {p} r {r}: {c}");
}

/// One HTTP/1.1 GET on a fresh connection: the whole response.
fn http_get(addr: SocketAddr, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .expect("request");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("response");
    out
}
