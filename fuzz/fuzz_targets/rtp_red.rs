//! RFC 2198 RED payloads and RTCP (AFEC feedback's APP form) round-trip.
//! The check itself is `groupwire_fuzz_targets::rtp_red`, which `cargo test`
//! also runs over this target's committed corpus on stable.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| groupwire_fuzz_targets::rtp_red(data));
