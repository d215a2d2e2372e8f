//! The relay under hostile clients: starts `groupwire relay serve` as its
//! own process, measures a well-behaved member's round trip (its `Send` to
//! its own `Deliver`) alone, then again while N connections of every
//! hostile kind run together, and reports the relay's peak and current
//! resident memory (VmHWM, VmRSS from /proc/PID/status) and the member's
//! p50/p99 both ways, as a Markdown section for docs/results/reliability.md.
//!
//! The member is well-behaved: one round trip every millisecond by default
//! (`--interval-us`), as an interactive client sends (a telepointer sends
//! at tens of hertz). Back to back (`--interval-us 0`) it is a load of its
//! own: it keeps the relay about three quarters busy alone, and whatever
//! the hostile clients add then queues behind it.
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
//! over TCP, a partial HTTP upgrade over WebSocket). `--kinds readers`
//! adds a control that is not hostile: observers of the member's group
//! that read everything at once, for what the group's size alone costs
//! the member. Bounded: every task
//! stops when the run ends (about 20 s at the defaults).
//!
//! Isolation (`--isolate`, what `scripts/relay_hostile.sh` passes): on a
//! machine this small the hostile clients would otherwise take the
//! member's CPU and the ratio would measure the load generator, not the
//! relay. So the relay runs on CPU 0 (`taskset`), the member on CPU 1,
//! and the hostile clients in a child process on CPU 1 under
//! `SCHED_IDLE` (`chrt --idle`): they use every cycle the member leaves,
//! and the member's wakeups preempt them at once, as if they were on
//! other hosts. Every hostile byte still reaches the relay, which shares
//! nothing with the member but its own work. And both CPUs are kept out
//! of their idle states for the whole run by a `SCHED_IDLE` spinner each
//! (which yields to other tasks): otherwise the measurement
//! alone, on idle CPUs, pays the wakeup of a sleeping CPU (in a VM, a
//! halted vCPU) on every round trip, the loaded one does not, and the
//! ratio reads below 1 for kinds that cost the relay nothing. The member
//! itself runs under `SCHED_FIFO` once the relay has started (see
//! `member_above_the_load` for why `SCHED_IDLE` on the clients is not
//! enough), and the hostile clients write in pieces (`WRITE_PIECE`), so
//! that the load generator's system calls hold the member's CPU briefly.
//!
//! Linux only (it reads /proc; `--isolate` needs util-linux's `taskset`
//! and `chrt`).

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
    /// garbage, half; and the control `readers` when named.
    kinds: Vec<String>,
    /// How long the hostile load runs before the member measures again.
    ramp: Duration,
    /// The member's group priority (0..=7; 4 is the default lane).
    priority: u8,
    /// One round trip every this long (`--interval-us`; 0: back to
    /// back, as fast as the relay answers).
    every: Duration,
    /// Alone-then-loaded cycles (`--cycles`): the hostile load starts and
    /// stops this many times, so the two measurements of each pair are
    /// seconds apart and a change in what else the host runs moves both.
    cycles: usize,
    /// Extra options for `groupwire relay serve` (`--relay-arg`, once per
    /// word; `--socket-send-buffer BYTES` is one of them).
    relay_args: Vec<String>,
    /// Relay on CPU 0, member on CPU 1, hostile clients on CPU 1 under
    /// `SCHED_IDLE` (module docs).
    isolate: bool,
    /// Internal: run only the hostile clients against `TCP,WS` until
    /// standard input closes (the child process of `--isolate`).
    hostile_child: Option<(String, String)>,
    /// Internal: spin until standard input closes (`--isolate`'s
    /// `SCHED_IDLE` spinners).
    spin_child: bool,
}

fn args() -> Args {
    let mut a = Args {
        per_kind: 100,
        round_trips: 5000,
        relay: std::env::current_exe()
            .ok()
            .and_then(|p| Some(p.parent()?.parent()?.join("groupwire")))
            .unwrap_or_else(|| "groupwire".into()),
        kinds: KINDS.iter().map(|k| (*k).to_owned()).collect(),
        ramp: Duration::from_secs(3),
        priority: 4,
        every: Duration::from_millis(1),
        cycles: 3,
        relay_args: Vec::new(),
        isolate: false,
        hostile_child: None,
        spin_child: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        if k == "--isolate" {
            a.isolate = true;
            continue;
        }
        if k == "--spin-child" {
            a.spin_child = true;
            continue;
        }
        let v = it.next().unwrap_or_else(|| panic!("{k} needs a value"));
        match k.as_str() {
            "--per-kind" => a.per_kind = v.parse().expect("--per-kind N"),
            "--round-trips" => a.round_trips = v.parse().expect("--round-trips N"),
            "--relay" => a.relay = v.into(),
            "--ramp-secs" => a.ramp = Duration::from_secs(v.parse().expect("--ramp-secs N")),
            "--socket-send-buffer" => {
                let n: usize = v.parse().expect("--socket-send-buffer BYTES");
                a.relay_args
                    .extend(["--socket-send-buffer".to_owned(), n.to_string()]);
            }
            "--relay-arg" => a.relay_args.push(v),
            "--priority" => a.priority = v.parse().expect("--priority 0..=7"),
            "--cycles" => a.cycles = v.parse::<usize>().expect("--cycles N").max(1),
            "--interval-us" => {
                a.every = Duration::from_micros(v.parse().expect("--interval-us MICROSECONDS"))
            }
            "--kinds" => a.kinds = v.split(',').map(str::to_owned).collect(),
            "--hostile-child" => {
                let (tcp, ws) = v.split_once(',').expect("--hostile-child TCP,WS");
                a.hostile_child = Some((tcp.to_owned(), ws.to_owned()));
            }
            other => panic!(
                "unknown argument {other} (--per-kind, --round-trips, --kinds, --ramp-secs, \
                 --priority, --interval-us, --cycles, --socket-send-buffer, --relay-arg, --relay, \
                 --isolate)"
            ),
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

/// The CPU the relay runs on with `--isolate`; the member and the hostile
/// clients take [`BENCH_CPU`].
const RELAY_CPU: &str = "0";
const BENCH_CPU: &str = "1";

/// `program` as a command, on `cpu` (through `taskset`) if given.
fn on_cpu(cpu: Option<&str>, program: &std::path::Path) -> Command {
    match cpu {
        Some(cpu) => {
            let mut c = Command::new("taskset");
            c.args(["-c", cpu]).arg(program);
            c
        }
        None => Command::new(program),
    }
}

fn start_relay(bin: &std::path::Path, relay_args: &[String], isolate: bool) -> Relay {
    let mut child = on_cpu(isolate.then_some(RELAY_CPU), bin)
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
        .args(relay_args)
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
    // `taskset` execs the relay: the child's pid is the relay's.
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
/// One every `every` (back to back if zero).
async fn round_trips(
    c: &RelayClient,
    ev: &mut mpsc::Receiver<ClientEvent>,
    n: usize,
    every: Duration,
) -> Vec<u64> {
    let mut lat = Vec::with_capacity(n);
    let mut tick = (!every.is_zero()).then(|| {
        let mut t = tokio::time::interval(every);
        t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        t
    });
    for i in 0..n {
        if let Some(t) = &mut tick {
            t.tick().await;
        }
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

/// An observer of the member's group with `window` (0: the relay's
/// default) that reads up to `read` bytes at a time, credits what it read
/// and then waits `pause`, until `stop`.
async fn observer(
    tcp: String,
    stop: tokio::sync::watch::Receiver<bool>,
    window: u32,
    read: usize,
    pause: Option<Duration>,
) {
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
        .write_all(&[&hello("observer", window)[..], &join[..]].concat())
        .await;
    let mut consumed = 0u64;
    let mut buf = vec![0u8; read];
    tokio::select! {
        () = async {
            loop {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => consumed += n as u64,
                }
                // Credit what was read (whole frames or not: the relay
                // only checks it never exceeds what it sent).
                let c = frame::encode(0, &Frame::Credit { consumed });
                if s.write_all(&c).await.is_err() {
                    return;
                }
                if let Some(p) = pause {
                    tokio::time::sleep(p).await;
                }
            }
        } => {}
        () = until_stopped(stop) => {}
    }
}

/// Resolves when `stop` changes or its sender goes.
async fn until_stopped(mut stop: tokio::sync::watch::Receiver<bool>) {
    let _ = stop.changed().await;
}

/// The most a hostile client writes in one system call.
///
/// On a kernel without preemption (`preempt=none`, as on the machine the
/// fifth round of `docs/results/reliability.md` ran on), a `SCHED_IDLE` client still holds its CPU for the whole of a
/// system call: one `write` of a 2 MiB body over loopback runs the TCP
/// transmit and receive of every segment the window takes, and held the
/// member on the same CPU for up to a millisecond (`perf sched` showed
/// the member runnable behind the hostile clients' threads). Each piece
/// returns to user space, where the member's wake-up preempts the client.
/// The relay sees the same bytes.
const WRITE_PIECE: usize = 16 << 10;

/// Writes `buf` a [`WRITE_PIECE`] per system call.
async fn write_in_pieces(s: &mut TcpStream, buf: &[u8]) -> std::io::Result<()> {
    for piece in buf.chunks(WRITE_PIECE) {
        s.write_all(piece).await?;
    }
    Ok(())
}

/// Starts every hostile task; they run until `stop` is closed.
fn hostile(
    (tcp, ws): (&str, &str),
    per_kind: usize,
    kinds: &[String],
    stop: &tokio::sync::watch::Receiver<bool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
    let on = |k: &str| kinds.iter().any(|x| x == k);
    for i in 0..per_kind {
        let tcp = tcp.to_owned();
        let ws = ws.to_owned();
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
                        () = until_stopped(stop) => {}
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
                    until_stopped(stop).await;
                    drop(s);
                }
            }));
        }
        // Slow reader: observer of the member's group, 1 KiB per 50 ms.
        if on("slow") {
            tasks.push(tokio::spawn(observer(
                tcp.clone(),
                stop.clone(),
                4096,
                1024,
                Some(Duration::from_millis(50)),
            )));
        }
        // Not hostile, and only with `--kinds readers`: observers of the
        // member's group that read all they get at once (the default
        // window), a control for what the group's size costs the member.
        if on("readers") {
            tasks.push(tokio::spawn(observer(
                tcp.clone(),
                stop.clone(),
                0,
                64 << 10,
                None,
            )));
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
                                    let _ = write_in_pieces(&mut s, &big).await;
                                    let mut sink = Vec::new();
                                    let _ = s.read_to_end(&mut sink).await;
                                }
                                tokio::time::sleep(RECONNECT).await;
                            }
                        } => {}
                        () = until_stopped(stop) => {}
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
                        () = until_stopped(stop) => {}
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
                        until_stopped(stop).await;
                    }
                }
            }));
        }
    }
    tasks
}

/// Runs the hostile tasks on `rt` until `stop` is dropped or sent.
fn run_hostile(
    rt: &tokio::runtime::Runtime,
    addrs: (&str, &str),
    per_kind: usize,
    kinds: &[String],
) -> impl FnOnce() + use<> {
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let tasks = rt.block_on(async { hostile(addrs, per_kind, kinds, &stop_rx) });
    let handle = rt.handle().clone();
    move || {
        let _ = stop_tx.send(true);
        handle.block_on(async {
            for t in tasks {
                let _ = t.await;
            }
        });
    }
}

fn hostile_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// `--hostile-child TCP,WS`: the hostile clients alone, until standard
/// input closes.
fn hostile_child(a: &Args, (tcp, ws): (&str, &str)) {
    let rt = hostile_runtime();
    let stop = run_hostile(&rt, (tcp, ws), a.per_kind, &a.kinds);
    until_stdin_closes();
    stop();
}

/// Returns when the parent closes this child's standard input.
fn until_stdin_closes() {
    let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
}

/// The hostile load of the run: in this process, or with `--isolate` in
/// a child process under `SCHED_IDLE` on [`BENCH_CPU`]. Stopped by the
/// returned closure.
fn start_hostile(a: &Args, relay: &Relay) -> Box<dyn FnOnce()> {
    if !a.isolate {
        let rt = hostile_runtime();
        let stop = run_hostile(&rt, (&relay.tcp, &relay.ws), a.per_kind, &a.kinds);
        return Box::new(move || {
            stop();
            drop(rt);
        });
    }
    let child = idle_child(
        BENCH_CPU,
        &[
            "--hostile-child",
            &format!("{},{}", relay.tcp, relay.ws),
            "--per-kind",
            &a.per_kind.to_string(),
            "--kinds",
            &a.kinds.join(","),
        ],
    );
    Box::new(child)
}

/// This program again with `args`, on `cpu` under `SCHED_IDLE`, until
/// the returned closure closes its standard input and waits for it.
fn idle_child(cpu: &str, args: &[&str]) -> impl FnOnce() + use<> {
    let me = std::env::current_exe().expect("own path");
    let mut child = Command::new("chrt")
        .args(["--idle", "0", "taskset", "-c", cpu])
        .arg(me)
        .args(args)
        .stdin(Stdio::piped())
        .spawn()
        .expect("chrt and taskset (util-linux) start the child");
    move || {
        drop(child.stdin.take());
        let _ = child.wait();
    }
}

/// Puts this thread (the member's: its runtime is a current-thread one on
/// the main thread) under `SCHED_FIFO`, above every normal and idle task
/// on its CPU; whether that worked.
///
/// `SCHED_IDLE` alone does not keep the hostile clients out of the
/// member's way. Under EEVDF an idle task is only a task of tiny weight:
/// a hundred slow readers whose 50 ms pauses end together are each picked
/// ahead of the member woken a moment later, and held it runnable for
/// 0.3-0.8 ms at a time, 125 times in 30 s (`perf sched` on `--kinds
/// slow`), so the ratio measured the load generator sharing the member's
/// CPU, not the relay. A real-time member is as if the hostile clients
/// were on other hosts; what still reaches it is the kernel's work for
/// them (softirqs), which no policy preempts. The relay and its threads
/// keep their normal policy: only this thread changes, after the relay
/// started.
fn member_above_the_load() -> bool {
    let ok = Command::new("chrt")
        .args(["--fifo", "-p", "1", &std::process::id().to_string()])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!(
            "note: could not give the member SCHED_FIFO (chrt needs CAP_SYS_NICE); it runs at normal priority"
        );
    }
    ok
}

/// `--spin-child`: keeps its CPU busy until standard input closes.
#[expect(
    clippy::disallowed_methods,
    reason = "a thread that only waits for standard input to close"
)]
fn spin_child() {
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let done = done.clone();
        std::thread::spawn(move || {
            until_stdin_closes();
            done.store(true, std::sync::atomic::Ordering::Relaxed);
        })
    };
    while !done.load(std::sync::atomic::Ordering::Relaxed) {
        std::hint::spin_loop();
    }
    let _ = watcher.join();
}

/// CPU time the process has used (user + system), from /proc/PID/stat.
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) in parentheses.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    // utime and stime are fields 14 and 15 of the line: 12 and 13 here.
    let ticks = f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0);
    // USER_HZ is 100 on every Linux this runs on.
    Duration::from_millis(ticks * 10)
}

fn main() {
    let a = args();
    if let Some((tcp, ws)) = &a.hostile_child {
        return hostile_child(&a, (tcp, ws));
    }
    if a.spin_child {
        return spin_child();
    }
    if a.isolate {
        // This process (the member) on the bench CPU; the relay gets its own.
        let ok = Command::new("taskset")
            .args(["-a", "-p", "-c", BENCH_CPU, &std::process::id().to_string()])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "--isolate needs taskset (util-linux) and two CPUs");
    }
    let spinners: Vec<_> = if a.isolate {
        [RELAY_CPU, BENCH_CPU]
            .map(|cpu| idle_child(cpu, &["--spin-child"]))
            .into()
    } else {
        Vec::new()
    };
    let relay = start_relay(&a.relay, &a.relay_args, a.isolate);
    let pid = relay.child.id();
    // After the relay started (a child would inherit the policy); the
    // hostile child sets its own (`chrt --idle`).
    let member_fifo = a.isolate && member_above_the_load();
    // The member runs on a runtime of its own, so its round trips do not
    // queue behind the hostile tasks.
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
    // Warm up, then measure alone and loaded, cycle after cycle.
    let _ = member_rt.block_on(round_trips(&c, &mut ev, 2000, Duration::ZERO));
    let (mut alone, mut loaded, mut rows) = (Vec::new(), Vec::new(), Vec::new());
    let mut hwm_alone = 0;
    for cycle in 0..a.cycles {
        let quiet = member_rt.block_on(round_trips(&c, &mut ev, a.round_trips, a.every));
        if cycle == 0 {
            hwm_alone = memory(pid).0;
        }
        let stop = start_hostile(&a, &relay);
        // Let every hostile connection get going (flooders fill their
        // buffers and are paused) before measuring again.
        std::thread::sleep(a.ramp);
        let cpu0 = cpu_time(pid);
        let t0 = now();
        let busy_rt = member_rt.block_on(round_trips(&c, &mut ev, a.round_trips, a.every));
        let busy = (cpu_time(pid) - cpu0).as_secs_f64() / t0.elapsed().as_secs_f64();
        stop();
        rows.push([
            pct(&quiet, 0.5),
            pct(&quiet, 0.99),
            pct(&busy_rt, 0.5),
            pct(&busy_rt, 0.99),
            (busy * 100.0).round() as u64,
        ]);
        alone.extend(quiet);
        loaded.extend(busy_rt);
        // The hostile connections' lingering closes end before the next
        // measurement alone.
        std::thread::sleep(Duration::from_secs(3));
    }
    alone.sort_unstable();
    loaded.sort_unstable();
    let (hwm, rss) = memory(pid);
    let busy = rows.iter().map(|r| r[4]).sum::<u64>() / rows.len() as u64;
    for s in spinners {
        s();
    }
    {
        let (p50a, p99a) = (pct(&alone, 0.5), pct(&alone, 0.99));
        let (p50l, p99l) = (pct(&loaded, 0.5), pct(&loaded, 0.99));
        println!("## Relay under hostile clients\n");
        let args: Vec<String> = std::env::args().skip(1).collect();
        println!(
            "Command: `target/debug/examples/relay_hostile {}` (built by `scripts/relay_hostile.sh`).\n",
            args.join(" ")
        );
        let pace = if a.every.is_zero() {
            "back to back".to_owned()
        } else {
            format!("one every {} µs", a.every.as_micros())
        };
        println!(
            "One `groupwire relay serve --memory` process; {} connections of each hostile kind at once ({}; {} in all; the kinds: ping flooders that never read, silent connections, slow readers that observe the member's group (4 KiB window, 1 KiB read per 50 ms), oversized frames (2 MiB prefix and body, reconnecting), seeded garbage (reconnecting), half-open handshakes (half a Hello over TCP, half an HTTP upgrade over WebSocket); and, only when asked for, `readers`, observers of the member's group that read everything at once: a control, not hostile). One well-behaved member measures {} round trips ({pace}; its `Send` of 100 bytes to its own `Deliver`) alone, then {} s into that load, {} times over (the load stopped in between); the table pools the cycles. Memory from /proc/PID/status of the relay.\n",
            a.per_kind,
            a.kinds.join(", "),
            a.per_kind * a.kinds.len(),
            a.round_trips,
            a.ramp.as_secs(),
            a.cycles
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
        println!("| relay CPU while the member measured under load | | {busy}% of a core | | |");
        let mut ratios: Vec<f64> = rows
            .iter()
            .map(|r| r[3] as f64 / r[1].max(1) as f64)
            .collect();
        ratios.sort_by(f64::total_cmp);
        println!(
            "| member round trip p99, median of the cycles' ratios | | | {:.2}x | ≤ 1.2x |",
            ratios[ratios.len() / 2]
        );
        println!("\n| cycle | p50 alone → loaded | p99 alone → loaded | relay CPU loaded |");
        println!("|---|---|---|---|");
        for (i, r) in rows.iter().enumerate() {
            println!(
                "| {} | {} → {} µs | {} → {} µs ({:.2}x) | {}% |",
                i + 1,
                r[0],
                r[2],
                r[1],
                r[3],
                r[3] as f64 / r[1].max(1) as f64,
                r[4]
            );
        }
        if a.isolate {
            println!(
                "\nIsolated: relay on CPU {RELAY_CPU}, member on CPU {BENCH_CPU}{}, hostile clients on CPU {BENCH_CPU} under SCHED_IDLE; a SCHED_IDLE spinner on each CPU for the whole run.",
                if member_fifo {
                    " under SCHED_FIFO"
                } else {
                    " (SCHED_FIFO refused: normal priority)"
                }
            );
        }
    }
}
