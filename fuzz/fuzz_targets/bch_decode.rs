//! The BCH(127, k) decoder on any word: a codeword within t bits, or
//! "uncorrectable"; never a panic. The check itself is
//! `groupwire_fuzz_targets::bch_decode`, which `cargo test` also runs over
//! this target's committed corpus on stable.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| groupwire_fuzz_targets::bch_decode(data));
