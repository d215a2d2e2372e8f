//! The driver clock: the one place that reads the time.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use groupwire_proto::Instant;

/// Maps `tokio::time::Instant` to the machines' [`Instant`] (nanoseconds
/// since the clock's start) and back.
///
/// Reads time through `tokio::time`, so a test with paused time
/// (`#[tokio::test(start_paused = true)]`) drives machines and the emulator
/// on virtual time. It also remembers the wall-clock time at its start, so
/// [`wall_micros`](Clock::wall_micros) can stamp messages with a time that
/// another process on the same host can compare with its own (the drivers'
/// epochs differ; the wall clock does not).
///
/// `Copy`: every task that needs the time holds its own copy of one clock.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    epoch: tokio::time::Instant,
    /// Microseconds since the Unix epoch at `epoch`.
    wall_epoch_micros: u64,
}

impl Clock {
    /// A clock whose epoch ([`Instant::ZERO`]) is now.
    pub fn start() -> Self {
        let (epoch, wall) = read_clocks();
        let wall_epoch_micros = unix_micros(wall);
        Self {
            epoch,
            wall_epoch_micros,
        }
    }

    /// The current time.
    pub fn now(&self) -> Instant {
        self.from_tokio(read_monotonic())
    }

    /// The machine instant of a tokio instant (instants before the epoch
    /// map to [`Instant::ZERO`]).
    pub fn from_tokio(&self, t: tokio::time::Instant) -> Instant {
        let since = t.saturating_duration_since(self.epoch);
        Instant::from_nanos(u64::try_from(since.as_nanos()).unwrap_or(u64::MAX))
    }

    /// The tokio instant of a machine instant, for `sleep_until`. Far-future
    /// instants (such as [`Instant::MAX`]) are capped at about a year.
    pub fn to_tokio(&self, t: Instant) -> tokio::time::Instant {
        let since = t.since_epoch().min(FAR_FUTURE);
        self.epoch + since
    }

    /// Microseconds since the Unix epoch at `t`, as the wall clock read at
    /// this clock's start plus the monotonic time since. Comparable across
    /// processes on one host (to the precision of their wall clocks); use
    /// it to stamp a payload and measure one-way latency at a receiver.
    pub fn wall_micros(&self, t: Instant) -> u64 {
        self.wall_epoch_micros.saturating_add(t.as_micros())
    }

    /// The tokio instant `d` from now, for a timer.
    pub fn tokio_after(&self, d: Duration) -> tokio::time::Instant {
        self.to_tokio(self.now() + d)
    }

    /// [`wall_micros`](Clock::wall_micros) of now.
    pub fn wall_now_micros(&self) -> u64 {
        self.wall_micros(self.now())
    }
}

/// Wall-clock microseconds since the Unix epoch, now: for stamps another
/// process compares with its own clock, and for token expiry. Inside a
/// driver prefer [`Clock::wall_micros`], which is monotonic after start.
pub fn wall_micros() -> u64 {
    unix_micros(read_clocks().1)
}

fn unix_micros(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// With [`read_monotonic`], the only functions that read a clock (STYLE.md
/// §8): both clocks, at a start.
#[expect(clippy::disallowed_methods, reason = "driver clock")]
fn read_clocks() -> (tokio::time::Instant, SystemTime) {
    (tokio::time::Instant::now(), SystemTime::now())
}

/// The monotonic clock alone: [`Clock::now`] runs per message in every
/// driver, and the wall clock would double its system-clock reads.
#[expect(clippy::disallowed_methods, reason = "driver clock")]
fn read_monotonic() -> tokio::time::Instant {
    tokio::time::Instant::now()
}

/// Deadlines further away than this are treated as "in a year": tokio's
/// timer cannot represent `Instant::MAX`.
const FAR_FUTURE: Duration = Duration::from_secs(365 * 24 * 3600);

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn follows_tokio_time_and_round_trips() {
        let clock = Clock::start();
        assert_eq!(clock.now(), Instant::ZERO);
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert_eq!(clock.now(), Instant::from_millis(250));
        let t = Instant::from_millis(1234);
        assert_eq!(clock.from_tokio(clock.to_tokio(t)), t);
        assert_eq!(
            clock.wall_micros(Instant::from_millis(2)) - clock.wall_micros(Instant::ZERO),
            2_000
        );
        // "Never" does not overflow tokio's timer.
        let _ = clock.to_tokio(Instant::MAX);
    }
}
