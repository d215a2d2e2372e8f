//! The session machine beside an honest peer, fed hostile datagrams, frames and commands:
//! never panics, never sends a stranger more than it sent.
//! The check itself is `groupwire_fuzz_targets::session_endpoint`, which `cargo test`
//! also runs over this target's committed corpus on stable.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| groupwire_fuzz_targets::session_endpoint(data));
