//! The relay's protocol core driven by four hostile clients (frames as over TCP or WebSocket).
//! The check itself is `groupwire_fuzz_targets::relay_core`, which `cargo test`
//! also runs over this target's committed corpus on stable.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| groupwire_fuzz_targets::relay_core(data));
