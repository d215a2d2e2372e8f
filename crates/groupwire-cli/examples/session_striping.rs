//! A session's bulk channel on one TCP connection against the same channel
//! striped over several (`Mechanism::Striped`, Leigh et al. §4.3), on real
//! sockets through the link emulator's TCP relay (`groupwire emulate
//! --tcp`: each relayed connection is its own Reno TCP across the lossy,
//! delayed path), one after another in one run.
//!
//! ```text
//! session_striping [--loss MODEL] [--delay 25ms] [--rate 100Mbit/s] [--mbytes 4] [--streams 1,2,4,8] [--seed 1]
//! ```
//!
//! Prints a markdown table: per stream count, the seconds from the first
//! message to the last delivered, the goodput, its ratio to one stream's,
//! and the segments the emulator's relay sent again. `--delay` is each
//! direction's, so the round trip is twice it. Every message is checked to
//! arrive exactly once. Used by `scripts/results.sh session-striping`.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;
use groupwire_link::{LinkConfig, LossModel};
use groupwire_proto::Bitrate;
use groupwire_tokio::Clock;
use groupwire_tokio::emulator::{Emulator, EmulatorConfig};
use groupwire_tokio::session::{Event, Mechanism, Qos, Session, SessionOptions};

#[derive(Parser)]
struct Args {
    /// Loss model of the data direction (see `groupwire emulate --help`).
    #[arg(long, default_value = "bernoulli:0.01")]
    loss: LossModel,
    /// One-way delay of each direction.
    #[arg(long, default_value = "25ms", value_parser = groupwire_units::duration::parse)]
    delay: Duration,
    /// The path's rate, each direction.
    #[arg(long, default_value = "100Mbit/s")]
    rate: Bitrate,
    /// Megabytes moved per run, in 16 KiB messages.
    #[arg(long, default_value_t = 4)]
    mbytes: usize,
    /// Stream counts to run, in order (1: `Mechanism::Reliable`).
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    streams: Vec<u8>,
    /// Seed of the emulated links.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

const CHUNK: usize = 16 * 1024;
/// Only bounds how long a stalled run takes to fail.
const PATIENCE: Duration = Duration::from_secs(600);

struct Run {
    secs: f64,
    resent: u64,
}

async fn run(args: &Args, streams: u8) -> anyhow::Result<Run> {
    let loopback = "127.0.0.1:0";
    let b = Session::bind_with(loopback, SessionOptions::new()?).await?;
    let link = LinkConfig::new().latency(args.delay).rate(args.rate);
    let emu = Emulator::bind(
        EmulatorConfig::new(loopback.parse()?, b.local_addr())
            .lossy_forward(link, args.seed, args.loss.clone())
            .tcp(true),
    )
    .await
    .context("cannot start the link emulator")?
    .spawn()?;
    let emu_addr = emu.local_addr();
    let a = Session::bind_with(loopback, SessionOptions::new()?).await?;
    let peer = a.connect(emu_addr).await?;
    let ch = peer.channel("dataset", Qos::bulk())?;
    ch.set_mechanism(if streams <= 1 {
        Mechanism::Reliable
    } else {
        Mechanism::Striped { streams }
    })?;
    let n = (args.mbytes << 20).div_ceil(CHUNK) as u32;
    let clock = Clock::start();
    let start = clock.now();
    for i in 0..n {
        let mut m = i.to_be_bytes().to_vec();
        m.resize(CHUNK, (i % 251) as u8);
        ch.send(m)?;
    }
    let mut got = BTreeSet::new();
    tokio::time::timeout(PATIENCE, async {
        while got.len() < n as usize {
            match b.next_event().await {
                Some(Event::Message { payload, .. }) => {
                    let i = u32::from_be_bytes(payload[..4].try_into().expect("4 bytes"));
                    if !got.insert(i) {
                        bail!("message {i} arrived twice");
                    }
                }
                Some(_) => {}
                None => bail!("the receiving session closed"),
            }
        }
        Ok(())
    })
    .await
    .context("the transfer did not finish")??;
    let secs = clock.now().saturating_duration_since(start).as_secs_f64();
    a.close().await?;
    b.close().await?;
    let stats = emu.stop().await?;
    Ok(Run {
        secs,
        resent: stats.tcp.forward_resent,
    })
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let rt = tokio::runtime::Runtime::new()?;
    println!(
        "{} MB in {} KiB messages; path {} each way, {} one-way delay each way, loss `{}` on the data direction.",
        args.mbytes,
        CHUNK / 1024,
        args.rate,
        groupwire_units::duration::format(args.delay),
        args.loss
    );
    println!();
    println!("| streams | mechanism | seconds | goodput Mbit/s | × one stream | segments resent |");
    println!("|---|---|---|---|---|---|");
    let mut base = None;
    for &s in &args.streams {
        let r = rt.block_on(run(&args, s))?;
        let mbps = (args.mbytes << 20) as f64 * 8.0 / r.secs / 1e6;
        let ratio = *base.get_or_insert(mbps);
        let mech = if s <= 1 {
            "reliable".to_string()
        } else {
            format!("striped:{s}")
        };
        println!(
            "| {s} | {mech} | {:.2} | {mbps:.2} | {:.2} | {} |",
            r.secs,
            mbps / ratio,
            r.resent
        );
    }
    Ok(())
}
