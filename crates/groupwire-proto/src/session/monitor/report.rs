//! The receiver's report to the sender ([`MonitorReport`]).
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |  version = 1  |     flags     |     length (bytes, >= 92)     |  0
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                    report sequence number                     |  4
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |        highest extended packet seq received (64 bits)         |  8
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |           packets received, cumulative (64 bits)              | 16
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |             packets lost, cumulative (64 bits)                | 24
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |           loss runs begun, cumulative (64 bits)               | 32
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |            runs of length 1, cumulative (saturating)          | 40
//! |            runs of length 2                                   | 44
//! |            runs of length 3-4                                 | 48
//! |            runs of length 5-8                                 | 52
//! |            runs of length 9-16                                | 56
//! |            runs of length 17 or more                          | 60
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |         RFC 3550 interarrival jitter (microseconds)           | 64
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |     Leigh et al. Fig. 4 jitter (microseconds, flag bit 0)     | 68
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |          bytes received in the interval (64 bits)             | 72
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |               the interval (microseconds)                     | 80
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |       echo: send timestamp of the latest packet received      | 84
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |       echo: microseconds since that packet arrived            | 88
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |   dispersion rate (bytes per second, 64 bits; flag bit 1)     | 92
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! | fields of a later minor version (length - 100 bytes, skipped) |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! All fields big-endian. `flags` bit 0 ([`FLAG_LEIGH`]): the Leigh jitter
//! field holds a value (some run of 20 packets finished in the interval);
//! bit 1 ([`FLAG_DISPERSION`]): the dispersion rate holds a value; other
//! bits are reserved: zero on encode, ignored on decode. The dispersion
//! rate (minor version 1, [`REPORT_LEN_DISPERSION`] bytes; a report of
//! [`REPORT_LEN`] bytes has none) is the receiver's packet-pair estimate
//! of the bottleneck's rate ([`ReceiveMonitor`](super::ReceiveMonitor)).
//! `length`
//! is the whole report's size: at least [`REPORT_LEN`], at most
//! [`MAX_REPORT_LEN`], and exactly the datagram's (a report is its own
//! message inside the session's framing); bytes past the fields of this
//! version are skipped, so a later minor version can append fields
//! without a new version byte.
//!
//! The counters are cumulative since the receiver's first packet, so a lost
//! report loses nothing but its own jitter, rate and echo: the next one's
//! differences cover both intervals. `lost` is RFC 3550 §6.4.1's
//! "cumulative number of packets lost" (expected less received), so it
//! falls when a late packet fills a gap. The histogram uses the block-FEC
//! report's buckets ([`LossRuns::bucket`]); it is cumulative here, 32 bits
//! per bucket, where the block report's is per interval in 16 bits. The
//! echo is RFC 3550's LSR/DLSR (§6.4.1) for this session's own send
//! timestamps: the sender's round trip is its clock now, less the echoed
//! timestamp, less the hold time.
//!
//! Decoding never panics and never allocates; it rejects unknown versions,
//! any length that does not match, and counters that contradict each other
//! (more runs than losses, more packets than sequence numbers, a histogram
//! counting more runs than began).

use crate::wire::block::{LossRuns, RUN_BUCKETS};

/// The report format's version byte.
pub const VERSION: u8 = 1;
/// Bytes of a version-1 report.
pub const REPORT_LEN: usize = 92;
/// Longest report accepted (a later minor version's fields included).
pub const MAX_REPORT_LEN: usize = 512;
/// `flags` bit: the Leigh (Fig. 4) jitter field holds a value.
pub const FLAG_LEIGH: u8 = 0x01;
/// `flags` bit: the dispersion rate field holds a value.
pub const FLAG_DISPERSION: u8 = 0x02;
/// Bytes of a report with the dispersion rate (what [`MonitorReport::encode`]
/// writes).
pub const REPORT_LEN_DISPERSION: usize = 100;

mod field {
    use core::ops::Range;
    pub(super) const VERSION: usize = 0;
    pub(super) const FLAGS: usize = 1;
    pub(super) const LENGTH: Range<usize> = 2..4;
    pub(super) const REPORT_SEQ: Range<usize> = 4..8;
    pub(super) const HIGHEST: Range<usize> = 8..16;
    pub(super) const RECEIVED: Range<usize> = 16..24;
    pub(super) const LOST: Range<usize> = 24..32;
    pub(super) const RUNS: Range<usize> = 32..40;
    pub(super) const HISTOGRAM: usize = 40;
    pub(super) const JITTER: Range<usize> = 64..68;
    pub(super) const LEIGH: Range<usize> = 68..72;
    pub(super) const BYTES: Range<usize> = 72..80;
    pub(super) const INTERVAL: Range<usize> = 80..84;
    pub(super) const ECHO_TS: Range<usize> = 84..88;
    pub(super) const ECHO_HOLD: Range<usize> = 88..92;
    pub(super) const DISPERSION: Range<usize> = 92..100;
}

/// Why a report could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReportError {
    /// The input is shorter than its header or its `length` says.
    #[error("truncated: needed {needed} bytes, got {got}")]
    Truncated {
        /// Bytes needed.
        needed: usize,
        /// Bytes present.
        got: usize,
    },
    /// A version this build does not speak.
    #[error("unsupported report version {0}")]
    UnsupportedVersion(u8),
    /// `length` below a version-1 report's or above [`MAX_REPORT_LEN`],
    /// or the input longer than `length`.
    #[error("bad length {length} for {got} bytes")]
    Length {
        /// The `length` field.
        length: usize,
        /// Bytes present.
        got: usize,
    },
    /// Counters that contradict each other.
    #[error("inconsistent report: {0}")]
    Inconsistent(&'static str),
}

/// What the receiver tells the sender about the packets it got (see the
/// [module docs](self) for the bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MonitorReport {
    /// One more per report (wrapping): a reordered, older report is stale.
    pub report_seq: u32,
    /// Highest packet sequence number received, extended to 64 bits
    /// (RFC 3550 A.1's cycles and sequence number).
    pub highest_seq: u64,
    /// Distinct packets received since the first.
    pub received: u64,
    /// Packets expected (from the first received to `highest_seq`) and not
    /// received: RFC 3550's cumulative lost.
    pub lost: u64,
    /// Runs of consecutive losses begun (closed by the packet after them
    /// and past the reorder tolerance).
    pub runs: u64,
    /// Those runs by length, in [`LossRuns::bucket`]'s buckets (1, 2, 3–4,
    /// 5–8, 9–16, 17 or more), saturating.
    pub histogram: [u32; RUN_BUCKETS],
    /// RFC 3550 §6.4.1 interarrival jitter, microseconds.
    pub jitter_us: u32,
    /// Leigh et al.'s jitter (Fig. 4: mean deviation from each run of 20
    /// packets' mean transit), over the runs finished in the interval, in
    /// microseconds; `None` if none finished.
    pub jitter_leigh_us: Option<u32>,
    /// Bytes received in the interval (every datagram, duplicates and late
    /// ones too).
    pub interval_bytes: u64,
    /// The interval, microseconds: since the previous report, or since the
    /// first packet after a report that had none.
    pub interval_us: u32,
    /// Send timestamp (`ts`) of the packet that arrived last.
    pub echo_ts: u32,
    /// Microseconds between that packet's arrival and this report.
    pub echo_hold_us: u32,
    /// The bottleneck's rate as the packets' dispersion measured it, bytes
    /// per second (of the datagrams' bytes as the receiver counts them);
    /// `None` if the interval had too few spaced pairs.
    pub dispersion_bps: Option<u64>,
}

impl MonitorReport {
    /// Appends the report's [`REPORT_LEN_DISPERSION`] bytes to `buf`.
    pub fn encode(&self, buf: &mut Vec<u8>) {
        let start = buf.len();
        buf.resize(start + REPORT_LEN_DISPERSION, 0);
        let b = &mut buf[start..];
        b[field::VERSION] = VERSION;
        let flag = |on: bool, bit: u8| if on { bit } else { 0 };
        b[field::FLAGS] = flag(self.jitter_leigh_us.is_some(), FLAG_LEIGH)
            | flag(self.dispersion_bps.is_some(), FLAG_DISPERSION);
        b[field::LENGTH].copy_from_slice(&(REPORT_LEN_DISPERSION as u16).to_be_bytes());
        b[field::REPORT_SEQ].copy_from_slice(&self.report_seq.to_be_bytes());
        b[field::HIGHEST].copy_from_slice(&self.highest_seq.to_be_bytes());
        b[field::RECEIVED].copy_from_slice(&self.received.to_be_bytes());
        b[field::LOST].copy_from_slice(&self.lost.to_be_bytes());
        b[field::RUNS].copy_from_slice(&self.runs.to_be_bytes());
        for (i, n) in self.histogram.iter().enumerate() {
            let at = field::HISTOGRAM + 4 * i;
            b[at..at + 4].copy_from_slice(&n.to_be_bytes());
        }
        b[field::JITTER].copy_from_slice(&self.jitter_us.to_be_bytes());
        b[field::LEIGH].copy_from_slice(&self.jitter_leigh_us.unwrap_or(0).to_be_bytes());
        b[field::BYTES].copy_from_slice(&self.interval_bytes.to_be_bytes());
        b[field::INTERVAL].copy_from_slice(&self.interval_us.to_be_bytes());
        b[field::ECHO_TS].copy_from_slice(&self.echo_ts.to_be_bytes());
        b[field::ECHO_HOLD].copy_from_slice(&self.echo_hold_us.to_be_bytes());
        b[field::DISPERSION].copy_from_slice(&self.dispersion_bps.unwrap_or(0).to_be_bytes());
    }

    /// The report in `buf` (the whole input). Never panics; see the
    /// [module docs](self) for what it rejects.
    pub fn decode(buf: &[u8]) -> Result<Self, ReportError> {
        let head = buf.get(..4).ok_or(ReportError::Truncated {
            needed: 4,
            got: buf.len(),
        })?;
        if head[field::VERSION] != VERSION {
            return Err(ReportError::UnsupportedVersion(head[field::VERSION]));
        }
        let length = usize::from(u16::from_be_bytes([head[2], head[3]]));
        if !(REPORT_LEN..=MAX_REPORT_LEN).contains(&length) || buf.len() > length {
            return Err(ReportError::Length {
                length,
                got: buf.len(),
            });
        }
        if buf.len() < length {
            return Err(ReportError::Truncated {
                needed: length,
                got: buf.len(),
            });
        }
        let dispersion = (length >= REPORT_LEN_DISPERSION
            && buf[field::FLAGS] & FLAG_DISPERSION != 0)
            .then(|| crate::wire::be64(&buf[field::DISPERSION]));
        let b = &buf[..REPORT_LEN];
        let u32_at = |r: core::ops::Range<usize>| crate::wire::be32(&b[r]);
        let u64_at = |r: core::ops::Range<usize>| crate::wire::be64(&b[r]);
        let mut histogram = [0u32; RUN_BUCKETS];
        for (i, n) in histogram.iter_mut().enumerate() {
            let at = field::HISTOGRAM + 4 * i;
            *n = u32_at(at..at + 4);
        }
        let r = Self {
            report_seq: u32_at(field::REPORT_SEQ),
            highest_seq: u64_at(field::HIGHEST),
            received: u64_at(field::RECEIVED),
            lost: u64_at(field::LOST),
            runs: u64_at(field::RUNS),
            histogram,
            jitter_us: u32_at(field::JITTER),
            jitter_leigh_us: (b[field::FLAGS] & FLAG_LEIGH != 0).then(|| u32_at(field::LEIGH)),
            interval_bytes: u64_at(field::BYTES),
            interval_us: u32_at(field::INTERVAL),
            echo_ts: u32_at(field::ECHO_TS),
            echo_hold_us: u32_at(field::ECHO_HOLD),
            dispersion_bps: dispersion,
        };
        r.check()?;
        Ok(r)
    }

    /// The counters agree with each other.
    fn check(&self) -> Result<(), ReportError> {
        if self.received == 0 {
            return Err(ReportError::Inconsistent("a report before any packet"));
        }
        if self.runs > self.lost {
            return Err(ReportError::Inconsistent("more loss runs than losses"));
        }
        let sequence_numbers = self.highest_seq.checked_add(1);
        if self
            .received
            .checked_add(self.lost)
            .is_none_or(|n| sequence_numbers.is_some_and(|s| n > s))
        {
            return Err(ReportError::Inconsistent(
                "more packets than sequence numbers",
            ));
        }
        let counted: u64 = self.histogram.iter().map(|&n| u64::from(n)).sum();
        if counted > self.runs {
            return Err(ReportError::Inconsistent(
                "histogram counts more runs than began",
            ));
        }
        Ok(())
    }

    /// The runs of this report less those of `earlier` (a report of the
    /// same receiver), as the block-FEC report's per-interval
    /// [`LossRuns`] (saturating at its field widths).
    pub fn runs_since(&self, earlier: &Self) -> LossRuns {
        let mut histogram = [0u16; RUN_BUCKETS];
        for (h, (now, then)) in histogram
            .iter_mut()
            .zip(self.histogram.iter().zip(&earlier.histogram))
        {
            *h = u16::try_from(now.saturating_sub(*then)).unwrap_or(u16::MAX);
        }
        LossRuns {
            runs: u32::try_from(self.runs.saturating_sub(earlier.runs)).unwrap_or(u32::MAX),
            histogram,
        }
    }
}
