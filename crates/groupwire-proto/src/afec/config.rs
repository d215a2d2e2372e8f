//! AFEC configuration: per-type QoS, redundancy mode, and the knobs of the
//! sender, receiver and control loop, with the paper's defaults.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::units::Bitrate;
use crate::wire::afec::MsgType;

/// How much redundancy the sender adds.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum Mode {
    /// Plain UDP: every message in one packet only (code set size 1).
    Plain,
    /// Non-adaptive FEC-n: every message in `n` packets, always (the paper's
    /// "FEC-n"). `n` may be fractional.
    Static(f64),
    /// Adaptive FEC: the receiver keeps each type's MER inside its band by
    /// asking for more (NAK) or less (INC) redundancy.
    Adaptive,
}

/// How the adaptive controller moves the code set size.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum Step {
    /// Whole steps of one, as in the paper (Fig. 9's up-and-down).
    Integer,
    /// Fractional steps of this size (the paper's future work, "AFEC
    /// improvements": "fractional values for code set size that can be more
    /// finely tuned").
    Fractional(f64),
    /// Beyond the paper: the receiver replays the packet-loss pattern it
    /// observed over the last [`AfecConfig::packet_window`] packets against
    /// every candidate code set size and asks for the smallest (fractional)
    /// size whose predicted MER is the middle of the band. It moves in one
    /// request instead of a step per gate, and only when the prediction for
    /// the size in force leaves the band.
    Predictive,
    /// Beyond the paper: [`Step::Predictive`] made to hold any band on any
    /// channel (see the `robust` module's docs in the source): loss runs
    /// weighted toward recent packets and shrunk toward a fitted Gilbert
    /// model, a change test (CUSUM on how runs start and go on) that
    /// forgets the old channel at once, and a goal corrected by the
    /// window's MER but bounded, so the size never goes above what the
    /// measured loss process needs for half the band's floor.
    Robust,
}

/// How an endpoint puts AFEC on the wire. Receiving, an endpoint reads
/// both whatever this says (RTP and native datagrams differ in their first
/// byte); this picks what it sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Framing {
    /// groupwire's compact format ([`wire::afec`](crate::wire::afec)): per-type
    /// message indices, per-type MER, a session id. The default.
    #[default]
    Native,
    /// RTP with the RFC 2198 redundancy payload ([`wire::red`](crate::wire::red)),
    /// feedback in RTCP APP packets, so stock RTP tools (GStreamer's
    /// `rtpreddec`) recover the messages. What it cannot carry is listed
    /// in [`wire::afec`](crate::wire::afec#rtpred-framing-the-standard-alternative).
    Red,
}

/// RTP/RED parameters. Both ends must agree on them, as an SDP offer and
/// answer would make them (`a=rtpmap:100 red/1000`, `a=rtpmap:101 ...`).
#[derive(Clone, Debug, PartialEq)]
pub struct RedConfig {
    /// RTP payload type of RED packets. Default 100 (dynamic range).
    pub payload_type: u8,
    /// RTP timestamp rate, Hz. Default 1000: a millisecond, the native
    /// format's `age` unit, and the 14-bit timestamp offset then reaches
    /// 16.4 s, more than AFEC's redundancy ever spans. A message's RTP
    /// timestamp is when the application sampled it (see
    /// [`send_sampled`](super::AfecEndpoint::send_sampled)), in these ticks
    /// since the driver's epoch. Stock decoders that place recovered blocks
    /// by interpolating timestamps (GStreamer's `rtpreddec`) need messages
    /// sampled a whole number of ticks apart at a steady rate: pick the
    /// rate to suit (90000 for 30 Hz, at 182 ms of reach).
    pub clock_rate: u32,
    /// Each message type's payload type (its RED block PT). A type without
    /// one cannot be sent in RED framing; a block whose PT is not here is
    /// skipped on receipt. Default: telepointer (`TP`) → 101.
    pub types: BTreeMap<MsgType, u8>,
}

impl Default for RedConfig {
    fn default() -> Self {
        Self {
            payload_type: 100,
            clock_rate: 1000,
            types: BTreeMap::from([(MsgType::new(*b"TP"), 101)]),
        }
    }
}

impl RedConfig {
    /// Sets the RED payload type.
    pub fn payload_type(mut self, pt: u8) -> Self {
        self.payload_type = pt;
        self
    }
    /// Sets the RTP clock rate in Hz.
    pub fn clock_rate(mut self, hz: u32) -> Self {
        self.clock_rate = hz;
        self
    }
    /// Maps message type `t` to block payload type `pt` (replacing any
    /// earlier mapping of `t`).
    pub fn map(mut self, t: MsgType, pt: u8) -> Self {
        self.types.insert(t, pt);
        self
    }
    /// The payload type of message type `t`.
    pub fn pt_of(&self, t: MsgType) -> Option<u8> {
        self.types.get(&t).copied()
    }
    /// The message type of block payload type `pt`.
    pub fn type_of(&self, pt: u8) -> Option<MsgType> {
        self.types.iter().find(|&(_, &p)| p == pt).map(|(&t, _)| t)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let bad = |why| Err(ConfigError { field: "red", why });
        // RFC 5761 §4: RTCP shares the port, so RTP payload types 64-95
        // (second bytes 192-223 with the marker set) would read as RTCP.
        let usable = |pt: u8| pt <= 127 && !(64..=95).contains(&pt);
        if !usable(self.payload_type) {
            return bad("payload types must be 0-63 or 96-127 (64-95 collide with RTCP)");
        }
        if self.clock_rate == 0 {
            return bad("the RTP clock rate must be positive");
        }
        for (i, (&t, &pt)) in self.types.iter().enumerate() {
            if !usable(pt) {
                return bad("payload types must be 0-63 or 96-127 (64-95 collide with RTCP)");
            }
            if pt == self.payload_type {
                return bad("a message type cannot use the RED payload type");
            }
            if t == MsgType::ANY {
                return bad("the wildcard type ** cannot be sent");
            }
            if self.types.values().skip(i + 1).any(|&p| p == pt) {
                return bad("two message types share a payload type");
            }
        }
        Ok(())
    }
}

/// What one message type needs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TypeQos {
    /// Lower end of the MER band: below it, redundancy is lowered (INC).
    pub mer_min: f64,
    /// Upper end of the MER band: above it, redundancy is raised (NAK).
    pub mer_max: f64,
    /// Code set size at start (both ends assume it until told otherwise).
    pub initial_size: f64,
    /// How long a message is worth anything (TAPS's per-message lifetime,
    /// RFC 9622 §9.1.3.1): the sender sends no copy of it once it is older,
    /// and the receiver neither delivers nor counts as delivered (in the
    /// MER) a copy that arrives older, as far as it can tell (see
    /// [`AfecStats::expired`](super::AfecStats::expired)). `None`: forever,
    /// as in the paper, whose copies wait for bandwidth however long.
    pub lifetime: Option<Duration>,
}

/// [`TypeQos::lifetime`] by default: 400 ms, the most one-way delay ITU-T
/// G.114 (05/2003, §2) accepts for general network planning; an awareness
/// update older than that misleads more than it informs. The paper sets no
/// lifetime, so this is our choice.
pub const DEFAULT_LIFETIME: Duration = Duration::from_millis(400);

impl TypeQos {
    /// The paper's telepointer requirement: MER between 5% and 6%
    /// (§"Experiments"), with the [`DEFAULT_LIFETIME`].
    pub const fn telepointer() -> Self {
        Self {
            mer_min: 0.05,
            mer_max: 0.06,
            initial_size: 1.0,
            lifetime: Some(DEFAULT_LIFETIME),
        }
    }
}

impl Default for TypeQos {
    fn default() -> Self {
        Self::telepointer()
    }
}

/// Configuration of an [`AfecEndpoint`](super::AfecEndpoint). Chained setters.
#[derive(Clone, Debug, PartialEq)]
pub struct AfecConfig {
    /// This endpoint's user id (the packets' "sender id").
    pub user: u32,
    /// Session id in the common header; packets of another session are dropped.
    pub session: u32,
    /// Redundancy mode.
    pub mode: Mode,
    /// Controller step in adaptive mode.
    pub step: Step,
    /// Per-type requirements; types not listed use `default_qos`.
    pub qos: BTreeMap<MsgType, TypeQos>,
    /// Requirement of unlisted types.
    pub default_qos: TypeQos,
    /// Largest UDP payload (path MTU less IP and UDP headers). Default 1200.
    pub mtu: usize,
    /// Upper bound on the sending rate toward each peer, if known (set it
    /// below the link capacity: a queue served at exactly its arrival rate
    /// grows without bound). Redundant copies that would exceed it are left out and
    /// reported as "cannot meet", so latency does not run away in a narrow
    /// channel (the paper's §"Performance and characteristics of AFEC"
    /// failure case). `None`: only the MTU limits redundancy.
    pub max_bitrate: Option<Bitrate>,
    /// Largest code set size the controller will ask for.
    pub max_size: f64,
    /// Messages per (sender, type) over which the MER is measured (paper: 1000).
    pub mer_window: usize,
    /// Fewest messages in the window before the controller acts.
    pub min_window: usize,
    /// New messages of a type needed since the last adjustment before the
    /// next one (the paper's activity gating). The paper gives no number;
    /// 200 is about the spacing of the changes in its Fig. 9 (four changes
    /// in 1000 packets). [`Step::Robust`] uses neither this nor
    /// `min_window`: it predicts from the loss runs, not from the MER, and
    /// asks again after 10 messages (see `afec/robust.rs`).
    pub gate_messages: u32,
    /// Period of the MER check (the paper's "timed FEC control thread").
    pub check_interval: Duration,
    /// Packets per remote sender whose loss pattern the predictive
    /// controllers replay ([`Step::Predictive`], [`Step::Robust`]).
    pub packet_window: usize,
    /// Silence after the last message that ends a cluster and starts the flush.
    pub flush_after: Duration,
    /// Spacing of flush packets.
    pub flush_interval: Duration,
    /// Retransmission interval of unacknowledged control entries.
    pub control_retry: Duration,
    /// Most messages kept per peer for redundancy (bounds memory).
    pub history_limit: usize,
    /// Most remote senders tracked (bounds memory against strangers).
    pub max_remote_senders: usize,
    /// Most message types tracked per remote sender.
    pub max_types_per_sender: usize,
    /// What this endpoint sends: the native format (default) or RTP/RED.
    pub framing: Framing,
    /// RTP/RED parameters (used to send in [`Framing::Red`], and to read
    /// RTP/RED whatever `framing` says).
    pub red: RedConfig,
}

impl Default for AfecConfig {
    fn default() -> Self {
        Self {
            user: 1,
            session: 0,
            mode: Mode::Adaptive,
            step: Step::Integer,
            qos: BTreeMap::new(),
            default_qos: TypeQos::telepointer(),
            mtu: 1200,
            max_bitrate: None,
            max_size: 16.0,
            mer_window: 1000,
            min_window: 100,
            gate_messages: 200,
            check_interval: Duration::from_millis(100),
            packet_window: 4000,
            flush_after: Duration::from_millis(100),
            flush_interval: Duration::from_millis(33),
            control_retry: Duration::from_millis(250),
            history_limit: 1024,
            max_remote_senders: 256,
            max_types_per_sender: 16,
            framing: Framing::Native,
            red: RedConfig::default(),
        }
    }
}

impl AfecConfig {
    /// Defaults for user `user`.
    pub fn new(user: u32) -> Self {
        Self {
            user,
            ..Self::default()
        }
    }
    /// Sets the redundancy mode.
    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }
    /// Sets the controller step.
    pub fn step(mut self, step: Step) -> Self {
        self.step = step;
        self
    }
    /// Sets the requirement of one message type.
    pub fn qos(mut self, t: MsgType, q: TypeQos) -> Self {
        self.qos.insert(t, q);
        self
    }
    /// Sets the requirement of types not listed with [`qos`](Self::qos).
    pub fn default_qos(mut self, q: TypeQos) -> Self {
        self.default_qos = q;
        self
    }
    /// Sets the path MTU (UDP payload bytes).
    pub fn mtu(mut self, mtu: usize) -> Self {
        self.mtu = mtu;
        self
    }
    /// Sets the rate cap toward each peer.
    pub fn max_bitrate(mut self, r: Option<Bitrate>) -> Self {
        self.max_bitrate = r;
        self
    }
    /// Sets the session id.
    pub fn session(mut self, s: u32) -> Self {
        self.session = s;
        self
    }
    /// Sets the MER window in messages.
    pub fn mer_window(mut self, n: usize) -> Self {
        self.mer_window = n;
        self
    }
    /// Sets the activity gate in messages.
    pub fn gate_messages(mut self, n: u32) -> Self {
        self.gate_messages = n;
        self
    }

    /// Sets what this endpoint sends.
    pub fn framing(mut self, f: Framing) -> Self {
        self.framing = f;
        self
    }
    /// Sets the RTP/RED parameters.
    pub fn red(mut self, r: RedConfig) -> Self {
        self.red = r;
        self
    }

    /// The requirement of type `t`.
    pub fn qos_of(&self, t: MsgType) -> TypeQos {
        self.qos.get(&t).copied().unwrap_or(self.default_qos)
    }

    /// The code set size a new (peer, type) starts with.
    pub fn initial_size(&self, t: MsgType) -> f64 {
        match self.mode {
            Mode::Plain => 1.0,
            Mode::Static(n) => n,
            Mode::Adaptive => self.qos_of(t).initial_size,
        }
    }

    /// Checks the configuration; the error names the bad field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |field, why| Err(ConfigError { field, why });
        if self.mtu < crate::wire::afec::DATA_HEADER_LEN + crate::wire::afec::MESSAGE_HEADER_LEN + 1
        {
            return bad("mtu", "too small for one message");
        }
        if let Mode::Static(n) = self.mode {
            if !(1.0..=255.0).contains(&n) {
                return bad("mode", "a static code set size must be between 1 and 255");
            }
        }
        if let Step::Fractional(s) = self.step {
            if !(s > 0.0 && s <= 8.0) {
                return bad("step", "a fractional step must be in (0, 8]");
            }
        }
        for q in self.qos.values().chain(std::iter::once(&self.default_qos)) {
            if !(0.0..=1.0).contains(&q.mer_min)
                || !(0.0..=1.0).contains(&q.mer_max)
                || q.mer_min > q.mer_max
            {
                return bad("qos", "an MER band needs 0 <= min <= max <= 1");
            }
            if q.lifetime.is_some_and(|l| l.is_zero()) {
                return bad("qos", "a message lifetime must be positive (None: forever)");
            }
            if !(1.0..=self.max_size).contains(&q.initial_size) {
                return bad(
                    "qos",
                    "an initial code set size must be between 1 and max_size",
                );
            }
        }
        if !(1.0..=255.0).contains(&self.max_size) {
            return bad("max_size", "must be between 1 and 255");
        }
        if self.mer_window == 0 || self.mer_window > 1 << 20 {
            return bad("mer_window", "must be between 1 and 2^20 messages");
        }
        if self.packet_window < 10 || self.packet_window > 1 << 20 {
            return bad("packet_window", "must be between 10 and 2^20 packets");
        }
        if self.check_interval.is_zero()
            || self.flush_interval.is_zero()
            || self.control_retry.is_zero()
        {
            return bad(
                "timers",
                "check, flush and retry intervals must be positive",
            );
        }
        if self.history_limit == 0 {
            return bad("history_limit", "must be at least 1");
        }
        self.red.validate()
    }
}

/// A configuration field with an impossible value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("AFEC config {field}: {why}")]
pub struct ConfigError {
    /// The field.
    pub field: &'static str,
    /// What is wrong.
    pub why: &'static str,
}

/// A named redundancy scheme, as users and experiments pick one: `udp`,
/// `fec-N`, `afec` (the paper's integer NAK/INC), `afec-frac` (fractional
/// steps of [`Scheme::FRACTIONAL_STEP`]), `afec-pred` ([`Step::Predictive`])
/// or `afec-robust` ([`Step::Robust`]).
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum Scheme {
    /// Plain UDP: code set size 1.
    Udp,
    /// Non-adaptive FEC-n.
    Fec(f64),
    /// Adaptive, whole steps (the paper).
    Afec,
    /// Adaptive, fractional steps (the paper's future work).
    AfecFractional,
    /// Adaptive, size predicted from the observed loss runs (ours).
    AfecPredictive,
    /// Adaptive, predicted with change detection and bounded goals (ours).
    AfecRobust,
}

impl Scheme {
    /// Step of `afec-frac`.
    pub const FRACTIONAL_STEP: f64 = 0.1;

    /// The endpoint mode and controller step this scheme means.
    pub fn mode_and_step(self) -> (Mode, Step) {
        match self {
            Self::Udp => (Mode::Plain, Step::Integer),
            Self::Fec(n) => (Mode::Static(n), Step::Integer),
            Self::Afec => (Mode::Adaptive, Step::Integer),
            Self::AfecFractional => (Mode::Adaptive, Step::Fractional(Self::FRACTIONAL_STEP)),
            Self::AfecPredictive => (Mode::Adaptive, Step::Predictive),
            Self::AfecRobust => (Mode::Adaptive, Step::Robust),
        }
    }

    /// Whether the receiver adapts the code set size.
    pub fn is_adaptive(self) -> bool {
        matches!(
            self,
            Self::Afec | Self::AfecFractional | Self::AfecPredictive | Self::AfecRobust
        )
    }
}

impl core::fmt::Display for Scheme {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Udp => f.write_str("udp"),
            Self::Fec(n) => write!(f, "fec-{n}"),
            Self::Afec => f.write_str("afec"),
            Self::AfecFractional => f.write_str("afec-frac"),
            Self::AfecPredictive => f.write_str("afec-pred"),
            Self::AfecRobust => f.write_str("afec-robust"),
        }
    }
}

impl core::str::FromStr for Scheme {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "udp" => Ok(Self::Udp),
            "afec" => Ok(Self::Afec),
            "afec-frac" | "afec-fractional" => Ok(Self::AfecFractional),
            "afec-pred" | "afec-predictive" => Ok(Self::AfecPredictive),
            "afec-robust" => Ok(Self::AfecRobust),
            other => other
                .strip_prefix("fec-")
                .and_then(|n| n.parse::<f64>().ok())
                .filter(|n| (1.0..=255.0).contains(n))
                .map(Self::Fec)
                .ok_or_else(|| {
                    format!(
                        "{s:?}: expected udp, fec-N (N from 1 to 255), afec, afec-frac, afec-pred or afec-robust"
                    )
                }),
        }
    }
}
