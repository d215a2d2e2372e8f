//! The XOR FEC decoder under a real stream mixed with hostile packets stays bounded.
//! The check itself is `groupwire_fuzz_targets::xor_decoder`, which `cargo test`
//! also runs over this target's committed corpus on stable.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| groupwire_fuzz_targets::xor_decoder(data));
