//! `groupwire demo`: two sessions on loopback, one of them behind an
//! emulated lossy path whose loss changes over time, five channels of a
//! tele-immersion application between them, and a live table per channel.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use groupwire_link::{LinkConfig, LossModel, Varying};
use groupwire_metrics::{
    ChannelMeter, LatencyKind, Path as MeterPath, Plot, Report, Table, TimeSeries,
};
use groupwire_proto::session::{ChannelId, MechanismKind, Reliability};
use groupwire_tokio::Clock;
use groupwire_tokio::emulator::{Emulator, EmulatorConfig};
use groupwire_tokio::session::{Channel, Event, Qos, SendError, Session, SessionOptions};
use groupwire_units::{Bitrate, duration};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::{Value, json};

use crate::output;

/// Run a live two-peer session on this machine: five channels, each
/// declaring what it needs, through an emulated path whose loss changes
/// every few seconds, and watch the strategy selector pick and re-pick
/// each channel's mechanism.
///
/// The channels are a tele-immersion application's (Leigh et al.): a
/// telepointer (a loss band, Dyck & Gutwin), shared state (low latency, at
/// most 1% lost), a 2 Mbit/s camera (at most 0.1% lost within 50 ms),
/// edits (reliable, in order) and a dataset (bulk). Every channel crosses
/// the emulated path (--loss, --delay, --rate): the datagrams and the
/// reliable channels' TCP connection share its queue, and a TCP segment
/// the path loses is sent again a round trip later (the emulator's TCP
/// relay, as `groupwire emulate --tcp`). Once a second a table shows each
/// channel's mechanism, whether its QoS was met in the last whole second,
/// loss after recovery, messages rebuilt, overhead and latency. At the end
/// a summary, and CSV, JSON and PNG files in --out.
///
/// Example: groupwire demo --duration 60s --loss schedule:alternating
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub(crate) struct DemoArgs {
    /// How long to run.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse, default_value = "30s")]
    duration: Duration,
    /// Loss model of the path (see `groupwire emulate --help` for forms).
    #[arg(
        long,
        value_name = "MODEL",
        default_value = "schedule:8s bernoulli:0.5%; 8s bernoulli:3%; 8s gilbert:p=0.02,r=0.25; 6s bernoulli:0.2%; repeat"
    )]
    loss: LossModel,
    /// One-way delay of each direction (or a schedule).
    #[arg(long, value_name = "DURATION", default_value = "20ms")]
    delay: Varying<Duration>,
    /// Bit rate of each direction (or a schedule).
    #[arg(long, value_name = "RATE", default_value = "20Mbit/s")]
    rate: Varying<Bitrate>,
    /// Seed of the emulated links.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Where the summary, CSV and plots go.
    #[arg(long, short, value_name = "DIR", default_value = "out/demo")]
    out: PathBuf,
    /// Skip the PNG plots.
    #[arg(long)]
    no_plots: bool,
    /// No live table; the summary only.
    #[arg(long, short)]
    quiet: bool,
    #[command(flatten)]
    metrics: crate::metrics::MetricsArgs,
}

/// Each channel's measures in the shared model (Leigh et al. §4's
/// bandwidth, latency, both jitters, burstiness, loss and recovery paths),
/// fed by the receiving application: what `--metrics-json` writes.
type Meters = Arc<Mutex<BTreeMap<String, ChannelMeter>>>;

/// How a message reached the application, in the metrics model's words.
fn path(via: MechanismKind, recovered: bool) -> MeterPath {
    match (via, recovered) {
        (_, false) => MeterPath::Arrived,
        (MechanismKind::Afec, true) => MeterPath::Piggyback,
        (MechanismKind::Xor, true) => MeterPath::XorRow,
        (MechanismKind::Reliable, true) => MeterPath::Retransmit,
        (_, true) => MeterPath::Block,
    }
}

/// One channel of the demo: its QoS and what the application sends.
struct Spec {
    name: &'static str,
    qos: Qos,
    /// Message size and messages per second.
    size: usize,
    per_sec: u32,
}

fn specs() -> Vec<Spec> {
    let ms = Duration::from_millis;
    vec![
        Spec {
            name: "telepointer",
            qos: Qos::awareness().mer_band(0.05, 0.06),
            size: 40,
            per_sec: 30,
        },
        Spec {
            name: "state",
            qos: Qos::low_latency().max_loss(0.01),
            size: 200,
            per_sec: 60,
        },
        Spec {
            name: "camera",
            qos: Qos::stream()
                .rate(Bitrate::mbps(2))
                .max_residual_loss(0.001)
                .max_delay(ms(50)),
            size: 1000,
            per_sec: 250,
        },
        Spec {
            name: "edits",
            qos: Qos::reliable_ordered(),
            size: 100,
            per_sec: 5,
        },
        Spec {
            name: "dataset",
            qos: Qos::bulk(),
            size: 16 << 10,
            per_sec: 20,
        },
    ]
}

/// Header of a demo message: number and send time (µs on the shared clock).
const HEADER: usize = 12;

/// What one channel did: per message, its send time and (once arrived) its
/// latency and whether it was rebuilt.
#[derive(Default)]
struct Track {
    sent: Vec<u64>,
    got: Vec<Option<(u64, bool)>>,
    mechanisms: Vec<(f64, String)>,
}

impl Track {
    /// Messages sent in `[from, to)` µs, how many arrived, how many were
    /// rebuilt, and their latencies (µs).
    fn window(&self, from: u64, to: u64) -> (usize, usize, usize, Vec<u64>) {
        let (mut n, mut d, mut r, mut lat) = (0, 0, 0, Vec::new());
        for (i, &t) in self.sent.iter().enumerate() {
            if t < from || t >= to {
                continue;
            }
            n += 1;
            if let Some(Some((l, rec))) = self.got.get(i) {
                d += 1;
                r += usize::from(*rec);
                lat.push(*l);
            }
        }
        lat.sort_unstable();
        (n, d, r, lat)
    }
}

/// Gives the reliable channels' last messages, queued behind the bulk
/// channel's on the stream and held by the emulated path's retransmissions,
/// up to [`DRAIN`] more to arrive, so the summary counts what was lost,
/// not what was still on its way when the clock ran out.
async fn drain(specs: &[Spec], tracks: &Tracks) {
    let reliable: Vec<&str> = specs
        .iter()
        .filter(|s| s.qos.reliability == Reliability::Full && s.qos.preserve_order)
        .map(|s| s.name)
        .collect();
    let pending = || {
        let g = lock(tracks);
        reliable.iter().any(|n| {
            let t = &g[*n];
            t.got.iter().filter(|g| g.is_some()).count() < t.sent.len()
        })
    };
    let arrived = async {
        while pending() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    // What has not arrived by then counts as lost.
    let _ = tokio::time::timeout(DRAIN, arrived).await;
}

/// The longest [`drain`] waits.
const DRAIN: Duration = Duration::from_secs(5);

fn quantile(sorted: &[u64], q: f64) -> Option<f64> {
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted.get(i).map(|&v| v as f64 / 1000.0)
}

/// Whether a window meets the QoS: loss after recovery within what it
/// allows, and (where it has a delay budget) the 99th percentile of
/// one-way latency within the path's delay plus that budget.
fn met(qos: &Qos, loss: f64, p99_ms: Option<f64>, path_delay: Duration) -> bool {
    let loss_ok = match qos.reliability {
        Reliability::Full => loss == 0.0,
        Reliability::MerBand { hi, .. } => loss <= hi,
        Reliability::Residual(t) => loss <= t,
        _ => true,
    };
    let delay_ok = match (qos.max_delay, p99_ms) {
        (Some(b), Some(p)) => p <= (path_delay + b).as_secs_f64() * 1e3,
        _ => true,
    };
    loss_ok && delay_ok
}

type Tracks = Arc<Mutex<BTreeMap<String, Track>>>;

fn lock<T>(t: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    t.lock().unwrap_or_else(PoisonError::into_inner)
}

pub(crate) fn run(args: DemoArgs) -> anyhow::Result<()> {
    crate::net::runtime()?.block_on(demo(args))
}

async fn demo(args: DemoArgs) -> anyhow::Result<()> {
    let loopback = "127.0.0.1:0";
    let b = Session::bind_with(loopback, SessionOptions::new()?)
        .await
        .context("cannot bind the receiving session")?;
    let link = LinkConfig::new()
        .varying_delay(args.delay.clone())
        .varying_rate(args.rate.clone());
    let emu = Emulator::bind(
        EmulatorConfig::new(loopback.parse()?, b.local_addr())
            .lossy_forward(link, args.seed, args.loss.clone())
            .tcp(true),
    )
    .await
    .context("cannot start the link emulator")?
    .spawn()?;
    let emu_addr = emu.local_addr();
    // The reliable stream crosses the emulator too (its TCP relay on the
    // same port), so the monitor's path is the stream's.
    let a = Session::bind_with(loopback, SessionOptions::new()?).await?;
    let peer = a
        .connect(emu_addr)
        .await
        .context("the two sessions did not connect through the emulator")?;

    let clock = Clock::start();
    let tracks: Tracks = Arc::default();
    let meters: Meters = Arc::default();
    let (mut sinks, prom) = args.metrics.open().await?;
    if let Some(a) = prom {
        eprintln!("channel measures at http://{a}/metrics");
    }
    let specs = specs();
    let mut chans = Vec::new();
    for s in &specs {
        chans.push(peer.channel(s.name, s.qos)?);
        lock(&tracks).insert(s.name.to_owned(), Track::default());
        let m = ChannelMeter::new(s.name, LatencyKind::OneWay, clock.now());
        lock(&meters).insert(s.name.to_owned(), m);
    }
    let receiver = tokio::spawn(receive(b, clock, Arc::clone(&tracks), Arc::clone(&meters)));
    let senders: Vec<_> = specs
        .iter()
        .zip(&chans)
        .map(|(s, c)| {
            tokio::spawn(send_loop(
                c.clone(),
                s.size,
                s.per_sec,
                args.duration,
                clock,
                Arc::clone(&tracks),
                Arc::clone(&meters),
            ))
        })
        .collect();

    let live = Live::new(&specs, args.quiet);
    let mut series: BTreeMap<&str, [TimeSeries; 3]> = specs
        .iter()
        .map(|s| {
            (
                s.name,
                [
                    TimeSeries::new(s.name),
                    TimeSeries::new(s.name),
                    TimeSeries::new(s.name),
                ],
            )
        })
        .collect();
    let mut windows: BTreeMap<&str, (u32, u32)> = BTreeMap::new();
    let mut last_wire: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    let total = args.duration.as_secs().max(1);
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.tick().await;
    for sec in 1..=total + 1 {
        tick.tick().await;
        // The window one second back: its messages had a second to arrive.
        let (from, to) = (
            (sec - 1).saturating_sub(1) * 1_000_000,
            (sec - 1) * 1_000_000,
        );
        let mut rows = Vec::new();
        for (s, c) in specs.iter().zip(&chans) {
            let r = c.report();
            let (n, d, rec, lat) = lock(&tracks)[s.name].window(from, to);
            let loss = if n == 0 {
                0.0
            } else {
                1.0 - d as f64 / n as f64
            };
            let (p50, p99) = (quantile(&lat, 0.5), quantile(&lat, 0.99));
            let (wire, payload) = r
                .as_ref()
                .map_or((0, 0), |r| (r.stats.wire_bytes, r.stats.sent_bytes));
            let (w0, p0) = last_wire.insert(s.name, (wire, payload)).unwrap_or((0, 0));
            let overhead = (wire - w0) as f64 / (payload - p0).max(1) as f64;
            let path_delay = args.delay.value_at(Duration::from_micros(from));
            let ok = n > 0 && met(&s.qos, loss, p99, path_delay);
            if sec > 1 && n > 0 {
                let w = windows.entry(s.name).or_default();
                w.0 += u32::from(ok);
                w.1 += 1;
                let t = (sec - 2) as f64;
                let ser = series.get_mut(s.name).expect("every channel");
                ser[0].push(t, loss * 100.0);
                if let Some(p) = p99 {
                    ser[1].push(t, p);
                }
                ser[2].push(t, overhead);
            }
            let mech = r.as_ref().map_or("-".into(), |r| r.mechanism.to_string());
            {
                let mut g = lock(&tracks);
                let tr = g.get_mut(s.name).expect("every channel");
                if tr.mechanisms.last().is_none_or(|(_, m)| *m != mech) {
                    tr.mechanisms.push(((sec - 1) as f64, mech.clone()));
                }
            }
            rows.push(format!(
                "{:<12} {:<26} {:<7} {:>6} {:>7.2}% {:>7} {:>8.2} {:>8} {:>8}",
                s.name,
                mech,
                match (sec > 1 && n > 0, ok) {
                    (false, _) => "-",
                    (true, true) => "met",
                    (true, false) => "MISSED",
                },
                n,
                loss * 100.0,
                rec,
                overhead,
                p50.map_or("-".into(), |v| format!("{v:.1}")),
                p99.map_or("-".into(), |v| format!("{v:.1}")),
            ));
        }
        let path = peer.path().map(|p| {
            format!(
                "path: rtt {}, loss {:.2}%, mean burst {:.1}",
                p.srtt
                    .map_or("-".into(), |r| format!("{:.1} ms", r.as_secs_f64() * 1e3)),
                p.loss * 100.0,
                p.mean_burst
            )
        });
        live.show(sec.min(total), total, &rows, path.as_deref().unwrap_or(""));
        let now = clock.now();
        let snaps: Vec<_> = lock(&meters)
            .values_mut()
            .map(|m| m.snapshot(now))
            .collect();
        sinks.record(&snaps);
    }
    live.finish();
    for s in senders {
        s.await??;
    }
    drain(&specs, &tracks).await;
    a.close().await?;
    let emu_stats = emu.stop().await?;
    receiver.abort();
    let now = clock.now();
    let snaps: Vec<_> = lock(&meters)
        .values_mut()
        .map(|m| {
            m.finish();
            m.snapshot(now)
        })
        .collect();
    sinks.record(&snaps);
    sinks.close();

    let tracks = lock(&tracks);
    let report = summary(&specs, &chans, &tracks, &windows, series, &args, &emu_stats)?;
    drop(tracks);
    let mut out = std::io::stdout().lock();
    output::print_summary(&mut out, &report, args.duration)?;
    writeln!(
        out,
        "\nQoS met: share of whole seconds whose messages met the channel's QoS (loss after \
         recovery, and the delay budget above the path's own delay). Every channel crosses \
         the emulated path, the reliable ones (edits, dataset) over TCP through its relay."
    )?;
    let files = output::write_report(&args.out, &report, !args.no_plots)?;
    writeln!(out, "\nwrote {} files to {}", files, args.out.display())?;
    Ok(())
}

/// Sends `per_sec` messages of `size` bytes a second for `d`.
async fn send_loop(
    ch: Channel,
    size: usize,
    per_sec: u32,
    d: Duration,
    clock: Clock,
    tracks: Tracks,
    meters: Meters,
) -> anyhow::Result<()> {
    let gap = Duration::from_secs(1) / per_sec.max(1);
    let mut tick = tokio::time::interval(gap);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let n = (d.as_secs_f64() * f64::from(per_sec)) as u32;
    let mut msg = vec![0u8; size.max(HEADER)];
    for i in 0..n {
        tick.tick().await;
        let t = clock.now().as_micros();
        msg[..4].copy_from_slice(&i.to_be_bytes());
        msg[4..12].copy_from_slice(&t.to_be_bytes());
        {
            let mut g = lock(&tracks);
            let tr = g.get_mut(ch.name()).expect("every channel");
            tr.sent.push(t);
            let len = tr.sent.len().max(tr.got.len());
            tr.got.resize(len, None);
        }
        if let Some(m) = lock(&meters).get_mut(ch.name()) {
            m.sent(msg.len());
        }
        match ch.send(&msg) {
            // A full queue is a message the application could not send:
            // it counts as lost.
            Ok(()) | Err(SendError::Full) => {}
            Err(e) => return Err(e).with_context(|| format!("sending on {}", ch.name())),
        }
    }
    Ok(())
}

/// Records every message that arrives at the receiving session.
async fn receive(s: Session, clock: Clock, tracks: Tracks, meters: Meters) {
    // The receiver learns each channel's name from its Open.
    let mut names: BTreeMap<ChannelId, String> = BTreeMap::new();
    while let Some(ev) = s.next_event().await {
        match ev {
            Event::ChannelOpened { channel, name } => {
                names.insert(channel, name);
            }
            Event::Message {
                channel,
                payload,
                via,
                recovered,
                ..
            } if payload.len() >= HEADER => {
                let now = clock.now().as_micros();
                let i = u32::from_be_bytes(payload[..4].try_into().expect("4 bytes")) as usize;
                let t = u64::from_be_bytes(payload[4..12].try_into().expect("8 bytes"));
                let Some(name) = names.get(&channel) else {
                    continue;
                };
                let latency = now.saturating_sub(t);
                if let Some(m) = lock(&meters).get_mut(name) {
                    m.received(payload.len());
                    m.delivered(
                        i as u64,
                        path(via, recovered),
                        Some(Duration::from_micros(latency)),
                    );
                }
                let mut g = lock(&tracks);
                if let Some(tr) = g.get_mut(name) {
                    if tr.got.len() <= i {
                        tr.got.resize(i + 1, None);
                    }
                    tr.got[i] = Some((latency, recovered));
                }
            }
            _ => {}
        }
    }
}

/// The live table: bars redrawn in place on a terminal, lines otherwise.
struct Live {
    bars: Option<(MultiProgress, ProgressBar, Vec<ProgressBar>, ProgressBar)>,
    quiet: bool,
}

/// The live table's header, aligned with its rows.
fn header() -> String {
    format!(
        "{:<12} {:<26} {:<7} {:>6} {:>8} {:>7} {:>8} {:>8} {:>8}",
        "channel", "mechanism", "QoS", "msgs", "lost", "rebuilt", "overhead", "p50 ms", "p99 ms"
    )
}

impl Live {
    fn new(specs: &[Spec], quiet: bool) -> Self {
        let bars = (!quiet && std::io::stderr().is_terminal()).then(|| {
            let m = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
            let line = |m: &MultiProgress| {
                let b = m.add(ProgressBar::new(0));
                b.set_style(ProgressStyle::with_template("{msg}").expect("static template"));
                b
            };
            let head = line(&m);
            head.set_message(header());
            let rows = specs.iter().map(|_| line(&m)).collect();
            let foot = m.add(ProgressBar::new(0));
            foot.set_style(
                ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} s")
                    .expect("static template")
                    .progress_chars("=> "),
            );
            (m, head, rows, foot)
        });
        Self { bars, quiet }
    }

    fn show(&self, sec: u64, total: u64, rows: &[String], path: &str) {
        match &self.bars {
            Some((_, _, lines, foot)) => {
                for (l, r) in lines.iter().zip(rows) {
                    l.set_message(r.clone());
                }
                foot.set_length(total);
                foot.set_position(sec);
                foot.set_message(path.to_owned());
            }
            None if !self.quiet && sec % 5 == 0 => {
                let mut e = std::io::stderr().lock();
                let _ = writeln!(e, "[{sec}/{total} s] {path}\n{}", header());
                for r in rows {
                    let _ = writeln!(e, "{r}");
                }
            }
            None => {}
        }
    }

    fn finish(&self) {
        if let Some((m, head, lines, foot)) = &self.bars {
            head.finish();
            for l in lines {
                l.finish();
            }
            foot.finish();
            let _ = m.clear();
        }
    }
}

/// The run's report: one row per channel, and loss, latency and overhead
/// over time.
fn summary(
    specs: &[Spec],
    chans: &[Channel],
    tracks: &BTreeMap<String, Track>,
    windows: &BTreeMap<&str, (u32, u32)>,
    series: BTreeMap<&str, [TimeSeries; 3]>,
    args: &DemoArgs,
    emu: &groupwire_tokio::EmulatorStats,
) -> anyhow::Result<Report> {
    let mut rows = Vec::new();
    let mut summary = serde_json::Map::new();
    summary.insert(
        "duration_seconds".into(),
        json!(args.duration.as_secs_f64()),
    );
    summary.insert("path_loss".into(), json!(args.loss.to_string()));
    // Datagrams and TCP segments alike; the segments were sent again.
    summary.insert(
        "path_packets_lost".into(),
        json!(emu.forward.lost + emu.reverse.lost),
    );
    summary.insert(
        "path_tcp_segments_resent".into(),
        json!(emu.tcp.forward_resent + emu.tcp.reverse_resent),
    );
    for (s, c) in specs.iter().zip(chans) {
        let tr = &tracks[s.name];
        let (n, d, rec, lat) = tr.window(0, u64::MAX);
        let r = c.report().context("a channel vanished")?;
        let (ok, all) = windows.get(s.name).copied().unwrap_or((0, 0));
        let mechs: Vec<&str> = tr.mechanisms.iter().map(|(_, m)| m.as_str()).collect();
        let share = if all == 0 {
            0.0
        } else {
            f64::from(ok) / f64::from(all)
        };
        summary.insert(format!("{}_qos_met_share", s.name), json!(share));
        rows.push(vec![
            Value::from(s.name),
            Value::from(mechs.join(" -> ")),
            json!(share),
            json!(n),
            json!(d),
            json!(if n == 0 {
                0.0
            } else {
                1.0 - d as f64 / n as f64
            }),
            json!(rec),
            json!(r.stats.wire_bytes as f64 / r.stats.sent_bytes.max(1) as f64),
            json!(quantile(&lat, 0.5)),
            json!(quantile(&lat, 0.99)),
        ]);
    }
    let plot = |file: &str, title: &str, y: &str, i: usize| Plot {
        file: file.into(),
        title: title.into(),
        x_label: "time (s)".into(),
        y_label: y.into(),
        series: series.values().map(|s| s[i].clone()).collect(),
        ..Plot::default()
    };
    Ok(Report {
        scenario: "demo".into(),
        seed: args.seed,
        summary,
        tables: vec![Table {
            file: "channels".into(),
            columns: [
                "channel",
                "mechanisms",
                "qos_met_share",
                "sent",
                "delivered",
                "loss_after_recovery",
                "rebuilt",
                "wire_over_payload",
                "p50_ms",
                "p99_ms",
            ]
            .map(String::from)
            .to_vec(),
            rows,
        }],
        plots: vec![
            plot("loss", "Loss after recovery per second", "lost (%)", 0),
            plot(
                "latency",
                "One-way latency, 99th percentile per second",
                "ms",
                1,
            ),
            plot("overhead", "Wire bytes over payload per second", "ratio", 2),
        ],
    })
}
