//! Shared by the CLI's integration tests: `groupwire relay serve` as a
//! process on a free loopback port.
#![allow(
    dead_code,
    reason = "each test binary uses its own part of this module"
)]

use std::io::{BufRead, BufReader, Lines};
use std::process::{Child, ChildStdout, Command, Stdio};

/// A relay process, killed (SIGKILL, by its own handle) when dropped.
pub(crate) struct Relay {
    /// The process.
    pub(crate) child: Child,
    /// The TCP address from its first line, `relay listening on ADDR`.
    pub(crate) addr: String,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl Relay {
    /// `groupwire relay serve --listen 127.0.0.1:0 ARGS...`, its stderr
    /// discarded.
    pub(crate) fn start(args: &[&str]) -> Self {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_groupwire"));
        cmd.args(["relay", "serve", "--listen", "127.0.0.1:0"])
            .args(args)
            .stderr(Stdio::null());
        Self::spawn(&mut cmd)
    }

    /// Runs `cmd`, a relay (perhaps behind a shell) that prints
    /// `relay listening on ADDR` first on stdout.
    pub(crate) fn spawn(cmd: &mut Command) -> Self {
        let mut child = cmd
            .stdout(Stdio::piped())
            .spawn()
            .expect("the relay starts");
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        let mut relay = Self {
            child,
            addr: String::new(),
            stdout,
        };
        let line = relay.next_line();
        relay.addr = line
            .trim()
            .strip_prefix("relay listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_owned();
        relay
    }

    /// The next line the relay prints on stdout.
    pub(crate) fn next_line(&mut self) -> String {
        self.stdout
            .next()
            .expect("a line from the relay")
            .expect("utf-8")
    }

    /// `kill -9`, and waits for it to be gone.
    pub(crate) fn kill(&mut self) {
        self.child.kill().expect("kill -9");
        let _ = self.child.wait();
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
