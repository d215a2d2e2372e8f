//! An emulated path for any IP traffic, the way Mahimahi's shells do it
//! (Netravali et al., USENIX ATC 2015): a command runs in a network
//! namespace of its own whose only way out is a TUN device; this process
//! reads every IP packet from it, passes it through the uplink's
//! [`Link`] model and writes it into a second TUN device in the host's
//! namespace, and the replies come back through the downlink's model. So
//! kernel TCP (iperf3, curl, a parallel-TCP transfer), QUIC or anything
//! else meets the same seeded rate, delay, queue and loss models as the
//! simulator's links and `groupwire emulate`'s UDP forwarding.
//!
//! Addresses: each shell takes a /30 of 100.64.0.0/10 (shared address
//! space, RFC 6598, never routed on the Internet): the host side is
//! [`Shell::host_addr`], the namespace side [`Shell::inner_addr`], and the
//! namespace's default route points at the host. A server the command
//! should reach listens on the host address; the command finds it in the
//! environment variable `GROUPWIRE_SHELL_HOST` (as Mahimahi's
//! `MAHIMAHI_BASE`). Nothing is routed beyond the host: the shell reaches
//! the host's own services only, not the network.
//!
//! Needs Linux, `CAP_NET_ADMIN` and `CAP_SYS_ADMIN` (in practice root) to
//! create the namespace and the TUN devices, and iproute2's `ip` to
//! configure them; [`ShellError`] says which is missing. Everything made
//! is removed when the [`Shell`] is dropped.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::ffi::OsString;
use std::io;
use std::net::Ipv4Addr;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicU32, Ordering};

use groupwire_link::{Link, LinkConfig, LossError};
use groupwire_proto::Instant;
use tokio::sync::watch;
use tun_rs::{AsyncDevice, DeviceBuilder};

use crate::clock::Clock;
use crate::emulator::{CorruptPolicy, DirectionStats, admit};

/// Counters of a [`Shell`].
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct ShellStats {
    /// Namespace → host (the command's sends).
    pub uplink: DirectionStats,
    /// Host → namespace.
    pub downlink: DirectionStats,
}

/// Why a shell could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ShellError {
    /// A link's loss model is invalid or its trace unreadable.
    #[error("link model: {0}")]
    Link(#[from] LossError),
    /// A link has a classful queue discipline (they run in the simulator).
    #[error(
        "link model: the shell serves each direction as one FIFO; priority, DRR and WFQ queues run in the simulator"
    )]
    Classful,
    /// The TUN device could not be made.
    #[error(
        "cannot create a TUN device ({0}); emulate shell needs Linux, /dev/net/tun and root (CAP_NET_ADMIN): run it with sudo"
    )]
    Tun(io::Error),
    /// An `ip` command failed.
    #[error(
        "`ip {args}` failed: {why}; emulate shell needs iproute2's ip and root (CAP_SYS_ADMIN, CAP_NET_ADMIN)"
    )]
    Ip {
        /// Its arguments.
        args: String,
        /// What it said, or why it could not run.
        why: String,
    },
    /// The command could not be started.
    #[error("cannot run the command: {0}")]
    Spawn(io::Error),
}

/// The configuration of a [`Shell`].
#[derive(Clone, Debug)]
pub struct ShellConfig {
    /// Namespace → host.
    pub uplink: LinkConfig,
    /// Host → namespace.
    pub downlink: LinkConfig,
    /// Packets in flight at most, both directions together; more are
    /// dropped and counted as overflow.
    pub max_held: usize,
}

impl ShellConfig {
    /// Both directions with the same model (the downlink's seed one more).
    pub fn new(uplink: LinkConfig, downlink: LinkConfig) -> Self {
        Self {
            uplink,
            downlink,
            max_held: DEFAULT_MAX_HELD,
        }
    }
}

/// Packets in flight at most by default (a second at 100 Mbit/s of full
/// 1500-byte packets).
pub const DEFAULT_MAX_HELD: usize = 8192;

/// A network namespace behind two TUN devices and two link models; see
/// the [module docs](self).
pub struct Shell {
    ns: String,
    inner: AsyncDevice,
    outer: AsyncDevice,
    host: Ipv4Addr,
    links: [Link; 2],
    max_held: usize,
    clock: Clock,
    stats_tx: watch::Sender<ShellStats>,
}

/// Shells made by this process (names and addresses differ).
static SHELLS: AtomicU32 = AtomicU32::new(0);

impl Shell {
    /// Makes the namespace and the devices, and starts the clock.
    pub fn create(cfg: ShellConfig) -> Result<Self, ShellError> {
        let up = cfg.uplink.build()?;
        let down = cfg.downlink.build()?;
        if up.is_classful() || down.is_classful() {
            return Err(ShellError::Classful);
        }
        // A /30 of 100.64.0.0/10 from the process id and a counter, so
        // shells of one process, and of processes with different ids, do
        // not collide.
        let n = SHELLS.fetch_add(1, Ordering::Relaxed);
        let slot = (std::process::id().wrapping_mul(64).wrapping_add(n)) % (1 << 20);
        let base = u32::from(Ipv4Addr::new(100, 64, 0, 0)) + slot * 4;
        let host = Ipv4Addr::from(base + 1);
        let inner_addr = Ipv4Addr::from(base + 2);
        let ns = format!("groupwire-{}-{n}", std::process::id());
        let (in_name, out_name) = (format!("gws{slot}i"), format!("gws{slot}o"));
        let inner = open_tun(&in_name).map_err(ShellError::Tun)?;
        let outer = open_tun(&out_name).map_err(ShellError::Tun)?;
        ip(&["netns", "add", &ns])?;
        // From here on, dropping the shell removes the namespace (and the
        // inner device with it); the outer one goes with its descriptor.
        let shell = Self {
            ns,
            inner,
            outer,
            host,
            links: [up, down],
            max_held: cfg.max_held.max(1),
            clock: Clock::start(),
            stats_tx: watch::channel(ShellStats::default()).0,
        };
        let ns = shell.ns.as_str();
        let (h, i) = (format!("{host}/30"), format!("{inner_addr}/30"));
        ip(&["link", "set", &in_name, "netns", ns])?;
        ip(&["-n", ns, "link", "set", "lo", "up"])?;
        ip(&["-n", ns, "addr", "add", &i, "dev", &in_name])?;
        ip(&["-n", ns, "link", "set", &in_name, "up"])?;
        ip(&["-n", ns, "route", "add", "default", "dev", &in_name])?;
        ip(&["addr", "add", &h, "dev", &out_name])?;
        ip(&["link", "set", &out_name, "up"])?;
        Ok(shell)
    }

    /// The host's address, as the command reaches it.
    pub fn host_addr(&self) -> Ipv4Addr {
        self.host
    }

    /// The command's address, as the host sees it.
    pub fn inner_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.host) + 1)
    }

    /// The namespace's name (`ip netns exec NAME ...` runs more in it).
    pub fn namespace(&self) -> &str {
        &self.ns
    }

    /// Counters, updated as packets pass.
    pub fn stats(&self) -> watch::Receiver<ShellStats> {
        self.stats_tx.subscribe()
    }

    /// Runs `command` (program and arguments) in the namespace with
    /// `GROUPWIRE_SHELL_HOST` set, its standard streams the caller's, and
    /// carries its traffic until it exits. Returns its exit status and the
    /// counters.
    pub async fn run(
        &mut self,
        command: &[OsString],
    ) -> Result<(ExitStatus, ShellStats), ShellError> {
        let (program, args) = command
            .split_first()
            .ok_or_else(|| ShellError::Spawn(io::Error::other("no command")))?;
        let mut child = tokio::process::Command::new("ip")
            .args(["netns", "exec", &self.ns])
            .arg(program)
            .args(args)
            .env("GROUPWIRE_SHELL_HOST", self.host.to_string())
            .kill_on_drop(true)
            .spawn()
            .map_err(ShellError::Spawn)?;
        let mut pump = Pump {
            links: &mut self.links,
            held: BinaryHeap::new(),
            next_seq: 0,
            stats: ShellStats::default(),
        };
        let (mut buf, mut buf2) = (vec![0u8; 65536], vec![0u8; 65536]);
        let status = loop {
            pump.deliver_due(self.clock.now(), [&self.outer, &self.inner]);
            self.stats_tx.send_replace(pump.stats.clone());
            let next = pump.held.peek().map(|Reverse(h)| self.clock.to_tokio(h.at));
            tokio::select! {
                s = child.wait() => break s.map_err(ShellError::Spawn)?,
                r = self.inner.recv(&mut buf) => if let Ok(n) = r {
                    pump.offer(self.clock.now(), UP, &buf[..n], self.max_held);
                },
                r = self.outer.recv(&mut buf2) => if let Ok(n) = r {
                    pump.offer(self.clock.now(), DOWN, &buf2[..n], self.max_held);
                },
                () = crate::sleep_until(next) => {}
            }
        };
        pump.stats.uplink.held = 0;
        pump.stats.downlink.held = 0;
        self.stats_tx.send_replace(pump.stats.clone());
        Ok((status, pump.stats))
    }
}

impl std::fmt::Debug for Shell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shell")
            .field("ns", &self.ns)
            .field("host", &self.host)
            .finish_non_exhaustive()
    }
}

impl Drop for Shell {
    fn drop(&mut self) {
        if let Err(e) = ip(&["netns", "del", &self.ns]) {
            tracing::warn!(error = %e, "could not remove the shell's namespace");
        }
    }
}

/// Direction indexes.
const UP: usize = 0;
const DOWN: usize = 1;

/// A packet waiting for its delivery time.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Held {
    at: Instant,
    seq: u64,
    dir: usize,
    data: Vec<u8>,
}

/// The two links and what is in flight on them.
struct Pump<'a> {
    links: &'a mut [Link; 2],
    held: BinaryHeap<Reverse<Held>>,
    next_seq: u64,
    stats: ShellStats,
}

impl Pump<'_> {
    fn dir_stats(stats: &mut ShellStats, dir: usize) -> &mut DirectionStats {
        if dir == UP {
            &mut stats.uplink
        } else {
            &mut stats.downlink
        }
    }

    /// One IP packet into direction `dir`'s link (the packet is the whole
    /// wire datagram: no header is added for the link's rate).
    fn offer(&mut self, now: Instant, dir: usize, packet: &[u8], max_held: usize) {
        let mut data = packet.to_vec();
        let room = self.held.len() < max_held;
        let stats = Self::dir_stats(&mut self.stats, dir);
        // Corrupted packets are dropped, as the IP, TCP and UDP checksums
        // would drop them anyway.
        let at = admit(
            &mut self.links[dir],
            now,
            &mut data,
            0,
            CorruptPolicy::Drop,
            room,
            stats,
        );
        if let Some(at) = at {
            let seq = self.next_seq;
            self.next_seq += 1;
            self.held.push(Reverse(Held { at, seq, dir, data }));
        }
    }

    /// Writes every packet whose time has come: uplink packets into the
    /// host's device, downlink ones into the namespace's.
    fn deliver_due(&mut self, now: Instant, devices: [&AsyncDevice; 2]) {
        while self.held.peek().is_some_and(|Reverse(h)| h.at <= now) {
            let Reverse(h) = self.held.pop().expect("peeked");
            // A TUN device takes a packet at once or refuses it (its queue
            // full): a refusal is a send error, as on the UDP emulator.
            let written = devices[h.dir].try_send(&h.data);
            let s = Self::dir_stats(&mut self.stats, h.dir);
            s.held -= 1;
            match written {
                Ok(n) => {
                    s.delivered += 1;
                    s.delivered_bytes += n as u64;
                }
                Err(_) => s.send_errors += 1,
            }
        }
    }
}

/// A new TUN device `name` (IP packets, no extra header), not yet up.
fn open_tun(name: &str) -> io::Result<AsyncDevice> {
    DeviceBuilder::new()
        .name(name)
        .packet_information(false)
        .build_async()
}

/// Runs `ip ARGS`, or says why it failed.
fn ip(args: &[&str]) -> Result<(), ShellError> {
    let fail = |why: String| ShellError::Ip {
        args: args.join(" "),
        why,
    };
    let out = std::process::Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| fail(e.to_string()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(fail(String::from_utf8_lossy(&out.stderr).trim().to_owned()))
    }
}
