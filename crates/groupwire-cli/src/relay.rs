//! `groupwire relay` (run the group communication relay, mint tokens) and
//! `groupwire group` (a client to try it by hand).

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use bytes::Bytes;
use clap::{Args, Subcommand};
use groupwire_metrics::ChannelSnapshot;
use groupwire_relay::auth::{self, Claims};
use groupwire_relay::core::{DEFAULT_GROUP_PRIORITY, MAX_GROUP_PRIORITY, MAX_PRIORITY};
use groupwire_relay::frame::{ActivityMode, MembershipNotice, Role};
use groupwire_relay::storage::{NatsAuth, NatsConfig, StorageError, SyncMode};
use groupwire_relay::tls::{ClientTls, ServerTls};
use groupwire_relay::{
    ClientError, ClientEvent, ClientOptions, PlaintextToken, RelayClient, SchedulerConfig,
    ServerConfig, SlowConsumerPolicy, StorageConfig,
};
use groupwire_units::duration;

use crate::UsageError;
use crate::args::one_of;
use crate::metrics::MetricsArgs;

/// Run the Corona group communication relay, or mint tokens for it.
///
/// `groupwire relay --listen 127.0.0.1:7600` is short for
/// `groupwire relay serve --listen 127.0.0.1:7600`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub(crate) struct RelayArgs {
    #[command(subcommand)]
    command: Option<RelayCommand>,
    #[command(flatten)]
    serve: ServeArgs,
}

#[derive(Debug, Subcommand)]
enum RelayCommand {
    /// Run the relay (the default).
    Serve(Box<ServeArgs>),
    /// Mint a signed token for a relay started with --auth-secret-file.
    Token(TokenArgs),
    /// Load a running relay with many clients; measure latency and throughput.
    Bench(Box<crate::relay_bench::BenchArgs>),
    /// Draw a PNG chart from a CSV file (now `groupwire plot`).
    #[command(hide = true)]
    Plot(crate::plot::PlotArgs),
}

/// Run the relay: groups with shared state, roles, totally ordered
/// multicast, state transfer, locks and priority scheduling.
///
/// State (groups, the update log, checkpoints) lives in an SQLite database
/// in --data-dir and survives restarts. The relay prints its addresses on
/// stdout and runs until Ctrl-C. Protocol: docs/relay-protocol.md.
///
/// Example: groupwire relay serve --listen 127.0.0.1:7600 --ws 127.0.0.1:7601
#[derive(Debug, Args)]
struct ServeArgs {
    /// TCP address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:7600")]
    listen: SocketAddr,
    /// Once listening, print one JSON line on stdout for scripts instead of
    /// the banner: `{"ready":"relay","tcp":ADDR,"tls":BOOL,
    /// "websocket":URL|null,"state":"memory"|DIR|NATS_URLS}`.
    #[arg(long)]
    ready_json: bool,
    /// Also serve WebSocket clients (browsers) on this address. A plain
    /// HTTP GET of / there shows a demo page (a shared whiteboard; open it
    /// in two tabs) and /groupwire.js the browser client it uses.
    #[arg(long)]
    ws: Option<SocketAddr>,
    /// Do not serve the demo page on the --ws address: plain HTTP requests
    /// get 426 Upgrade Required.
    #[arg(long)]
    no_demo_page: bool,
    /// PEM certificate chain (leaf first): serve TLS on every listener
    /// (--listen becomes tls://, --ws becomes wss://; no plaintext listener
    /// remains, so tokens never cross the network in clear).
    #[arg(long, requires = "tls_key", value_name = "FILE")]
    tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, requires = "tls_cert", value_name = "FILE")]
    tls_key: Option<PathBuf>,
    /// Directory for the relay's SQLite database.
    #[arg(long, default_value = "relay-data")]
    data_dir: PathBuf,
    /// Keep state in memory only (lost when the relay stops).
    #[arg(long, conflicts_with = "data_dir")]
    memory: bool,
    /// Keep state in NATS JetStream at these servers (comma-separated
    /// `nats://host:port` URLs, one cluster): run one relay per machine
    /// with the same list and clients on any of them share every group,
    /// in one order (docs/relay-cluster.md).
    #[arg(long, value_name = "URL[,URL...]", value_delimiter = ',',
          conflicts_with_all = ["data_dir", "memory"])]
    nats: Vec<String>,
    /// NATS credentials file (`.creds`: user JWT and NKey seed, as nsc
    /// writes them).
    #[arg(long, value_name = "FILE", requires = "nats",
          conflicts_with_all = ["nats_user", "nats_token"])]
    nats_creds: Option<PathBuf>,
    /// NATS user (with --nats-password).
    #[arg(long, requires_all = ["nats", "nats_password"], conflicts_with = "nats_token")]
    nats_user: Option<String>,
    /// NATS password (with --nats-user).
    #[arg(
        long,
        env = "GROUPWIRE_NATS_PASSWORD",
        hide_env_values = true,
        requires = "nats_user"
    )]
    nats_password: Option<String>,
    /// NATS token.
    #[arg(
        long,
        env = "GROUPWIRE_NATS_TOKEN",
        hide_env_values = true,
        requires = "nats"
    )]
    nats_token: Option<String>,
    /// Replicas of the streams and buckets the relay creates in NATS (3 on
    /// a three-node JetStream cluster). The same on every node of one
    /// cluster (a node that differs is refused).
    #[arg(long, default_value_t = 1, requires = "nats")]
    nats_replicas: usize,
    /// How long a lock held through this node outlives it: the node renews
    /// its clients' locks every third of this, so after a crash (kill -9)
    /// they are free again within it. Whole seconds (nats-server 2.11+).
    /// The same on every node of one cluster (a node that differs is
    /// refused).
    #[arg(long, value_name = "DURATION", value_parser = duration::parse, default_value = "10s", requires = "nats")]
    nats_lock_lease: Duration,
    /// A token key: `[KID=]FILE`, the file holding an HMAC secret (its text,
    /// trimmed of surrounding whitespace), the key id KID defaulting to the
    /// file name without its extension (`keys/2026-11.secret` is
    /// `2026-11`). Repeat to accept several keys while rotating. With at
    /// least one, clients must present tokens minted with one of them;
    /// without, anyone may do anything (local use). With --nats, either
    /// every node of the cluster requires tokens or none does (a node that
    /// differs is refused); the keys themselves may differ, for rotation.
    #[arg(long, value_name = "[KID=]FILE")]
    auth_secret_file: Vec<String>,
    /// Commit durability: `full` survives power loss, `normal` survives a
    /// relay crash only (faster on slow disks).
    #[arg(long, default_value = "full", value_parser = one_of(SyncMode::ALL, SyncMode::as_str))]
    sync: SyncMode,
    /// Largest frame accepted, in bytes. With --nats, the same on every
    /// node of the cluster (a node that differs is refused).
    #[arg(long, default_value_t = 1 << 20)]
    max_frame: usize,
    /// Give every queue the same priority (the paper's non-QoS baseline).
    #[arg(long)]
    equal_priorities: bool,
    /// What to do with clients that do not keep up: demote (serve them
    /// last), resync (drop their backlog, send a fresh state) or disconnect.
    #[arg(long, default_value = "demote",
          value_parser = one_of(SlowConsumerPolicy::ALL, SlowConsumerPolicy::as_str))]
    slow_consumer: SlowConsumerPolicy,
    /// With demote: a client that does not read and has this many bytes
    /// queued for one group is served from the log from then on, so a
    /// lagging member's memory stops growing with how long it lags
    /// (0: only at the per-client cap).
    #[arg(long, value_name = "BYTES", default_value_t = 512 << 10)]
    spill_queue_bytes: usize,
    /// A queue not served for this long is aged (raised above all others).
    #[arg(long, value_name = "DURATION", value_parser = duration::parse, default_value = "2s")]
    aging_timeout: Duration,
    /// A group sending more than this (bytes/s, fan-out included) is demoted.
    #[arg(long, default_value_t = 1 << 20)]
    burst_high: u64,
    /// A demoted group is restored below this rate (bytes/s).
    #[arg(long, default_value_t = 256 << 10)]
    burst_low: u64,
    /// Frames written per scheduling round before new input is read.
    #[arg(long, default_value_t = 64)]
    fanout_budget: usize,
    /// Worker threads of the relay's runtime (default: one per CPU). One
    /// task runs the protocol core; the others read and write connections,
    /// run TLS and WebSocket, and talk to NATS.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    threads: Option<u16>,
    /// While overloaded (see --overload-bytes), remove observers from any
    /// group larger than this, lowest priority first; principals stay
    /// (Corona §4.2). 0 never removes anyone.
    #[arg(long, default_value_t = 0)]
    shed_observers_above: usize,
    /// The relay counts as overloaded while this many bytes wait in its
    /// outgoing queues, all clients together.
    #[arg(long, default_value_t = 64 << 20)]
    overload_bytes: u64,
    /// Close a connection that has not sent its Hello this long after
    /// connecting (for WebSocket, the HTTP upgrade counts). Frees the
    /// connection slots of clients that connect and say nothing.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse, default_value = "10s")]
    handshake_timeout: Duration,
    /// Close a connection from which nothing (not even a Ping) arrived for
    /// this long; "off" never does. The Rust client pings every minute on
    /// its own; other clients that may stay quiet longer must send Pings.
    #[arg(long, default_value = "5m", value_parser = parse_idle)]
    idle_timeout: IdleTimeout,
    /// Most connections open at once from one IP address (TCP and
    /// WebSocket together); further ones are closed at once. 0: no limit.
    /// Raise it when many clients share an address (NAT, a load test).
    #[arg(long, default_value_t = 256)]
    max_conns_per_ip: usize,
    /// Stop reading a client's requests while this many bytes of its
    /// replies wait unread (it sends without reading); read again once it
    /// has read half of them. Bounds what such a client costs.
    #[arg(long, default_value_t = 64 << 10)]
    input_pause_bytes: usize,
    /// Kernel send buffer per connection, in bytes (SO_SNDBUF); 0 leaves
    /// it to the kernel's autotuning (up to 4 MiB). The default, the
    /// default send window, bounds what a client that never reads costs
    /// the relay; raise it for clients that ask for larger windows
    /// (Hello's window) on long links.
    #[arg(long, default_value_t = groupwire_relay::server::DEFAULT_SOCKET_SEND_BUFFER)]
    socket_send_buffer: usize,
    /// OS priority (nice, -20..19; Linux) of the thread that serves the
    /// connections that do not keep up: before their Hello, after a fatal
    /// error, and while their window is full or their replies go unread.
    /// The clients that read then run first. "off": no such thread.
    #[arg(long, value_name = "NICE", default_value = "10", value_parser = parse_nice)]
    background_nice: BackgroundNice,
}

/// `--background-nice`: a nice value, or `off` (`None`).
#[derive(Clone, Copy, Debug)]
struct BackgroundNice(Option<i32>);

fn parse_nice(s: &str) -> Result<BackgroundNice, String> {
    if s == "off" {
        return Ok(BackgroundNice(None));
    }
    match s.parse::<i32>() {
        Ok(n) if (-20..=19).contains(&n) => Ok(BackgroundNice(Some(n))),
        _ => Err(format!(
            "{s:?} is not a nice value from -20 to 19 (or \"off\")"
        )),
    }
}

/// `--idle-timeout`: a duration, or `off` (`None`).
#[derive(Clone, Copy, Debug)]
struct IdleTimeout(Option<Duration>);

fn parse_idle(s: &str) -> Result<IdleTimeout, String> {
    if s == "off" {
        return Ok(IdleTimeout(None));
    }
    let d = duration::parse(s).map_err(|e| format!("{e} (or \"off\")"))?;
    Ok(IdleTimeout(Some(d)))
}

/// Mint a token (a JWT signed with HS256): which groups a client may use,
/// its highest role and the highest priority it may ask for, until when.
///
/// Example: groupwire relay token --secret-file relay.secret --subject alice --group chat --group 'lab-*' --role observer --expires 8h
#[derive(Debug, Args)]
struct TokenArgs {
    /// The secret (a file given to the relay's --auth-secret-file).
    #[arg(long)]
    secret_file: PathBuf,
    /// Key id written in the token's header: the KID the relay knows this
    /// secret by (default: the file name without its extension, as the
    /// relay derives it).
    #[arg(long)]
    kid: Option<String>,
    /// Who the token is for (shown in logs).
    #[arg(long, default_value = "client")]
    subject: String,
    /// A group the token allows; repeat for more. `*` is every group,
    /// `lab-*` every group whose name starts with `lab-`, anything else
    /// exactly that name (commas and other punctuation included).
    #[arg(long = "group", value_name = "PATTERN", default_value = "*")]
    groups: Vec<String>,
    /// Highest role: principal, observer or membership-observer.
    #[arg(long, default_value = "principal", value_parser = one_of(Role::ALL, Role::as_str))]
    role: Role,
    /// Highest group or queue priority the client may ask for (0-10).
    #[arg(long, default_value_t = MAX_PRIORITY,
          value_parser = clap::value_parser!(u8).range(..=i64::from(MAX_PRIORITY)))]
    max_priority: u8,
    /// Lifetime: the token expires this long after minting (every token
    /// expires).
    #[arg(long, value_name = "DURATION", value_parser = duration::parse, default_value = "24h")]
    expires: Duration,
}

pub(crate) fn run_relay(args: RelayArgs) -> Result<()> {
    match args.command {
        None => serve(args.serve),
        Some(RelayCommand::Serve(s)) => serve(*s),
        Some(RelayCommand::Token(t)) => token(t),
        Some(RelayCommand::Bench(b)) => crate::relay_bench::run_bench(*b),
        Some(RelayCommand::Plot(p)) => crate::plot::run_plot(p),
    }
}

fn usage(msg: String) -> anyhow::Error {
    UsageError(anyhow!(msg)).into()
}

/// The key id a secret file gets when none is given: its file name
/// without the extension.
fn default_kid(path: &Path) -> Result<String> {
    path.file_stem()
        .and_then(|s| s.to_str())
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .ok_or_else(|| {
            usage(format!(
                "cannot derive a key id from {}; give one as KID=FILE",
                path.display()
            ))
        })
}

/// Reads `--auth-secret-file` values (`[KID=]FILE`) into a key set.
fn read_keys(specs: &[String]) -> Result<Option<auth::Keys>> {
    if specs.is_empty() {
        return Ok(None);
    }
    let mut keys = auth::Keys::new();
    for spec in specs {
        let (kid, path) = match spec.split_once('=') {
            Some((kid, path)) if !kid.contains('/') => (kid.to_owned(), PathBuf::from(path)),
            _ => {
                let path = PathBuf::from(spec);
                (default_kid(&path)?, path)
            }
        };
        let secret = read_secret(&path)?;
        keys.insert(&kid, &secret)
            .map_err(|e| usage(format!("--auth-secret-file {spec}: {e}")))?;
    }
    Ok(Some(keys))
}

/// A secret file's text, trimmed of surrounding whitespace (so a trailing
/// newline from `echo` or an editor is not part of the HMAC key).
fn read_secret(path: &Path) -> Result<Vec<u8>> {
    let s = std::fs::read(path)
        .with_context(|| format!("reading the secret file {}", path.display()))
        .map_err(|e| anyhow::Error::from(UsageError(e)))?;
    let trimmed = s.trim_ascii().to_vec();
    if trimmed.is_empty() {
        return Err(usage(format!(
            "the secret file {} is empty",
            path.display()
        )));
    }
    Ok(trimmed)
}

/// `relay serve --ready-json`.
#[derive(serde::Serialize)]
struct RelayReady {
    tcp: SocketAddr,
    tls: bool,
    websocket: Option<String>,
    state: String,
}

fn serve(a: ServeArgs) -> Result<()> {
    let (sync, policy) = (a.sync, a.slow_consumer);
    if a.max_frame < 1024 {
        return Err(usage(format!(
            "--max-frame {} is below 1024 bytes",
            a.max_frame
        )));
    }
    if a.burst_low > a.burst_high {
        return Err(usage("--burst-low is above --burst-high".into()));
    }
    let mut cfg = ServerConfig::new(a.listen);
    cfg.ws = a.ws;
    cfg.demo_page = !a.no_demo_page;
    cfg.core.auth_keys = read_keys(&a.auth_secret_file)?;
    if let (Some(cert), Some(key)) = (&a.tls_cert, &a.tls_key) {
        cfg.tls = Some(
            ServerTls::from_pem_files(cert, key)
                .map_err(|e| usage(format!("--tls-cert/--tls-key: {e}")))?,
        );
    }
    let tls = cfg.tls.is_some();
    if cfg.core.auth_keys.is_some() && !tls && !a.listen.ip().is_loopback() {
        tracing::warn!(
            "tokens are required but the relay has no TLS: clients must send them in clear \
             (--insecure-plaintext-token); give --tls-cert and --tls-key"
        );
    }
    cfg.storage = if !a.nats.is_empty() {
        let auth = match (&a.nats_creds, &a.nats_user, &a.nats_password, &a.nats_token) {
            (Some(file), ..) => NatsAuth::CredsFile(file.clone()),
            (None, Some(user), Some(password), _) => NatsAuth::UserPassword {
                user: user.clone(),
                password: password.clone(),
            },
            (None, None, _, Some(token)) => NatsAuth::Token(token.clone()),
            _ => NatsAuth::None,
        };
        if a.nats_replicas == 0 {
            return Err(usage("--nats-replicas must be at least 1".into()));
        }
        StorageConfig::Nats(
            NatsConfig::new(a.nats.clone())
                .auth(auth)
                .replicas(a.nats_replicas)
                .lock_lease(a.nats_lock_lease),
        )
    } else if a.memory {
        StorageConfig::Memory
    } else {
        StorageConfig::Sqlite {
            dir: a.data_dir.clone(),
            sync,
        }
    };
    cfg.core.max_frame = a.max_frame;
    cfg.core.sched = SchedulerConfig {
        equal_priorities: a.equal_priorities,
        slow_policy: policy,
        aging_timeout: a.aging_timeout,
        burst_high_bytes_per_sec: a.burst_high,
        burst_low_bytes_per_sec: a.burst_low,
        spill_queue_bytes: a.spill_queue_bytes,
        ..SchedulerConfig::default()
    };
    cfg.fanout_budget = a.fanout_budget;
    cfg.core.shed_observers_above = a.shed_observers_above;
    cfg.core.overload_queued_bytes = a.overload_bytes;
    cfg.handshake_timeout = a.handshake_timeout;
    cfg.idle_timeout = a.idle_timeout.0;
    cfg.max_conns_per_ip = a.max_conns_per_ip;
    cfg.input_pause_bytes = a.input_pause_bytes;
    cfg.socket_send_buffer = (a.socket_send_buffer != 0).then_some(a.socket_send_buffer);
    cfg.background_nice = a.background_nice.0;
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = a.threads {
        rt.worker_threads(usize::from(n));
    }
    let rt = rt
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(async {
        let handle = groupwire_relay::server::start(cfg).await.map_err(|e| {
            // Settings that differ from the other nodes' (issue 17)
            // are the user's to fix: exit code 2, like a bad option.
            let differ = settings_differ(&e);
            let e = anyhow::Error::new(e).context("starting the relay");
            if differ { UsageError(e).into() } else { e }
        })?;
        if a.ready_json {
            crate::ready::announce(
                "relay",
                &RelayReady {
                    tcp: handle.local_addr(),
                    tls,
                    websocket: ws_url(&handle, tls),
                    state: state_name(&a),
                },
            )?;
        } else {
            print_banner(&a, &handle, tls)?;
        }
        tokio::signal::ctrl_c()
            .await
            .context("waiting for Ctrl-C")?;
        handle.shutdown().await;
        Ok(())
    })
}

/// Whether the relay refused to start because its settings differ from
/// those every node on its NATS JetStream must share, or those stored are
/// unreadable (issue 17).
fn settings_differ(e: &std::io::Error) -> bool {
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<StorageError>())
        .is_some_and(|s| matches!(s, StorageError::ClusterSettings(_)))
}

/// Where state lives, for `--ready-json`: `memory`, the NATS servers
/// (`nats://...`) or the data directory.
fn state_name(a: &ServeArgs) -> String {
    if a.memory {
        "memory".into()
    } else if !a.nats.is_empty() {
        a.nats.join(",")
    } else {
        a.data_dir.display().to_string()
    }
}

/// The WebSocket listener's URL, if it has one.
fn ws_url(handle: &groupwire_relay::server::RelayHandle, tls: bool) -> Option<String> {
    let scheme = if tls { "wss" } else { "ws" };
    handle.ws_addr().map(|ws| format!("{scheme}://{ws}/"))
}

/// The human banner: addresses and where state lives, in one write, so a
/// reader that takes the first line and closes the pipe cannot make a
/// later line fail.
fn print_banner(
    a: &ServeArgs,
    handle: &groupwire_relay::server::RelayHandle,
    tls: bool,
) -> Result<()> {
    let tcp_scheme = if tls { "tls://" } else { "" };
    let mut banner = format!("relay listening on {tcp_scheme}{}\n", handle.local_addr());
    if let Some(url) = ws_url(handle, tls) {
        banner += &format!("websocket on {url}\n");
        if !a.no_demo_page {
            let page = url.replacen("ws", "http", 1);
            banner += &format!("demo page at {page} (open it in two tabs)\n");
        }
    }
    if a.memory {
        banner += "state in memory (lost on exit)\n";
    } else if !a.nats.is_empty() {
        banner += &format!("state in NATS JetStream at {}\n", a.nats.join(","));
    } else {
        banner += &format!("state in {}\n", a.data_dir.display());
    }
    let mut out = std::io::stdout().lock();
    out.write_all(banner.as_bytes())?;
    out.flush()?;
    Ok(())
}

fn token(t: TokenArgs) -> Result<()> {
    let secret = read_secret(&t.secret_file)?;
    let kid = match t.kid {
        Some(k) => k,
        None => default_kid(&t.secret_file)?,
    };
    let role = t.role;
    let lifetime = t.expires.as_secs();
    if lifetime == 0 {
        return Err(usage("--expires must be at least 1s".into()));
    }
    let now = groupwire_relay::client::wall_micros() / 1_000_000;
    let claims = Claims {
        subject: t.subject,
        groups: t.groups,
        max_role: role,
        max_priority: t.max_priority,
        issued_unix: now,
        expires_unix: now + lifetime,
    };
    let token = auth::mint(&kid, &secret, &claims).map_err(|e| usage(e.to_string()))?;
    writeln!(std::io::stdout(), "{token}")?;
    Ok(())
}

/// Talk to a relay by hand: create groups, send, watch, lock.
///
/// Example: groupwire group --relay ws://127.0.0.1:7601/ watch chat
#[derive(Debug, Args)]
pub(crate) struct GroupArgs {
    /// The relay's address: host:port or tcp://host:port for its TCP
    /// listener, ws://host:port/ for its WebSocket listener (--ws);
    /// tls://host:port and wss://host:port/ for a relay with --tls-cert.
    /// A comma-separated list names nodes of one cluster (--nats): the
    /// client connects to the first that answers and, if its node goes
    /// away, fails over to the next, resuming where it stopped (with one
    /// address, it reconnects to that relay when it comes back).
    #[arg(long, global = true, default_value = "127.0.0.1:7600")]
    relay: String,
    /// Token (for a relay started with --auth-secret-file). Sent only over
    /// TLS or to a loopback address unless --insecure-plaintext-token.
    #[arg(long, global = true, env = "GROUPWIRE_RELAY_TOKEN", default_value = "")]
    token: String,
    /// Trust only this PEM CA certificate for tls:// and wss:// (e.g. the
    /// CA of a self-signed deployment). Default: Mozilla's root set,
    /// compiled in.
    #[arg(long, global = true, value_name = "FILE")]
    ca_file: Option<PathBuf>,
    /// Send the token over a plaintext connection to a non-loopback
    /// address (anyone on the path can read and replay it).
    #[arg(long, global = true)]
    insecure_plaintext_token: bool,
    /// Your name as other members see it.
    #[arg(long, global = true, default_value = "cli")]
    name: String,
    #[command(subcommand)]
    command: GroupCommand,
}

#[derive(Debug, Subcommand)]
enum GroupCommand {
    /// Create a group (it persists until deleted).
    Create {
        /// Group name.
        group: String,
        /// Application type, e.g. chat or whiteboard.
        #[arg(long = "type", default_value = "chat")]
        group_type: String,
        /// Default priority, 0 (lowest) to 7.
        #[arg(long, default_value_t = DEFAULT_GROUP_PRIORITY,
              value_parser = clap::value_parser!(u8).range(..=i64::from(MAX_GROUP_PRIORITY)))]
        priority: u8,
        /// Initial shared state.
        #[arg(long, default_value = "")]
        state: String,
    },
    /// Delete a group with its log and checkpoints.
    Delete {
        /// Group name.
        group: String,
    },
    /// Join, print the state transfer (checkpoint and later updates), leave.
    Join {
        /// Group name.
        group: String,
        /// principal, observer or membership-observer.
        #[arg(long, default_value = "observer", value_parser = one_of(Role::ALL, Role::as_str))]
        role: Role,
    },
    /// Send updates as a principal and print their sequence numbers.
    Send {
        /// Group name.
        group: String,
        /// The messages, one update each.
        #[arg(required = true)]
        messages: Vec<String>,
        /// Application message type.
        #[arg(long = "type", default_value_t = 0)]
        msg_type: u16,
    },
    /// Join and print the state, then every update and membership change
    /// until Ctrl-C (or --count updates). Once a second, stderr shows the
    /// group's channel measures (bandwidth, one-way latency from the
    /// senders' stamps, jitter, updates the relay dropped for this client
    /// and their burstiness); a summary follows at the end.
    ///
    /// Example: groupwire group watch chat --metrics-json chat.jsonl
    Watch {
        /// Group name.
        group: String,
        /// principal, observer or membership-observer.
        #[arg(long, default_value = "observer", value_parser = one_of(Role::ALL, Role::as_str))]
        role: Role,
        /// Join in passive mode (lower priority).
        #[arg(long)]
        passive: bool,
        /// Stop after this many updates.
        #[arg(long)]
        count: Option<u64>,
        /// No channel measures on stderr (the updates still print).
        #[arg(long, short)]
        quiet: bool,
        #[command(flatten)]
        metrics: MetricsArgs,
    },
    /// Take a lock, hold it, release it.
    Lock {
        /// Group name.
        group: String,
        /// Lock name.
        lock: String,
        /// How long to hold it.
        #[arg(long, value_name = "DURATION", value_parser = duration::parse, default_value = "5s")]
        hold: Duration,
        /// Fail at once if someone holds it instead of waiting.
        #[arg(long = "try")]
        try_only: bool,
    },
    /// Store a checkpoint: the state after update SEQ (lets the log be compacted).
    Checkpoint {
        /// Group name.
        group: String,
        /// Last update the state includes.
        seq: u64,
        /// The state.
        state: String,
    },
}

pub(crate) fn run_group(a: GroupArgs) -> Result<()> {
    let rt = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    rt.block_on(group(a))
}

async fn group(a: GroupArgs) -> Result<()> {
    let mut opts = ClientOptions::new(&a.name).token(&a.token).plaintext_token(
        if a.insecure_plaintext_token {
            PlaintextToken::Always
        } else {
            PlaintextToken::LoopbackOnly
        },
    );
    if let Some(ca) = &a.ca_file {
        opts = opts.tls(ClientTls::from_ca_file(ca).map_err(|e| usage(format!("--ca-file: {e}")))?);
    }
    let relays: Vec<&str> = a
        .relay
        .split(',')
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .collect();
    if relays.is_empty() {
        return Err(usage("--relay: no address".into()));
    }
    let connect = || async {
        RelayClient::connect_failover(&relays, opts.clone())
            .await
            .map_err(|e| match e {
                ClientError::InvalidAddress { .. } => UsageError(anyhow!("--relay: {e}")).into(),
                ClientError::PlaintextToken => UsageError(anyhow!("{e}")).into(),
                e => anyhow::Error::from(e)
                    .context(format!("connecting to the relay at {}", a.relay)),
            })
    };
    // For commands that read no events: the receiver is dropped, so the
    // client discards them. Held unread, a full event channel (a group
    // whose log outgrows it, delivered on join) would stop the client from
    // reading its replies.
    let connect_unread = || async { connect().await.map(|(c, _events)| c) };
    let mut out = std::io::stdout();
    match a.command {
        GroupCommand::Create {
            group,
            group_type,
            priority,
            state,
        } => {
            let c = connect_unread().await?;
            c.create_group(&group, &group_type, priority, Bytes::from(state))
                .await?;
            writeln!(out, "created {group}")?;
        }
        GroupCommand::Delete { group } => {
            let c = connect_unread().await?;
            c.delete_group(&group).await?;
            writeln!(out, "deleted {group}")?;
        }
        GroupCommand::Join { group, role } => {
            let (c, mut ev) = connect().await?;
            let j = c.join(&group, role, ActivityMode::Active, false).await?;
            print_state(&mut out, &j)?;
            let mut next = j.checkpoint_seq + 1;
            while next <= j.head_seq && role != Role::MembershipObserver {
                match ev.recv().await {
                    Some(ClientEvent::Deliver(d)) => {
                        next = d.seq + 1;
                        print_delivery(&mut out, &d)?;
                    }
                    Some(ClientEvent::Closed(e)) => return Err(closed(e)),
                    None => return Err(closed(None)),
                    Some(_) => {}
                }
            }
            c.leave(&group).await?;
        }
        GroupCommand::Send {
            group,
            messages,
            msg_type,
        } => {
            let c = connect_unread().await?;
            c.join(&group, Role::Principal, ActivityMode::Active, false)
                .await?;
            for m in messages {
                let seq = c.send(&group, msg_type, Bytes::from(m)).await?;
                writeln!(out, "sent #{seq}")?;
            }
        }
        GroupCommand::Watch {
            group,
            role,
            passive,
            count,
            quiet,
            metrics,
        } => {
            let mode = if passive {
                ActivityMode::Passive
            } else {
                ActivityMode::Active
            };
            let (mut sinks, metrics_addr) = metrics.open().await?;
            if let (Some(a), false) = (metrics_addr, quiet) {
                eprintln!("metrics at http://{a}/metrics");
            }
            let (c, mut ev) = connect().await?;
            let j = c.join(&group, role, mode, true).await?;
            print_state(&mut out, &j)?;
            let mut seen = 0u64;
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            // The first tick is now: skip it, so the first line covers a second.
            tick.tick().await;
            let mut quiet_since = None;
            loop {
                tokio::select! {
                    _ = tick.tick() => {
                        let channels = c.channels().await?;
                        sinks.record(&channels);
                        if !quiet {
                            live_lines(&channels, &mut quiet_since);
                        }
                    }
                    e = ev.recv() => match e {
                        Some(ClientEvent::Deliver(d)) => {
                            print_delivery(&mut out, &d)?;
                            seen += 1;
                            if count.is_some_and(|n| seen >= n) {
                                break;
                            }
                        }
                        Some(ClientEvent::Membership(MembershipNotice { client, name, change, role, .. })) => {
                            writeln!(out, "member {name} (#{client}) {change:?} as {}", role.as_str())?;
                        }
                        Some(ClientEvent::GroupDeleted(g)) => {
                            writeln!(out, "group {g} deleted")?;
                            break;
                        }
                        Some(ClientEvent::Resync { dropped, .. }) => writeln!(out, "fell behind: {dropped} updates dropped, state follows")?,
                        Some(ClientEvent::State(j)) => print_state(&mut out, &j)?,
                        Some(ClientEvent::Reconnected { url, .. }) => writeln!(out, "reconnected to {url}")?,
                        Some(ClientEvent::RejoinFailed { group, error }) => {
                            return Err(anyhow::Error::from(error).context(format!("re-joining {group} after a reconnect")));
                        }
                        Some(ClientEvent::Closed(e)) => return Err(closed(e)),
                        None => return Err(closed(None)),
                        Some(_) => {}
                    },
                    _ = tokio::signal::ctrl_c() => break,
                }
                out.flush()?;
            }
            out.flush()?;
            let channels = c.final_channels().await?;
            sinks.record(&channels);
            sinks.close();
            if !quiet {
                for ch in &channels {
                    eprintln!("{}", ch.line());
                }
            }
            drop(c);
        }
        GroupCommand::Lock {
            group,
            lock,
            hold,
            try_only,
        } => {
            let c = connect_unread().await?;
            c.join(&group, Role::Principal, ActivityMode::Active, false)
                .await?;
            if try_only {
                if !c.try_lock(&group, &lock).await? {
                    return Err(anyhow!("lock {lock} is held by someone else"));
                }
            } else {
                writeln!(out, "waiting for {lock}")?;
                c.lock(&group, &lock).await?;
            }
            writeln!(out, "holding {lock} for {}", duration::format(hold))?;
            out.flush()?;
            tokio::time::sleep(hold).await;
            c.unlock(&group, &lock).await?;
            writeln!(out, "released {lock}")?;
        }
        GroupCommand::Checkpoint { group, seq, state } => {
            let c = connect_unread().await?;
            c.join(&group, Role::Principal, ActivityMode::Active, false)
                .await?;
            c.checkpoint(&group, seq, Bytes::from(state)).await?;
            writeln!(out, "checkpoint at #{seq}")?;
        }
    }
    Ok(())
}

/// The live channel lines on stderr: one per group that had traffic in
/// the last second, or one "no traffic" line when a quiet spell begins.
fn live_lines(channels: &[ChannelSnapshot], quiet_since: &mut Option<f64>) {
    let active: Vec<&ChannelSnapshot> = channels
        .iter()
        .filter(|c| c.inbound.bitrate > 0.0 || c.out.bitrate > 0.0)
        .collect();
    let t = channels.first().map_or(0.0, |c| c.t_s);
    if active.is_empty() {
        if quiet_since.is_none() {
            eprintln!("t={t:>4.0}s  no traffic");
            *quiet_since = Some(t);
        }
        return;
    }
    *quiet_since = None;
    for c in active {
        eprintln!("t={t:>4.0}s  {}", c.line());
    }
}

fn closed(e: Option<groupwire_relay::ClientError>) -> anyhow::Error {
    match e {
        Some(e) => anyhow!("the relay closed the connection: {e}"),
        None => anyhow!("the relay closed the connection"),
    }
}

fn print_state(out: &mut impl Write, j: &groupwire_relay::JoinInfo) -> Result<()> {
    writeln!(
        out,
        "joined {} ({}): state at #{} = {:?}, head #{}, {} member(s)",
        j.group,
        j.group_type,
        j.checkpoint_seq,
        String::from_utf8_lossy(&j.state),
        j.head_seq,
        j.members.len()
    )?;
    Ok(())
}

fn print_delivery(out: &mut impl Write, d: &groupwire_relay::frame::Update) -> Result<()> {
    writeln!(
        out,
        "#{} from {}: {}",
        d.seq,
        d.sender,
        String::from_utf8_lossy(&d.payload)
    )?;
    Ok(())
}
