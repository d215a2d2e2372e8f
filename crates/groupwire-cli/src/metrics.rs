//! `--metrics ADDR` and `--metrics-json FILE`: the channel measures every
//! real-socket command exports (Leigh et al. §4's bandwidth, latency,
//! jitter and burstiness, with residual loss and recovery paths; see
//! `groupwire_metrics::channel`).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use groupwire_metrics::ChannelSnapshot;
use groupwire_tokio::{MetricsEndpoint, MetricsPublisher};
use tokio::task::JoinHandle;

/// Where a command's channel measures go besides the terminal.
#[derive(Debug, Args)]
pub(crate) struct MetricsArgs {
    /// Serve the channel measures in the Prometheus text format at
    /// http://ADDR/metrics while running (e.g. 127.0.0.1:9464), updated
    /// once a second: groupwire_channel_{bytes,packets,lost,delivered,
    /// judged,loss_runs}_total, _latency_seconds, _jitter_seconds,
    /// _gilbert.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<SocketAddr>,
    /// Append the channel measures to FILE once a second, one JSON object
    /// per line (fields: channel, t_s, interval_s, out, in, latency_kind,
    /// latency, latency_total, jitter_fig4_ms, jitter_fig4_total_ms,
    /// jitter_rfc3550_ms, loss, burst, paths), and once more at the end.
    /// `groupwire metrics FILE --out DIR` turns it into CSV and PNG charts.
    #[arg(long, value_name = "FILE")]
    metrics_json: Option<PathBuf>,
}

/// The open sinks of [`MetricsArgs`].
pub(crate) struct MetricsSinks {
    json: Option<(PathBuf, BufWriter<File>)>,
    publisher: Option<MetricsPublisher>,
    server: Option<JoinHandle<()>>,
    /// The first write error, said once.
    failed: bool,
}

impl MetricsArgs {
    /// Opens the file and binds the endpoint (inside a tokio runtime).
    /// Returns the sinks and the endpoint's address, if any.
    pub(crate) async fn open(&self) -> anyhow::Result<(MetricsSinks, Option<SocketAddr>)> {
        let json = match &self.metrics_json {
            Some(p) => Some((
                p.clone(),
                BufWriter::new(
                    File::create(p).with_context(|| format!("cannot create {}", p.display()))?,
                ),
            )),
            None => None,
        };
        let (publisher, server, addr) = match self.metrics {
            Some(addr) => {
                let (ep, publisher) = MetricsEndpoint::bind(addr)
                    .await
                    .context("--metrics: pick a free address, e.g. 127.0.0.1:0")?;
                let bound = ep.local_addr()?;
                let server = tokio::spawn(ep.run(std::future::pending()));
                (Some(publisher), Some(server), Some(bound))
            }
            None => (None, None, None),
        };
        Ok((
            MetricsSinks {
                json,
                publisher,
                server,
                failed: false,
            },
            addr,
        ))
    }
}

impl MetricsSinks {
    /// Writes one interval's snapshots to every sink.
    pub(crate) fn record(&mut self, snaps: &[ChannelSnapshot]) {
        if let Some(p) = &self.publisher {
            p.publish(snaps);
        }
        if let Some((path, w)) = self.json.as_mut() {
            let written = snaps.iter().try_for_each(|s| {
                serde_json::to_writer(&mut *w, s).map_err(std::io::Error::other)?;
                w.write_all(b"\n")
            });
            let flushed = written.and_then(|()| w.flush());
            if let Err(e) = flushed {
                if !self.failed {
                    eprintln!("--metrics-json: cannot write {}: {e}", path.display());
                    self.failed = true;
                }
            }
        }
    }

    /// Stops the endpoint.
    pub(crate) fn close(self) {
        if let Some(s) = self.server {
            s.abort();
        }
    }
}
