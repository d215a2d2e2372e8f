//! RFC 5109 ULPFEC packets round-trip, and the decoder survives hostile
//! packets in a real stream. The check itself is
//! `groupwire_fuzz_targets::ulpfec`, which `cargo test` also runs over this
//! target's committed corpus on stable.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| groupwire_fuzz_targets::ulpfec(data));
