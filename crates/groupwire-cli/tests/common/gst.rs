//! GStreamer for the interop tests: installed by `scripts/gstreamer.sh`,
//! pipelines as processes killed when dropped, loopback sockets.

use std::io::Write;
use std::net::{SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// gst-launch-1.0's path, or `None` (said on stderr) where GStreamer
/// cannot be installed.
pub(crate) fn gst_launch() -> Option<PathBuf> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/gstreamer.sh");
    let out = Command::new(script)
        .output()
        .expect("scripts/gstreamer.sh runs");
    if !out.status.success() {
        eprintln!(
            "SKIPPED: GStreamer interop needs GStreamer: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        return None;
    }
    Some(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// A gst-launch-1.0 pipeline, killed when dropped.
pub(crate) struct Pipeline(Child);

impl Pipeline {
    /// `gst-launch-1.0 -q DESCRIPTION`.
    pub(crate) fn start(gst: &PathBuf, description: &str) -> Self {
        let args: Vec<&str> = description.split_whitespace().collect();
        Self(
            Command::new(gst)
                .arg("-q")
                .args(&args)
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("gst-launch-1.0 starts"),
        )
    }
}

impl Pipeline {
    /// `udpsrc(from, caps) ! ELEMENTS ! udpsink(to)`: a stream in on one
    /// loopback port, through `elements`, out to another.
    pub(crate) fn udp(gst: &PathBuf, from: u16, caps: &str, elements: &str, to: u16) -> Self {
        let (src, sink) = (udpsrc(from, caps), udpsink(to));
        Self::start(gst, &format!("{src} ! {elements} ! {sink}"))
    }

    /// [`udp`](Self::udp) from a free loopback port to a socket of ours:
    /// the pipeline, the port it listens on and the socket it sends to.
    pub(crate) fn udp_to_socket(
        gst: &PathBuf,
        caps: &str,
        elements: &str,
    ) -> (Self, u16, UdpSocket) {
        let (port, out) = (free_port(), bind());
        let pipeline = Self::udp(gst, port, caps, elements, out.local_addr().unwrap().port());
        (pipeline, port, out)
    }
}

/// A `udpsrc` on 127.0.0.1:`port` (4 MiB socket buffer) producing `caps`.
pub(crate) fn udpsrc(port: u16, caps: &str) -> String {
    format!("udpsrc address=127.0.0.1 port={port} buffer-size=4194304 caps={caps}")
}

/// A `udpsink` to 127.0.0.1:`port`, not synchronised to the clock.
pub(crate) fn udpsink(port: u16) -> String {
    format!("udpsink host=127.0.0.1 port={port} sync=false async=false")
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        self.0.kill().ok();
        self.0.wait().ok();
    }
}

/// A loopback port nobody is using now.
pub(crate) fn free_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

pub(crate) fn bind() -> UdpSocket {
    let s = UdpSocket::bind("127.0.0.1:0").expect("bind");
    s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    s
}

/// Every datagram `sock` receives until it has been quiet for `quiet`
/// after `done` is set.
#[allow(
    clippy::disallowed_methods,
    reason = "real sockets, timed by the wall clock"
)]
pub(crate) fn drain_until(sock: &UdpSocket, quiet: Duration, done: &AtomicBool) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    let mut buf = vec![0u8; 65536];
    let mut last = Instant::now();
    while !done.load(Ordering::Relaxed) || last.elapsed() < quiet {
        if let Ok(n) = sock.recv(&mut buf) {
            got.push(buf[..n].to_vec());
            last = Instant::now();
        }
    }
    got
}

/// Every datagram `sock` receives until it has been quiet for `quiet`.
pub(crate) fn drain(sock: &UdpSocket, quiet: Duration) -> Vec<Vec<u8>> {
    drain_until(sock, quiet, &AtomicBool::new(true))
}

/// `groupwire emulate` in front of `target`, losing the packets a looping
/// trace says (`trace` is the file's text: 0 delivers, 1 loses).
pub(crate) fn emulate_trace(
    target: SocketAddr,
    trace: &str,
    dir: &tempfile::TempDir,
) -> super::Proc {
    let path = dir.path().join("loss.trace");
    std::fs::File::create(&path)
        .and_then(|mut f| f.write_all(trace.as_bytes()))
        .unwrap();
    let loss = format!("trace:{}", path.display());
    super::emulate_to(target, &["--loss", &loss, "--duration", "60s", "--quiet"])
}
