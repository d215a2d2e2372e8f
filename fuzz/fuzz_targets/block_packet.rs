//! Block-FEC data packets and reports round-trip.
//! The check itself is `groupwire_fuzz_targets::block_packet`, which `cargo test`
//! also runs over this target's committed corpus on stable.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| groupwire_fuzz_targets::block_packet(data));
