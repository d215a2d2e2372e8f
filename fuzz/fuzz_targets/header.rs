//! The common datagram header: parse(emit(parse(x))) == parse(x).
//! The check itself is `groupwire_fuzz_targets::header`, which `cargo test`
//! also runs over this target's committed corpus on stable.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| groupwire_fuzz_targets::header(data));
