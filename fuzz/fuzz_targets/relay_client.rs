//! The relay client's core (and its channel meters) under a hostile relay.
//! The check itself is `groupwire_fuzz_targets::relay_client`, which `cargo
//! test` also runs over this target's committed corpus on stable.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| groupwire_fuzz_targets::relay_client(data));
