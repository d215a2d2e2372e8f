//! AFEC data packets: whatever parses re-emits to the same value.
//! The check itself is `groupwire_fuzz_targets::afec_data`, which `cargo test`
//! also runs over this target's committed corpus on stable.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| groupwire_fuzz_targets::afec_data(data));
