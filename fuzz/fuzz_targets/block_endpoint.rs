//! A block-FEC endpoint fed hostile datagrams never panics and keeps within its block cap.
//! The check itself is `groupwire_fuzz_targets::block_endpoint`, which `cargo test`
//! also runs over this target's committed corpus on stable.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| groupwire_fuzz_targets::block_endpoint(data));
