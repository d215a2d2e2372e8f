//! One direction of a link: serialization at a bit rate behind a queue
//! (drop-tail FIFO, or classes under a [`Qdisc`]), propagation delay,
//! jitter, and a loss process.
//!
//! A [`LinkConfig`] (serde, chained setters, presets) builds a [`Link`], a
//! sans-IO model that answers "what happens to this packet?" with a
//! [`Fate`]: the driver (simulator or real-socket emulator) schedules the
//! delivery itself.

use std::collections::VecDeque;
use std::time::Duration;

use groupwire_units::time::duration_nanos;
use groupwire_units::{Bitrate, Instant};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::loss::{BitErrors, LossError, LossModel, LossProcess, PacketFate};
use crate::qdisc::{ClassStats, Dscp, Qdisc, Scheduler};
use crate::schedule::{Schedule, Varying};

/// The drop-tail queue's capacity. It counts the packets not yet fully
/// serialized, the one being transmitted included (like an ns-3 queue plus
/// its device's transmit slot).
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum QueueLimit {
    /// Never drops: latency grows without bound under overload.
    #[default]
    Unlimited,
    /// At most this many packets.
    Packets(u32),
    /// At most this many bytes.
    Bytes(u64),
}

/// Random extra delay per packet, uniform in `[0, max]` (nanosecond
/// resolution, drawn independently for each arriving packet).
///
/// Without [`LinkConfig::allow_reorder`], a packet never arrives before the
/// one sent ahead of it: jitter then delays packets behind a late one, as on
/// a path whose variable delay comes from queueing.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Jitter {
    /// Largest extra delay.
    pub max: Duration,
}

/// Configuration of one direction of a link.
///
/// Build with [`LinkConfig::new`] and chained setters, or start from a
/// preset:
///
/// ```
/// use std::time::Duration;
/// use groupwire_link::{LinkConfig, LossModel};
/// use groupwire_units::Bitrate;
///
/// let config = LinkConfig::new()
///     .rate(Bitrate::mbps(2))
///     .latency(Duration::from_millis(40))
///     .loss(LossModel::cellular())
///     .seed(7);
/// let link = config.build().expect("valid loss model");
/// # let _ = link;
/// ```
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct LinkConfig {
    /// Serialization rate; `None` is unlimited (no serialization time and no
    /// queue).
    pub rate: Option<Bitrate>,
    /// One-way propagation delay, added after serialization.
    pub delay: Duration,
    /// Random extra delay, if any.
    pub jitter: Option<Jitter>,
    /// Whether jitter may reorder packets.
    pub reorder: bool,
    /// Drop-tail queue capacity (only with a `rate`) of the FIFO
    /// discipline; classful disciplines have a limit per class.
    pub queue: QueueLimit,
    /// How queued packets are ordered: FIFO (the default) or by class.
    pub qdisc: Qdisc,
    /// Loss process applied to every serialized packet.
    pub loss: LossModel,
    /// A time-varying rate: while set, it replaces `rate` (a packet is
    /// serialized at the rate in force when its serialization starts).
    pub rate_schedule: Option<Schedule<Bitrate>>,
    /// A time-varying one-way delay: while set, it replaces `delay` (a
    /// packet takes the delay in force when it finishes serializing; a
    /// falling delay does not reorder packets unless reordering is
    /// allowed).
    pub delay_schedule: Option<Schedule<Duration>>,
    /// Seed of the link's RNG.
    pub seed: u64,
}

impl Default for LinkConfig {
    fn default() -> Self {
        Self::new()
    }
}

impl LinkConfig {
    /// A perfect link: unlimited rate, zero delay, no jitter, no loss,
    /// unlimited queue, seed 0.
    pub fn new() -> Self {
        Self {
            rate: None,
            delay: Duration::ZERO,
            jitter: None,
            reorder: false,
            queue: QueueLimit::Unlimited,
            qdisc: Qdisc::Fifo,
            loss: LossModel::None,
            rate_schedule: None,
            delay_schedule: None,
            seed: 0,
        }
    }

    /// Serializes packets at `rate`.
    pub fn rate(mut self, rate: Bitrate) -> Self {
        self.rate = Some(rate);
        self
    }

    /// One-way propagation delay.
    pub fn latency(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// Uniform jitter in `[0, max]`; a zero `max` removes jitter.
    pub fn jitter(mut self, max: Duration) -> Self {
        self.jitter = (!max.is_zero()).then_some(Jitter { max });
        self
    }

    /// Whether jitter may reorder packets (default: no).
    pub fn allow_reorder(mut self, reorder: bool) -> Self {
        self.reorder = reorder;
        self
    }

    /// Drop-tail queue capacity.
    pub fn queue(mut self, limit: QueueLimit) -> Self {
        self.queue = limit;
        self
    }

    /// Queue discipline (see [`crate::qdisc`]).
    pub fn qdisc(mut self, qdisc: Qdisc) -> Self {
        self.qdisc = qdisc;
        self
    }

    /// Loss process.
    pub fn loss(mut self, loss: LossModel) -> Self {
        self.loss = loss;
        self
    }

    /// A time-varying rate (see [`crate::schedule`]), replacing
    /// [`LinkConfig::rate`].
    pub fn rate_schedule(mut self, schedule: Schedule<Bitrate>) -> Self {
        self.rate_schedule = Some(schedule);
        self
    }

    /// A time-varying one-way delay (see [`crate::schedule`]), replacing
    /// [`LinkConfig::latency`].
    pub fn delay_schedule(mut self, schedule: Schedule<Duration>) -> Self {
        self.delay_schedule = Some(schedule);
        self
    }

    /// A fixed rate or a rate schedule (what `--rate` accepts).
    pub fn varying_rate(self, rate: Varying<Bitrate>) -> Self {
        match rate {
            Varying::Fixed(r) => self.rate(r),
            Varying::Schedule(s) => self.rate_schedule(s),
        }
    }

    /// A fixed delay or a delay schedule (what `--delay` accepts).
    pub fn varying_delay(self, delay: Varying<Duration>) -> Self {
        match delay {
            Varying::Fixed(d) => self.latency(d),
            Varying::Schedule(s) => self.delay_schedule(s),
        }
    }

    /// Both schedules at once, each only if given (a scenario's optional
    /// `rate_schedule` and `delay_schedule` keys).
    pub fn schedules(
        mut self,
        rate: Option<&Schedule<Bitrate>>,
        delay: Option<&Schedule<Duration>>,
    ) -> Self {
        self.rate_schedule = rate.cloned().or(self.rate_schedule);
        self.delay_schedule = delay.cloned().or(self.delay_schedule);
        self
    }

    /// The rate in force at `now`: the schedule's value, else `rate`.
    pub fn rate_at(&self, now: Instant) -> Option<Bitrate> {
        match &self.rate_schedule {
            Some(s) => Some(s.value_at(now.since_epoch())),
            None => self.rate,
        }
    }

    /// The one-way delay in force at `now`: the schedule's value, else
    /// `delay`.
    pub fn delay_at(&self, now: Instant) -> Duration {
        match &self.delay_schedule {
            Some(s) => s.value_at(now.since_epoch()),
            None => self.delay,
        }
    }

    /// Seed of the link's RNG.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Dyck & Gutwin's dial-up line: 56 kbit/s (EXPERIMENTS, "Bandwidth").
    ///
    /// The paper emulated bandwidth and loss only (The Cloud on a LAN) and
    /// states no delay; we add 60 ms one way, typical of a V.90 modem's own
    /// latency. The queue is unlimited because the paper reports latency
    /// growing, not loss, when AFEC's load exceeded the bandwidth
    /// (DISCUSSION). Add the paper's loss patterns with
    /// [`LinkConfig::loss`] and [`LossModel::dyck_burst`].
    pub fn dialup_56k() -> Self {
        Self::new()
            .rate(Bitrate::kbps(56))
            .latency(Duration::from_millis(DIALUP_DELAY_MS))
    }

    /// Dyck & Gutwin's 256 kbit/s line ("a Uniform Cable connection";
    /// EXPERIMENTS, "Bandwidth"), with 10 ms one way (our choice: a cable
    /// access network's delay; the paper states none) and an unlimited
    /// queue, as for [`LinkConfig::dialup_56k`].
    pub fn lan_256k() -> Self {
        Self::new()
            .rate(Bitrate::kbps(256))
            .latency(Duration::from_millis(CABLE_DELAY_MS))
    }

    /// A cellular data link: 2 Mbit/s, 40 ms one way, up to 10 ms of jitter
    /// (without reordering: the radio link layer delivers in order), a
    /// 100-packet drop-tail queue (ns-3's default `DropTailQueue` size) and
    /// the [`LossModel::cellular`] Gilbert-Elliott channel. Rate, delay and
    /// jitter are our choices for a 3G-class link, not from a paper.
    pub fn cellular() -> Self {
        Self::new()
            .rate(Bitrate::mbps(2))
            .latency(Duration::from_millis(40))
            .jitter(Duration::from_millis(10))
            .queue(QueueLimit::Packets(NS3_DEFAULT_QUEUE_PACKETS))
            .loss(LossModel::cellular())
    }

    /// Builds the link (validating the loss model and the queue discipline,
    /// and reading any trace).
    pub fn build(&self) -> Result<Link, LossError> {
        let loss = self.loss.build()?;
        let classful = Scheduler::new(&self.qdisc)?.map(|sched| Classful {
            sched,
            ring: VecDeque::new(),
        });
        let loss_rng = ChaCha8Rng::seed_from_u64(self.seed);
        let mut jitter_rng = loss_rng.clone();
        jitter_rng.set_stream(JITTER_STREAM);
        Ok(Link {
            loss,
            loss_rng,
            jitter_rng,
            delay_nanos: duration_nanos(self.delay),
            jitter_nanos: self.jitter.as_ref().map_or(0, |j| duration_nanos(j.max)),
            queue: VecDeque::new(),
            queue_bytes: 0,
            last_departure: 0,
            last_arrival: 0,
            classful,
            departed: VecDeque::new(),
            stats: LinkStats::default(),
            config: self.clone(),
        })
    }
}

/// One direction of a link: a queue served at the configured rate (a
/// drop-tail FIFO, or classes under a [`Qdisc`]), then propagation delay,
/// jitter and a loss process.
///
/// Sans-IO: [`Link::offer`] says what happens to a packet and when it
/// arrives; the caller schedules the arrival. Randomness comes from a
/// ChaCha8 generator seeded with [`LinkConfig::seed`]: the loss process uses
/// stream 0 and jitter stream 1, so the loss pattern (as a function of the
/// packet's index among serialized packets) does not change when the rate,
/// delay or jitter do.
///
/// Methods: [`Link::offer`] (the FIFO hot path); the event-driven path that
/// every discipline supports: [`Link::enqueue`], then
/// [`Link::poll_timeout`] and [`Link::poll_departure`] until `None`; the
/// queue getters [`Link::queue_packets`] and [`Link::queue_bytes`],
/// [`Link::stats`], [`Link::class_stats`], [`Link::config`],
/// [`Link::is_classful`], and [`Link::set_loss`] / [`Link::set_rate`] to
/// change conditions mid-run.
#[derive(Debug)]
pub struct Link {
    config: LinkConfig,
    loss: LossProcess,
    loss_rng: ChaCha8Rng,
    jitter_rng: ChaCha8Rng,
    /// `config.delay` in nanoseconds, precomputed for the hot path.
    delay_nanos: u64,
    /// `config.jitter`'s maximum in nanoseconds (0: no jitter).
    jitter_nanos: u64,
    /// (departure nanos, bytes) of packets not yet fully serialized, in order.
    queue: VecDeque<(u64, u64)>,
    queue_bytes: u64,
    /// When the last accepted packet finishes serializing (nanos).
    last_departure: u64,
    /// When the last arriving packet arrives (nanos), for in-order delivery.
    last_arrival: u64,
    /// The class queues and the transmit ring of a classful discipline.
    classful: Option<Classful>,
    /// (departure nanos, departure) of packets that finished serializing,
    /// oldest first, for [`Link::poll_departure`].
    departed: VecDeque<(u64, Departure)>,
    stats: LinkStats,
}

/// The state of a classful discipline.
#[derive(Debug)]
struct Classful {
    sched: Scheduler,
    /// Packets handed to the interface, in serialization order; the front
    /// one is being serialized.
    ring: VecDeque<InRing>,
}

/// A packet in the transmit ring.
#[derive(Debug, Clone, Copy)]
struct InRing {
    token: u64,
    class: usize,
    len: u64,
    /// When it finishes serializing (nanos).
    departure: u64,
}

/// What [`Link::enqueue`] did with a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Admission {
    /// Queued in `class` (0 on a FIFO link); it will come out of
    /// [`Link::poll_departure`].
    Queued {
        /// The class it joined.
        class: usize,
    },
    /// Dropped at the tail of the full `class`: never serialized, and never
    /// returned by [`Link::poll_departure`].
    Dropped {
        /// The class that was full.
        class: usize,
    },
}

/// A packet that finished serializing, from [`Link::poll_departure`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Departure {
    /// The token the caller gave [`Link::enqueue`].
    pub token: u64,
    /// The class it was served from (0 on a FIFO link).
    pub class: usize,
    /// What happens to it on the wire: [`Fate::Deliver`],
    /// [`Fate::Corrupt`] or [`Fate::Lost`], never [`Fate::QueueDrop`].
    pub fate: Fate,
}

impl Link {
    /// Offers a packet of `len` bytes at `now` and returns its fate.
    ///
    /// Calls must have non-decreasing `now`. The link is a FIFO served at
    /// `rate`: departure = max(now, previous departure) + transmit time;
    /// arrival = departure + delay + jitter, and without reordering arrival
    /// = max(arrival, previous arrival). Drop-tail: the queue holds the
    /// packets not yet fully serialized at `now` (the one in service
    /// included); if adding this one would exceed the limit in packets or
    /// bytes, it is a [`Fate::QueueDrop`] and does not touch the loss
    /// process. With no rate there is no queue. The loss process decides the
    /// fate of every serialized packet; lost packets still use their
    /// serialization time.
    ///
    /// Allocation-free except when the queue grows past its previous peak or
    /// a packet is corrupted.
    ///
    /// # Panics
    ///
    /// On a classful link ([`Link::is_classful`]): there a packet's
    /// departure depends on packets offered after it, so the driver must use
    /// [`Link::enqueue`] and [`Link::poll_departure`]. Calling `offer` there
    /// is a driver bug.
    pub fn offer(&mut self, now: Instant, len: usize) -> Fate {
        assert!(
            self.classful.is_none(),
            "Link::offer on a classful link: drive it with enqueue and poll_departure"
        );
        self.offer_fifo(now.as_nanos(), len).1
    }

    /// Offers a packet of `len` bytes marked `dscp` at `now`, to be
    /// returned with `token` by [`Link::poll_departure`] once serialized,
    /// unless it is dropped at the tail of its class.
    ///
    /// Works on every discipline. A classful link sorts the packet into a
    /// class by its mark (see [`crate::qdisc`]); a FIFO link ignores the
    /// mark and decides its fate at once, as [`Link::offer`] does. Calls must
    /// have non-decreasing `now`, and the driver must call
    /// [`Link::poll_departure`] by [`Link::poll_timeout`] (a late call
    /// changes nothing but when it learns the fates). Safe to call at the
    /// same `now` as a departure, before or after polling it.
    pub fn enqueue(&mut self, now: Instant, len: usize, dscp: Dscp, token: u64) -> Admission {
        let now = now.as_nanos();
        let Some(mut cf) = self.classful.take() else {
            let (departure, fate) = self.offer_fifo(now, len);
            if fate == Fate::QueueDrop {
                return Admission::Dropped { class: 0 };
            }
            let class = 0;
            self.departed
                .push_back((departure, Departure { token, class, fate }));
            return Admission::Queued { class };
        };
        let bytes = len as u64;
        self.stats.offered += 1;
        self.stats.offered_bytes += bytes;
        self.advance(&mut cf, now);
        let class = cf.sched.classify(dscp);
        let admitted = cf.sched.push(class, token, bytes);
        if admitted {
            let (packets, bytes) = cf.sched.occupancy();
            self.stats.max_queue_packets = self.stats.max_queue_packets.max(packets);
            self.stats.max_queue_bytes = self.stats.max_queue_bytes.max(bytes);
            self.fill(&mut cf, now);
        } else {
            self.stats.queue_drops += 1;
        }
        self.classful = Some(cf);
        if admitted {
            Admission::Queued { class }
        } else {
            Admission::Dropped { class }
        }
    }

    /// When the next packet finishes serializing and
    /// [`Link::poll_departure`] has something to return (possibly already
    /// past); `None` while nothing is queued. Changes after every
    /// [`Link::enqueue`] and [`Link::poll_departure`].
    pub fn poll_timeout(&self) -> Option<Instant> {
        let next = match (self.departed.front(), &self.classful) {
            (Some(&(at, _)), _) => at,
            (None, Some(cf)) => cf.ring.front()?.departure,
            (None, None) => return None,
        };
        Some(Instant::from_nanos(next))
    }

    /// The next packet that has finished serializing by `now`, with its fate
    /// on the wire; `None` when there is none yet. Call until `None`, then
    /// read [`Link::poll_timeout`]. `now` must not precede the last
    /// [`Link::enqueue`]; early or repeated calls are harmless.
    pub fn poll_departure(&mut self, now: Instant) -> Option<Departure> {
        let now = now.as_nanos();
        if let Some(mut cf) = self.classful.take() {
            self.advance(&mut cf, now);
            self.classful = Some(cf);
        }
        match self.departed.front() {
            Some(&(at, _)) if at <= now => self.departed.pop_front().map(|(_, d)| d),
            _ => None,
        }
    }

    /// Whether the link schedules by class ([`LinkConfig::qdisc`] is not
    /// FIFO), so must be driven with [`Link::enqueue`].
    pub fn is_classful(&self) -> bool {
        self.classful.is_some()
    }

    /// Counters per class, in the configured order (empty on a FIFO link).
    pub fn class_stats(&self) -> &[ClassStats] {
        self.classful.as_ref().map_or(&[], |cf| cf.sched.stats())
    }

    /// The FIFO path: (departure nanos, fate). The departure is meaningless
    /// for a [`Fate::QueueDrop`].
    fn offer_fifo(&mut self, now: u64, len: usize) -> (u64, Fate) {
        let bytes = len as u64;
        self.stats.offered += 1;
        self.stats.offered_bytes += bytes;

        let start = now.max(self.last_departure);
        let departure = match self.config.rate_at(Instant::from_nanos(start)) {
            None => start,
            Some(rate) => {
                self.drain(now);
                let full = match self.config.queue {
                    QueueLimit::Unlimited => false,
                    QueueLimit::Packets(max) => self.queue.len() as u64 >= u64::from(max),
                    QueueLimit::Bytes(max) => self.queue_bytes.saturating_add(bytes) > max,
                };
                if full {
                    self.stats.queue_drops += 1;
                    return (now, Fate::QueueDrop);
                }
                let departure = start.saturating_add(transmit_nanos(rate, bytes));
                self.queue.push_back((departure, bytes));
                self.queue_bytes += bytes;
                self.stats.max_queue_packets =
                    self.stats.max_queue_packets.max(self.queue.len() as u64);
                self.stats.max_queue_bytes = self.stats.max_queue_bytes.max(self.queue_bytes);
                departure
            }
        };
        self.last_departure = departure;
        (departure, self.serialized(departure, len))
    }

    /// The fate on the wire of a packet that finishes serializing at
    /// `departure`: the loss process, then delay and jitter. Called in
    /// serialization order.
    fn serialized(&mut self, departure: u64, len: usize) -> Fate {
        let errors =
            match self
                .loss
                .on_packet(Instant::from_nanos(departure), len, &mut self.loss_rng)
            {
                PacketFate::Lost => {
                    self.stats.lost += 1;
                    return Fate::Lost;
                }
                PacketFate::Delivered => None,
                PacketFate::Corrupted(errors) => Some(errors),
            };

        let delay = match &self.config.delay_schedule {
            Some(_) => duration_nanos(self.config.delay_at(Instant::from_nanos(departure))),
            None => self.delay_nanos,
        };
        let mut arrival = departure.saturating_add(delay);
        if self.jitter_nanos > 0 {
            let extra = self.jitter_rng.random_range(0..=self.jitter_nanos);
            arrival = arrival.saturating_add(extra);
        }
        if !self.config.reorder {
            arrival = arrival.max(self.last_arrival);
        }
        self.last_arrival = self.last_arrival.max(arrival);
        let at = Instant::from_nanos(arrival);
        match errors {
            None => {
                self.stats.delivered += 1;
                Fate::Deliver { at }
            }
            Some(errors) => {
                self.stats.corrupted += 1;
                Fate::Corrupt { at, errors }
            }
        }
    }

    /// Packets not yet fully serialized at `now` (the one in service
    /// included; every class of a classful link). `now` must not precede
    /// the last `offer` or `enqueue`.
    pub fn queue_packets(&mut self, now: Instant) -> usize {
        self.occupancy(now.as_nanos()).0 as usize
    }

    /// Bytes of the packets counted by [`Link::queue_packets`].
    pub fn queue_bytes(&mut self, now: Instant) -> u64 {
        self.occupancy(now.as_nanos()).1
    }

    /// (packets, bytes) not yet fully serialized at `now`.
    fn occupancy(&mut self, now: u64) -> (u64, u64) {
        match self.classful.take() {
            Some(mut cf) => {
                self.advance(&mut cf, now);
                let held = cf.sched.occupancy();
                self.classful = Some(cf);
                held
            }
            None => {
                self.drain(now);
                (self.queue.len() as u64, self.queue_bytes)
            }
        }
    }

    /// Classful links: completes the serializations that end by `now`, in
    /// order, refilling the ring from the scheduler at each one's end (every
    /// packet still queued was enqueued before that instant, so the choice
    /// is causal), and decides their fates.
    fn advance(&mut self, cf: &mut Classful, now: u64) {
        while let Some(&done) = cf.ring.front().filter(|r| r.departure <= now) {
            cf.ring.pop_front();
            cf.sched.on_departed(done.class, done.len);
            let len = usize::try_from(done.len).expect("a packet's length fits usize");
            let fate = self.serialized(done.departure, len);
            self.departed.push_back((
                done.departure,
                Departure {
                    token: done.token,
                    class: done.class,
                    fate,
                },
            ));
            self.fill(cf, done.departure);
        }
    }

    /// Classful links: hands packets from the scheduler to the ring while it
    /// has room; each starts serializing at `at` or when the one ahead ends.
    fn fill(&mut self, cf: &mut Classful, at: u64) {
        while cf.ring.len() < cf.sched.tx_ring {
            let Some((class, token, len)) = cf.sched.pop() else {
                break;
            };
            let start = at.max(self.last_departure);
            let departure = match self.config.rate_at(Instant::from_nanos(start)) {
                None => start,
                Some(rate) => start.saturating_add(transmit_nanos(rate, len)),
            };
            self.last_departure = departure;
            cf.ring.push_back(InRing {
                token,
                class,
                len,
                departure,
            });
        }
    }

    /// Counters since the link was built.
    pub fn stats(&self) -> &LinkStats {
        &self.stats
    }

    /// The configuration the link was built from (with any later
    /// [`Link::set_loss`] / [`Link::set_rate`] applied).
    pub fn config(&self) -> &LinkConfig {
        &self.config
    }

    /// Replaces the loss process from now on (a fresh process in its
    /// initial state; the RNG continues).
    pub fn set_loss(&mut self, loss: LossModel) -> Result<(), LossError> {
        self.loss = loss.build()?;
        self.config.loss = loss;
        Ok(())
    }

    /// Changes the rate for packets offered from now on (ending any rate
    /// schedule); queued packets keep their departure times.
    pub fn set_rate(&mut self, rate: Option<Bitrate>) {
        self.config.rate = rate;
        self.config.rate_schedule = None;
    }

    /// The rate in force at `now` ([`LinkConfig::rate_at`]).
    pub fn rate_at(&self, now: Instant) -> Option<Bitrate> {
        self.config.rate_at(now)
    }

    /// The one-way delay in force at `now` ([`LinkConfig::delay_at`]).
    pub fn delay_at(&self, now: Instant) -> Duration {
        self.config.delay_at(now)
    }

    /// Forgets the packets fully serialized by `now`.
    fn drain(&mut self, now: u64) {
        while let Some(&(departure, bytes)) = self.queue.front() {
            if departure > now {
                break;
            }
            self.queue.pop_front();
            self.queue_bytes -= bytes;
        }
    }
}

/// What a link does with one packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fate {
    /// Arrives whole at the far end at `at`.
    Deliver {
        /// Arrival time.
        at: Instant,
    },
    /// Arrives at `at` with bit errors (bit-error loss models only).
    Corrupt {
        /// Arrival time.
        at: Instant,
        /// The flipped bits.
        errors: BitErrors,
    },
    /// Lost on the wire, after using its share of the link's time (it was
    /// serialized).
    Lost,
    /// Dropped at the tail of a full queue: never serialized.
    QueueDrop,
}

/// Counters of a [`Link`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Packets offered.
    pub offered: u64,
    /// Bytes offered.
    pub offered_bytes: u64,
    /// Packets delivered intact.
    pub delivered: u64,
    /// Packets lost on the wire.
    pub lost: u64,
    /// Packets delivered with bit errors.
    pub corrupted: u64,
    /// Packets dropped at the tail of a full queue.
    pub queue_drops: u64,
    /// Largest queue occupancy in packets (right after an enqueue).
    pub max_queue_packets: u64,
    /// Largest queue occupancy in bytes (right after an enqueue).
    pub max_queue_bytes: u64,
}

/// Stream of the link's ChaCha8 generator used for jitter (the loss
/// process uses stream 0).
const JITTER_STREAM: u64 = 1;
/// One-way delay of [`LinkConfig::dialup_56k`]: typical V.90 modem latency.
const DIALUP_DELAY_MS: u64 = 60;
/// One-way delay of [`LinkConfig::lan_256k`]: a cable access network.
const CABLE_DELAY_MS: u64 = 10;
/// ns-3's `DropTailQueue` default `MaxSize` ("100p").
const NS3_DEFAULT_QUEUE_PACKETS: u32 = 100;

/// [`Bitrate::transmit_time`] in nanoseconds, in 64-bit arithmetic when it
/// cannot overflow (every datagram), since this runs once per packet.
fn transmit_nanos(rate: Bitrate, bytes: u64) -> u64 {
    let bps = rate.as_bps();
    match bytes.checked_mul(8_000_000_000) {
        Some(bit_nanos) if bps > 0 => bit_nanos.div_ceil(bps),
        _ => duration_nanos(rate.transmit_time(bytes)),
    }
}

#[cfg(test)]
mod tests;
