//! Relay frames round-trip, and the stream decoder cuts them back out whole.
//! The check itself is `groupwire_fuzz_targets::relay_frame`, which `cargo test`
//! also runs over this target's committed corpus on stable.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| groupwire_fuzz_targets::relay_frame(data));
