//! A whole AFEC endpoint fed arbitrary datagrams never panics; its memory stays bounded.
//! The check itself is `groupwire_fuzz_targets::afec_endpoint`, which `cargo test`
//! also runs over this target's committed corpus on stable.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| groupwire_fuzz_targets::afec_endpoint(data));
