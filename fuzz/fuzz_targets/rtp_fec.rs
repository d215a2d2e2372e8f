//! RTP headers and SMPTE 2022-1 FEC packets round-trip.
//! The check itself is `groupwire_fuzz_targets::rtp_fec`, which `cargo test`
//! also runs over this target's committed corpus on stable.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| groupwire_fuzz_targets::rtp_fec(data));
