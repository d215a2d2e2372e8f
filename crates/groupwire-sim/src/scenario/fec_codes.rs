//! `fec-codes`: a sliding-window code against a block code at equal
//! overhead and equal span, on the channel family (issue 15, item 5).
//!
//! A block code ([`ReedSolomon`], what the tunnel sends: GENEVA §3.2.2's
//! `k` sources and `m` repairs) can only rebuild a lost packet once enough
//! of its block has arrived, so a rebuilt packet waits for the rest of its
//! block and the repairs sent after it. A sliding-window code
//! ([`groupwire_codec::sliding`], RFC 8681's SWRLC) spreads the same number
//! of repairs through the stream, each over the last `w` sources, so a
//! loss is repaired by the next repair symbol whatever its position
//! (RFC 8681 §1.1). This scenario runs both codes, for real (every symbol
//! encoded and every rebuilt source checked byte for byte), over the same
//! loss processes, and reports what each costs and how long rebuilt
//! packets wait.
//!
//! The path: sources of `packet_size` bytes leave at `packet_rate` per
//! second onto a `link_rate` link (a FIFO: a repair sent right after a
//! source waits for it to be serialized); the loss process decides each
//! packet's fate at its departure time, so a code that sends more packets
//! is exposed to more losses, as on a real link. A source's delay is from
//! its send to its delivery, received or rebuilt; propagation is the same
//! for every code and left out. The last 256 sources (`UNSCORED_TAIL`) are
//! sent but not scored, so neither code is judged on the stream's
//! unprotected end.
//!
//! Codes pair up when they have the same overhead (repairs per source) and
//! the same span (`w = k`): `block:k=20,m=4` beside `sliding:w=20,o=0.2`.
//! The summary counts, per pair, the channels where the sliding code
//! delivers more sources within each delay budget.

use core::fmt;
use core::str::FromStr;
use std::time::Duration;

use groupwire_codec::ReedSolomon;
use groupwire_codec::sliding::{Decoder as SlidingDecoder, DecoderConfig, Encoder};
use groupwire_link::loss::LossModel;
use groupwire_proto::{Bitrate, Instant};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::{Progress, Report, ScenarioError, Table, serde_duration};
use crate::metrics::LatencyStats;
use crate::rng;

/// Sources at the end of a run that are sent but not scored.
const UNSCORED_TAIL: u64 = 256;

/// RFC 8681 §3.6's density threshold for a dense code (every coefficient
/// drawn non-zero with probability 1 - 1/256 · ... ; DT = 15 is "dense").
const DENSE_DT: u8 = 15;

/// One code of the comparison.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum CodeSetting {
    /// Reed-Solomon over blocks of `k` sources, `m` repairs sent after each
    /// block's last source (`block:k=20,m=4`).
    Block {
        /// Sources per block.
        k: usize,
        /// Repairs per block.
        m: usize,
    },
    /// RFC 8681's sliding-window code over the last `w` sources, a repair
    /// whenever the credit of `o` repairs per source reaches one
    /// (`sliding:w=20,o=0.2`: one repair after every fifth source).
    Sliding {
        /// The encoding window, in sources.
        w: usize,
        /// Repairs per source.
        o: f64,
    },
}

impl CodeSetting {
    /// Repair packets per source packet.
    pub fn overhead(&self) -> f64 {
        match *self {
            Self::Block { k, m } => m as f64 / k as f64,
            Self::Sliding { o, .. } => o,
        }
    }

    /// Sources a repair can cover: `k`, or `w`.
    pub fn span(&self) -> usize {
        match *self {
            Self::Block { k, .. } => k,
            Self::Sliding { w, .. } => w,
        }
    }

    fn validate(&self) -> Result<(), String> {
        match *self {
            Self::Block { k, m } if k == 0 || k + m > 255 => {
                Err(format!("{self}: needs 1 <= k and k + m <= 255"))
            }
            Self::Sliding { w, o } if w == 0 || w > 4095 || !(0.0..=8.0).contains(&o) => Err(
                format!("{self}: needs 1 <= w <= 4095 (RFC 8681's NSS) and 0 <= o <= 8"),
            ),
            _ => Ok(()),
        }
    }
}

impl fmt::Display for CodeSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Block { k, m } => write!(f, "block:k={k},m={m}"),
            Self::Sliding { w, o } => write!(f, "sliding:w={w},o={o}"),
        }
    }
}

impl FromStr for CodeSetting {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let usage = || format!("{s:?}: expected block:k=K,m=M or sliding:w=W,o=REPAIRS_PER_SOURCE");
        let (kind, params) = s.trim().split_once(':').ok_or_else(usage)?;
        let mut fields = std::collections::BTreeMap::new();
        for kv in params.split(',') {
            let (k, v) = kv.split_once('=').ok_or_else(usage)?;
            fields.insert(k.trim(), v.trim());
        }
        let int = |name: &str| -> Result<usize, String> {
            fields
                .get(name)
                .ok_or_else(usage)?
                .parse()
                .map_err(|e| format!("{s:?}: {name}: {e}"))
        };
        let code = match kind.trim() {
            "block" if fields.len() == 2 => Self::Block {
                k: int("k")?,
                m: int("m")?,
            },
            "sliding" if fields.len() == 2 => Self::Sliding {
                w: int("w")?,
                o: fields
                    .get("o")
                    .ok_or_else(usage)?
                    .parse()
                    .map_err(|e| format!("{s:?}: o: {e}"))?,
            },
            _ => return Err(usage()),
        };
        code.validate()?;
        Ok(code)
    }
}

impl TryFrom<String> for CodeSetting {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl From<CodeSetting> for String {
    fn from(c: CodeSetting) -> Self {
        c.to_string()
    }
}

/// Parameters of the `fec-codes` scenario.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FecCodes {
    /// Source packets per run.
    pub sources: u64,
    /// Source packets per second.
    pub packet_rate: u64,
    /// Bytes each packet occupies on the link (sources and repairs alike).
    pub packet_size: u32,
    /// The link's rate: a repair sent right after a source waits for it.
    pub link_rate: Bitrate,
    /// Bytes per coded symbol. Only the timing uses `packet_size`; the
    /// codes run on symbols this long (every byte still checked), which
    /// keeps the run fast without changing which packets are rebuilt.
    pub symbol_size: usize,
    /// Runs per cell, seeds `seed .. seed + seeds`.
    pub seeds: u64,
    /// Delay budgets: a source not delivered within one counts as late.
    #[serde(with = "serde_duration::vec")]
    pub budgets: Vec<Duration>,
    /// The channels, in the loss models' text form.
    pub channels: Vec<LossModel>,
    /// The codes.
    pub codes: Vec<CodeSetting>,
}

impl Default for FecCodes {
    fn default() -> Self {
        let code = |s: &str| s.parse().expect("a valid code");
        Self {
            sources: 240_000,
            packet_rate: 2000,
            packet_size: 1000,
            link_rate: Bitrate::bps(100_000_000),
            symbol_size: 32,
            seeds: 2,
            budgets: [10, 30, 100].map(Duration::from_millis).to_vec(),
            channels: LossModel::family(),
            codes: vec![
                code("block:k=10,m=2"),
                code("sliding:w=10,o=0.2"),
                code("block:k=10,m=5"),
                code("sliding:w=10,o=0.5"),
                code("block:k=20,m=4"),
                code("sliding:w=20,o=0.2"),
                code("block:k=20,m=10"),
                code("sliding:w=20,o=0.5"),
                code("block:k=50,m=10"),
                code("sliding:w=50,o=0.2"),
            ],
        }
    }
}

/// What one code did over one run.
#[derive(Debug, Clone, Default)]
struct Outcome {
    scored: u64,
    delivered: u64,
    rebuilt: u64,
    packets: u64,
    /// Delay of every delivered scored source.
    delay: LatencyStats,
    /// Delay of the rebuilt ones only.
    rebuilt_delay: LatencyStats,
    /// Scored sources not delivered within each budget (lost ones too).
    late: Vec<u64>,
}

impl Outcome {
    fn merge(&mut self, o: &Self) {
        self.scored += o.scored;
        self.delivered += o.delivered;
        self.rebuilt += o.rebuilt;
        self.packets += o.packets;
        self.delay.merge(&o.delay);
        self.rebuilt_delay.merge(&o.rebuilt_delay);
        if self.late.is_empty() {
            self.late = vec![0; o.late.len()];
        }
        for (a, b) in self.late.iter_mut().zip(&o.late) {
            *a += b;
        }
    }

    fn residual(&self) -> f64 {
        ratio(self.scored - self.delivered, self.scored)
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

/// The link: FIFO at `link_rate`, the loss process deciding each packet at
/// its departure.
struct Path {
    process: groupwire_link::loss::LossProcess,
    rng: rng::SimRng,
    serialize: Duration,
    free: Instant,
    len: usize,
    packets: u64,
}

impl Path {
    /// Sends a packet ready at `at`; its arrival time if it gets through.
    fn send(&mut self, at: Instant) -> Option<Instant> {
        let depart = at.max(self.free);
        self.free = depart + self.serialize;
        self.packets += 1;
        let fate = self.process.on_packet(depart, self.len, &mut self.rng);
        (!fate.is_loss()).then_some(self.free)
    }
}

/// The bytes of source `i` (what the receiver checks a rebuilt one against).
fn source_bytes(i: u64, len: usize) -> Vec<u8> {
    let seed = i.to_le_bytes();
    (0..len)
        .map(|j| seed[j % 8] ^ (j as u8).wrapping_mul(31))
        .collect()
}

/// Scores source `i`, sent at `sent`, delivered at `at` (`None`: never).
struct Scorer<'a> {
    budgets: &'a [Duration],
    scored_below: u64,
    out: Outcome,
}

impl Scorer<'_> {
    fn score(&mut self, i: u64, sent: Instant, at: Option<Instant>, rebuilt: bool) {
        if i >= self.scored_below {
            return;
        }
        self.out.scored += 1;
        let Some(at) = at else {
            self.out.late.iter_mut().for_each(|l| *l += 1);
            return;
        };
        let d = at.saturating_duration_since(sent);
        self.out.delivered += 1;
        self.out.delay.record(d);
        if rebuilt {
            self.out.rebuilt += 1;
            self.out.rebuilt_delay.record(d);
        }
        for (l, b) in self.out.late.iter_mut().zip(self.budgets) {
            if d > *b {
                *l += 1;
            }
        }
    }
}

impl FecCodes {
    pub(super) fn validate(&self) -> Result<(), ScenarioError> {
        let invalid = |key, why: &str| {
            Err(ScenarioError::Invalid {
                key,
                why: why.into(),
            })
        };
        if !(UNSCORED_TAIL + 1..=100_000_000).contains(&self.sources) {
            return invalid("sources", "must be between 257 and 10^8");
        }
        if !(1..=1_000_000).contains(&self.packet_rate) {
            return invalid("packet_rate", "must be between 1 and 10^6 per second");
        }
        if !(1..=65_535).contains(&self.packet_size) || self.link_rate.as_bps() == 0 {
            return invalid(
                "packet_size",
                "packets of 1..=65535 bytes on a link faster than 0",
            );
        }
        if !(4..=1500).contains(&self.symbol_size) {
            return invalid("symbol_size", "must be between 4 and 1500 bytes");
        }
        if !(1..=100).contains(&self.seeds) {
            return invalid("seeds", "must be between 1 and 100");
        }
        if self.channels.is_empty() || self.codes.is_empty() {
            return invalid("codes", "list at least one channel and one code");
        }
        for c in &self.codes {
            c.validate()
                .map_err(|why| ScenarioError::Invalid { key: "codes", why })?;
        }
        for m in &self.channels {
            m.build()?;
        }
        Ok(())
    }

    /// Runs to do (for progress).
    pub(super) fn total_runs(&self) -> u64 {
        self.seeds * (self.channels.len() * self.codes.len()) as u64
    }

    fn path(&self, seed: u64, channel: usize) -> Result<Path, ScenarioError> {
        let bits = f64::from(self.packet_size) * 8.0;
        Ok(Path {
            process: self.channels[channel].build()?,
            rng: rng::stream(seed, "fec-codes", channel as u64),
            serialize: Duration::from_secs_f64(bits / self.link_rate.as_bps() as f64),
            free: Instant::ZERO,
            len: self.packet_size as usize,
            packets: 0,
        })
    }

    fn send_time(&self, i: u64) -> Instant {
        Instant::from_nanos(i * 1_000_000_000 / self.packet_rate)
    }

    fn scorer(&self) -> Scorer<'_> {
        Scorer {
            budgets: &self.budgets,
            scored_below: self.sources - UNSCORED_TAIL,
            out: Outcome {
                late: vec![0; self.budgets.len()],
                ..Outcome::default()
            },
        }
    }

    /// The block code: each block's sources as they come, its `m` repairs
    /// after its last source; the receiver rebuilds as soon as `k` of the
    /// block's symbols are in (any `k` do: the code is MDS).
    fn run_block(&self, mut path: Path, k: usize, m: usize) -> Outcome {
        let code = ReedSolomon::new(k, m).expect("validated k and m");
        let mut decoder = groupwire_codec::Decoder::new(code.clone());
        let mut score = self.scorer();
        let len = self.symbol_size;
        let mut repairs = vec![vec![0u8; len]; m];
        let mut first = 0u64;
        while first < self.sources {
            let n = (self.sources - first).min(k as u64) as usize;
            let sources: Vec<Vec<u8>> = (0..k as u64)
                .map(|j| source_bytes(first + j, len))
                .collect();
            // (symbol index, arrival) of what got through.
            let mut got: Vec<(usize, Instant)> = Vec::with_capacity(k + m);
            for j in 0..n {
                let sent = self.send_time(first + j as u64);
                if let Some(at) = path.send(sent) {
                    got.push((j, at));
                }
            }
            // A short last block is padded with zeros-by-index sources
            // that are never sent (both ends know them).
            for j in n..k {
                got.push((j, Instant::ZERO));
            }
            code.encode(&sources, &mut repairs)
                .expect("k sources and m repairs of one length");
            let last_sent = self.send_time(first + n as u64 - 1);
            for j in 0..m {
                if let Some(at) = path.send(last_sent) {
                    got.push((k + j, at));
                }
            }
            // In arrival order, the k-th symbol in rebuilds the rest.
            got.sort_by_key(|&(_, at)| at);
            let complete = (got.len() >= k).then(|| got[k - 1].1);
            // Which of the block's sent sources arrived, and when.
            let mut direct = vec![None; n];
            for &(i, at) in &got {
                if i < n {
                    direct[i] = Some(at);
                }
            }
            // One decode rebuilds every lost source from the first k in.
            let mut missing: Vec<(usize, Vec<u8>)> = (0..n)
                .filter(|&j| direct[j].is_none())
                .map(|j| (j, vec![0u8; len]))
                .collect();
            if complete.is_some() && !missing.is_empty() {
                let received: Vec<(usize, &[u8])> = got[..k]
                    .iter()
                    .map(|&(i, _)| {
                        let s: &[u8] = if i < k { &sources[i] } else { &repairs[i - k] };
                        (i, s)
                    })
                    .collect();
                decoder
                    .decode(&received, &mut missing)
                    .expect("k distinct symbols decode");
                for (j, bytes) in &missing {
                    assert_eq!(*bytes, sources[*j], "block code rebuilt the wrong bytes");
                }
            }
            for (j, at) in direct.into_iter().enumerate() {
                let sent = self.send_time(first + j as u64);
                match (at, complete) {
                    (Some(at), _) => score.score(first + j as u64, sent, Some(at), false),
                    (None, Some(at)) => score.score(first + j as u64, sent, Some(at), true),
                    (None, None) => score.score(first + j as u64, sent, None, false),
                }
            }
            first += n as u64;
        }
        score.out.packets = path.packets;
        score.out
    }

    /// The sliding-window code: each source into the encoding window, a
    /// repair over the window whenever the credit reaches one; the
    /// receiver's on-the-fly decoder hands out a source the moment the
    /// symbols in determine it.
    fn run_sliding(&self, mut path: Path, w: usize, o: f64) -> Outcome {
        let len = self.symbol_size;
        let mut enc = Encoder::new(len, w).expect("validated window");
        let mut cfg = DecoderConfig::new(len);
        // The decoder tracks four windows' worth, so a source is given up
        // only once no repair in flight can reach it.
        cfg.max_window = (4 * w).clamp(DecoderConfig::DEFAULT_MAX_WINDOW, 4095);
        let mut dec = SlidingDecoder::new(cfg).expect("valid decoder");
        let mut score = self.scorer();
        let mut delivered = vec![false; self.sources as usize];
        let mut credit = 0.0;
        let mut key = 0u16;
        let adu_len = len - 3; // the ADUI's flow ID and length
        // Hands out what the decoder rebuilt, each source once.
        let drain = |dec: &mut SlidingDecoder,
                     delivered: &mut [bool],
                     score: &mut Scorer<'_>,
                     at: Instant| {
            while let Some(r) = dec.poll_recovered() {
                let j = u64::from(r.esi);
                assert_eq!(
                    r.adu,
                    source_bytes(j, adu_len),
                    "sliding code rebuilt the wrong bytes"
                );
                if !delivered[j as usize] {
                    delivered[j as usize] = true;
                    score.score(j, self.send_time(j), Some(at), true);
                }
            }
        };
        for i in 0..self.sources {
            let sent = self.send_time(i);
            let adu = source_bytes(i, adu_len);
            let esi = enc.push_adu(0, &adu).expect("ADU fits the symbol");
            if let Some(at) = path.send(sent) {
                if !delivered[i as usize] {
                    delivered[i as usize] = true;
                    score.score(i, sent, Some(at), false);
                }
                let _ = dec.receive_source_adu(esi, 0, &adu);
                drain(&mut dec, &mut delivered, &mut score, at);
            }
            credit += o;
            while credit >= 1.0 {
                credit -= 1.0;
                let (id, symbol) = enc.repair(key, DENSE_DT).expect("a window to code");
                key = key.wrapping_add(1);
                if let Some(at) = path.send(sent) {
                    let _ = dec.receive_repair(id, &symbol);
                    drain(&mut dec, &mut delivered, &mut score, at);
                }
            }
        }
        for (j, d) in delivered.iter().enumerate() {
            if !d {
                score.score(j as u64, self.send_time(j as u64), None, false);
            }
        }
        score.out.packets = path.packets;
        score.out
    }

    pub(super) fn run(&self, seed: u64, progress: Progress<'_>) -> Result<Report, ScenarioError> {
        let mut rows = Vec::new();
        // outcomes[channel][code]
        let mut outcomes = Vec::new();
        let mut done = 0u64;
        for (c, channel) in self.channels.iter().enumerate() {
            let mut per_code = Vec::new();
            for code in &self.codes {
                let mut total = Outcome::default();
                for s in seed..seed + self.seeds {
                    let path = self.path(s, c)?;
                    let o = match *code {
                        CodeSetting::Block { k, m } => self.run_block(path, k, m),
                        CodeSetting::Sliding { w, o } => self.run_sliding(path, w, o),
                    };
                    total.merge(&o);
                    done += 1;
                    progress(Instant::from_nanos(done));
                }
                let d = total.delay.summary();
                let r = total.rebuilt_delay.summary();
                let mut row = vec![
                    json!(channel.to_string()),
                    json!(code.to_string()),
                    json!(ratio(total.packets, total.scored + UNSCORED_TAIL * self.seeds) - 1.0),
                    json!(total.residual()),
                    json!(total.rebuilt),
                    json!(r.mean_ms),
                    json!(r.p99_ms),
                    json!(r.max_ms),
                    json!(d.p99_ms),
                ];
                row.extend(total.late.iter().map(|&l| json!(ratio(l, total.scored))));
                rows.push(row);
                per_code.push(total);
            }
            outcomes.push(per_code);
        }
        let mut columns: Vec<String> = [
            "channel",
            "code",
            "overhead",
            "residual",
            "rebuilt",
            "rebuilt_mean_ms",
            "rebuilt_p99_ms",
            "rebuilt_max_ms",
            "p99_ms",
        ]
        .map(String::from)
        .to_vec();
        columns.extend(
            self.budgets
                .iter()
                .map(|b| format!("late_{}ms", b.as_millis())),
        );
        let mut tables = vec![Table {
            file: "codes".into(),
            columns,
            rows,
        }];
        let (pairs, wins) = self.pairs(&outcomes);
        tables.push(pairs);
        tables.push(wins);
        let mut summary = serde_json::Map::new();
        summary.insert("sources_per_run".into(), json!(self.sources));
        summary.insert("seeds".into(), json!(self.seeds));
        summary.insert("channels".into(), json!(self.channels.len()));
        summary.insert("codes".into(), json!(self.codes.len()));
        Ok(Report {
            scenario: "fec-codes".into(),
            seed,
            summary,
            tables,
            plots: Vec::new(),
        })
    }

    /// Block and sliding codes of equal overhead and span, side by side
    /// per channel, and per budget the channels each code wins.
    fn pairs(&self, outcomes: &[Vec<Outcome>]) -> (Table, Table) {
        let mut rows = Vec::new();
        let mut wins = Vec::new();
        for (b, block) in self.codes.iter().enumerate() {
            let CodeSetting::Block { .. } = block else {
                continue;
            };
            let Some(s) = self.codes.iter().position(|c| {
                matches!(c, CodeSetting::Sliding { .. })
                    && c.span() == block.span()
                    && (c.overhead() - block.overhead()).abs() < 1e-9
            }) else {
                continue;
            };
            let pair = format!("{block} vs {}", self.codes[s]);
            // Per budget: channels where the sliding code, the block code,
            // or neither leaves fewer sources late.
            let mut tally = vec![[0u64; 3]; self.budgets.len()];
            for (c, channel) in self.channels.iter().enumerate() {
                let (ob, os) = (&outcomes[c][b], &outcomes[c][s]);
                let mut row = vec![
                    json!(channel.to_string()),
                    json!(pair),
                    json!(ob.residual()),
                    json!(os.residual()),
                    json!(ob.rebuilt_delay.summary().p99_ms),
                    json!(os.rebuilt_delay.summary().p99_ms),
                ];
                for (i, (lb, ls)) in ob.late.iter().zip(&os.late).enumerate() {
                    row.push(json!(ratio(*lb, ob.scored)));
                    row.push(json!(ratio(*ls, os.scored)));
                    // Both score the same sources, so counts compare.
                    let who = match ls.cmp(lb) {
                        core::cmp::Ordering::Less => 0,
                        core::cmp::Ordering::Greater => 1,
                        core::cmp::Ordering::Equal => 2,
                    };
                    tally[i][who] += 1;
                }
                rows.push(row);
            }
            for (budget, [sliding, blocks, tie]) in self.budgets.iter().zip(tally) {
                wins.push(vec![
                    json!(pair),
                    json!(format!("{}ms", budget.as_millis())),
                    json!(sliding),
                    json!(blocks),
                    json!(tie),
                ]);
            }
        }
        let mut columns: Vec<String> = [
            "channel",
            "pair",
            "block_residual",
            "sliding_residual",
            "block_rebuilt_p99_ms",
            "sliding_rebuilt_p99_ms",
        ]
        .map(String::from)
        .to_vec();
        for b in &self.budgets {
            let ms = b.as_millis();
            columns.push(format!("block_late_{ms}ms"));
            columns.push(format!("sliding_late_{ms}ms"));
        }
        let wins = Table {
            file: "wins".into(),
            columns: [
                "pair",
                "budget",
                "sliding_fewer_late",
                "block_fewer_late",
                "same",
            ]
            .map(String::from)
            .to_vec(),
            rows: wins,
        };
        (
            Table {
                file: "pairs".into(),
                columns,
                rows,
            },
            wins,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small(channel: &str, codes: &[&str]) -> FecCodes {
        FecCodes {
            sources: 20_000,
            seeds: 1,
            channels: vec![channel.parse().unwrap()],
            codes: codes.iter().map(|c| c.parse().unwrap()).collect(),
            ..FecCodes::default()
        }
    }

    fn run(s: &FecCodes, seed: u64) -> Report {
        s.validate().unwrap();
        s.run(seed, &mut |_| {}).unwrap()
    }

    fn col(r: &Report, table: usize, name: &str, row: usize) -> f64 {
        let t = &r.tables[table];
        let i = t.columns.iter().position(|c| c == name).unwrap();
        t.rows[row][i].as_f64().unwrap()
    }

    #[test]
    fn codes_parse_print_and_refuse_nonsense() {
        for s in ["block:k=20,m=4", "sliding:w=20,o=0.2"] {
            assert_eq!(s.parse::<CodeSetting>().unwrap().to_string(), s);
        }
        for bad in [
            "block:k=0,m=1",
            "block:k=250,m=10",
            "sliding:w=0,o=1",
            "sliding:w=5",
            "rs:k=1",
        ] {
            assert!(bad.parse::<CodeSetting>().is_err(), "{bad}");
        }
        assert!((CodeSetting::Block { k: 20, m: 4 }.overhead() - 0.2).abs() < 1e-12);
    }

    #[test]
    fn a_clean_channel_delivers_everything_at_once() {
        let r = run(&small("none", &["block:k=20,m=4", "sliding:w=20,o=0.2"]), 1);
        for row in 0..2 {
            assert_eq!(col(&r, 0, "residual", row), 0.0);
            assert_eq!(col(&r, 0, "rebuilt", row), 0.0);
            assert!((col(&r, 0, "overhead", row) - 0.2).abs() < 1e-3);
        }
    }

    #[test]
    fn both_codes_repair_random_loss_and_the_sliding_one_sooner() {
        let r = run(
            &small("bernoulli:0.02", &["block:k=20,m=4", "sliding:w=20,o=0.2"]),
            3,
        );
        // Without repair 2% would be lost; both codes leave far less.
        for row in 0..2 {
            assert!(col(&r, 0, "residual", row) < 0.002, "row {row}");
            assert!(col(&r, 0, "rebuilt", row) > 200.0, "row {row}");
        }
        // A block's loss waits for the rest of its block (10 sources on
        // average, 5 ms at 2000/s); the sliding code's for the next repair
        // (one every 5 sources).
        let (block, sliding) = (
            col(&r, 0, "rebuilt_mean_ms", 0),
            col(&r, 0, "rebuilt_mean_ms", 1),
        );
        assert!(
            sliding < 0.7 * block,
            "sliding {sliding} ms, block {block} ms"
        );
    }

    #[test]
    fn a_burst_longer_than_the_repairs_is_lost_by_the_block_code() {
        // Runs of 8 against 4 repairs per 20: the block code cannot
        // rebuild a block that loses a whole run, so much is left.
        let r = run(&small("burst:start=0.01,len=8..8", &["block:k=20,m=4"]), 1);
        assert!(col(&r, 0, "residual", 0) > 0.01);
    }

    #[test]
    fn the_same_seed_gives_the_same_report() {
        let s = small(
            "gilbert:p=0.027778,r=0.25",
            &["block:k=10,m=2", "sliding:w=10,o=0.2"],
        );
        let text = |seed| format!("{:?}", run(&s, seed).tables);
        assert_eq!(text(7), text(7));
        assert_ne!(text(7), text(8));
    }
}
