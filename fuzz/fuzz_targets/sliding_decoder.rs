//! The RFC 8681 sliding-window decoder under a real stream mixed with
//! hostile packets: no panic, bounded memory, exact rebuilds while the
//! stream is clean. The check itself is
//! `groupwire_fuzz_targets::sliding_decoder`, which `cargo test` also runs
//! over this target's committed corpus on stable.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| groupwire_fuzz_targets::sliding_decoder(data));
