//! The loss models' one-line text form round-trips; valid models build and run.
//! The check itself is `groupwire_fuzz_targets::loss_model`, which `cargo test`
//! also runs over this target's committed corpus on stable.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| groupwire_fuzz_targets::loss_model(data));
