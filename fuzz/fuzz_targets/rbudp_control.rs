//! Reliable Blast UDP's control messages round-trip, and a sender and a
//! receiver fed hostile control frames and datagrams stay sane. The check
//! itself is `groupwire_fuzz_targets::rbudp_control`, which `cargo test`
//! also runs over this target's committed corpus on stable.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| groupwire_fuzz_targets::rbudp_control(data));
