//! The session resource monitor's report round-trips, and a walk of
//! arrivals, reports and probes over one path keeps both halves' promises.
//! The check itself is `groupwire_fuzz_targets::monitor_report`, which
//! `cargo test` also runs over this target's committed corpus on stable.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| groupwire_fuzz_targets::monitor_report(data));
