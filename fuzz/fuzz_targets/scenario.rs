//! Scenario TOML and --set overrides parse, validate and print back without panics.
//! The check itself is `groupwire_fuzz_targets::scenario`, which `cargo test`
//! also runs over this target's committed corpus on stable.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| groupwire_fuzz_targets::scenario(data));
