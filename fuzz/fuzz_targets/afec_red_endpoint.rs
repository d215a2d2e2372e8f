//! An AFEC endpoint in RTP/RED framing fed hostile datagrams and messages:
//! no panic, and everything it sends parses.
//! The check itself is `groupwire_fuzz_targets::afec_red_endpoint`, which
//! `cargo test` also runs over this target's committed corpus on stable.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| groupwire_fuzz_targets::afec_red_endpoint(data));
