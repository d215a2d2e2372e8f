//! Code switching on a ladder of FEC strengths: Miyoshi et al.'s reactive
//! rule (§4, after Eckhardt & Steenkiste).
//!
//! A *ladder* is an ordered list of codes, weakest (least overhead) first:
//! for Miyoshi et al. no FEC, BCH(127, 92), BCH(127, 64), BCH(127, 36). A
//! [`LadderController`] sees the outcome of every frame sent at the
//! current rung and says which rung the next frame uses. It knows nothing
//! about the codes themselves, so the same controller drives link-layer
//! BCH in the simulator and could drive any other ordered set of
//! redundancy settings.
//!
//! [`ThresholdLadder`] is the paper's rule: "the FEC code is changed when
//! two or more segments among ten segments encounter the transmission
//! error" (§4, citing Eckhardt & Steenkiste), stepping to the more
//! correcting code; "otherwise, it is changed to the less overhead code".
//!
//! ```
//! use groupwire_proto::control::ladder::{FrameOutcome, LadderController, ThresholdLadder};
//!
//! let mut c = ThresholdLadder::new(4, Default::default());
//! c.on_frame(FrameOutcome::LOST);
//! c.on_frame(FrameOutcome::LOST);
//! assert_eq!(c.rung(), 1); // two errors in the window: one rung stronger
//! for _ in 0..10 {
//!     c.on_frame(FrameOutcome::CLEAN);
//! }
//! assert_eq!(c.rung(), 0); // a clean window: back to the lighter code
//! ```

use core::fmt;

/// What became of one frame, as the sender learns it (Miyoshi et al.: from
/// ELN, which marks the segments lost on the wireless hop).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FrameOutcome {
    /// The frame did not survive the link (more errors than its code
    /// corrects, or any error without FEC).
    pub lost: bool,
    /// Bit errors the receiver's decoder corrected in it, if the receiver
    /// reports them (a richer signal than loss; the paper's rule ignores it).
    pub corrected_bits: Option<u32>,
}

impl FrameOutcome {
    /// A frame that arrived with nothing to correct.
    pub const CLEAN: Self = Self {
        lost: false,
        corrected_bits: Some(0),
    };
    /// A frame lost on the link.
    pub const LOST: Self = Self {
        lost: true,
        corrected_bits: None,
    };
}

/// Chooses the rung (code strength, 0 = lightest) of each frame from the
/// outcomes of the frames before it.
pub trait LadderController: fmt::Debug + Send {
    /// The outcome of one frame sent at the current rung, in sending order.
    fn on_frame(&mut self, outcome: FrameOutcome);
    /// The rung for the next frame, in `0..rungs`.
    fn rung(&self) -> usize;
}

/// Parameters of [`ThresholdLadder`]. The defaults are the paper's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ThresholdConfig {
    /// Frames observed per decision (§4: ten segments). At most 64.
    pub window: u32,
    /// Lost frames among the last `window` that move one rung up (§4: two
    /// or more). Checked after every frame, so a burst is answered as soon
    /// as it shows.
    pub up: u32,
    /// Step one rung down once `window` frames have been seen at this rung
    /// with at most this many lost among the last `window`.
    ///
    /// The paper's "otherwise, it is changed to the less overhead code"
    /// leaves the exact condition open; 0 (a window with no error at all)
    /// is our reading: a window with one error neither climbs nor falls,
    /// so the rule does not flap between two codes at a steady error rate
    /// near `up / window`.
    pub down: u32,
}

impl Default for ThresholdConfig {
    fn default() -> Self {
        Self {
            window: 10,
            up: 2,
            down: 0,
        }
    }
}

impl ThresholdConfig {
    /// Checks the parameters: `1 <= window <= 64`, `1 <= up <= window`,
    /// `down < up`.
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=64).contains(&self.window) {
            return Err(format!("window {} must be 1..=64 frames", self.window));
        }
        if !(1..=self.window).contains(&self.up) {
            return Err(format!(
                "up {} must be 1..=window ({})",
                self.up, self.window
            ));
        }
        if self.down >= self.up {
            return Err(format!(
                "down {} must be less than up ({})",
                self.down, self.up
            ));
        }
        Ok(())
    }
}

/// Miyoshi et al.'s reactive code switching (§4, Figure 4): one rung up as
/// soon as `up` of the last `window` frames were lost, one rung down after
/// a full window at this rung with at most `down` lost. The observation
/// window restarts at every switch, so each decision judges the code in use.
#[derive(Clone, Debug)]
pub struct ThresholdLadder {
    config: ThresholdConfig,
    rungs: usize,
    rung: usize,
    /// Outcomes since the last switch, newest in bit 0, 1 = lost.
    history: u64,
    /// Frames seen since the last switch (saturating).
    seen: u32,
    switches: u64,
}

impl ThresholdLadder {
    /// A controller over `rungs` codes (at least 1), starting at rung 0.
    ///
    /// # Panics
    ///
    /// If `rungs` is 0 or `config` fails [`ThresholdConfig::validate`].
    pub fn new(rungs: usize, config: ThresholdConfig) -> Self {
        assert!(rungs >= 1, "a ladder needs at least one rung");
        if let Err(e) = config.validate() {
            panic!("ThresholdLadder: {e}");
        }
        Self {
            config,
            rungs,
            rung: 0,
            history: 0,
            seen: 0,
            switches: 0,
        }
    }

    /// Code changes so far.
    pub fn switches(&self) -> u64 {
        self.switches
    }

    fn window_mask(&self) -> u64 {
        if self.config.window >= 64 {
            u64::MAX
        } else {
            (1u64 << self.config.window) - 1
        }
    }

    fn switch_to(&mut self, rung: usize) {
        self.rung = rung;
        self.history = 0;
        self.seen = 0;
        self.switches += 1;
    }
}

impl LadderController for ThresholdLadder {
    fn on_frame(&mut self, outcome: FrameOutcome) {
        self.history = (self.history << 1 | u64::from(outcome.lost)) & self.window_mask();
        self.seen = self.seen.saturating_add(1);
        let lost = self.history.count_ones();
        if lost >= self.config.up && self.rung + 1 < self.rungs {
            self.switch_to(self.rung + 1);
        } else if self.seen >= self.config.window && lost <= self.config.down && self.rung > 0 {
            self.switch_to(self.rung - 1);
        }
    }

    fn rung(&self) -> usize {
        self.rung
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(c: &mut ThresholdLadder, pattern: &str) {
        for ch in pattern.chars() {
            c.on_frame(if ch == 'x' {
                FrameOutcome::LOST
            } else {
                FrameOutcome::CLEAN
            });
        }
    }

    #[test]
    fn two_losses_in_ten_climb_one_rung_and_restart_the_window() {
        let mut c = ThresholdLadder::new(4, ThresholdConfig::default());
        feed(&mut c, "x........");
        assert_eq!(c.rung(), 0, "one loss in the window: stay");
        feed(&mut c, "x");
        assert_eq!(c.rung(), 1, "second loss within ten frames: climb");
        // The window restarted: one more loss alone does not climb again.
        feed(&mut c, "x");
        assert_eq!(c.rung(), 1);
        feed(&mut c, "x");
        assert_eq!(c.rung(), 2);
        feed(&mut c, "xx");
        assert_eq!(c.rung(), 3);
        feed(&mut c, "xxxxxxxx");
        assert_eq!(c.rung(), 3, "the top rung is the ceiling");
    }

    #[test]
    fn losses_further_apart_than_the_window_do_not_climb() {
        let mut c = ThresholdLadder::new(4, ThresholdConfig::default());
        feed(&mut c, "x.........x.........x.........x");
        assert_eq!(c.rung(), 0);
        assert_eq!(c.switches(), 0);
    }

    #[test]
    fn a_clean_window_steps_down_and_one_error_holds() {
        let mut c = ThresholdLadder::new(3, ThresholdConfig::default());
        feed(&mut c, "xxxx");
        assert_eq!(c.rung(), 2);
        feed(&mut c, ".........");
        assert_eq!(c.rung(), 2, "nine frames are not a window");
        feed(&mut c, ".");
        assert_eq!(c.rung(), 1);
        feed(&mut c, "....x.........");
        assert_eq!(c.rung(), 1, "one error among the last ten holds the rung");
        feed(&mut c, "......");
        assert_eq!(c.rung(), 0, "ten clean frames step down");
        feed(&mut c, "....................");
        assert_eq!(c.rung(), 0, "rung 0 is the floor");
    }

    #[test]
    fn bad_configurations_are_named() {
        for (config, word) in [
            (
                ThresholdConfig {
                    window: 0,
                    ..Default::default()
                },
                "window",
            ),
            (
                ThresholdConfig {
                    window: 65,
                    ..Default::default()
                },
                "window",
            ),
            (
                ThresholdConfig {
                    up: 11,
                    ..Default::default()
                },
                "up",
            ),
            (
                ThresholdConfig {
                    down: 2,
                    ..Default::default()
                },
                "down",
            ),
        ] {
            assert!(config.validate().unwrap_err().contains(word), "{config:?}");
        }
        ThresholdLadder::new(
            1,
            ThresholdConfig {
                window: 64,
                up: 64,
                down: 63,
            },
        );
    }
}
