//! The tunnel's endpoint, keyed and keyless, fed hostile datagrams end to end: never
//! panics, keeps within its block cap, sends nothing to an address that sent nothing.
//! The check itself is `groupwire_fuzz_targets::tunnel_endpoint`, which `cargo test`
//! also runs over this target's committed corpus on stable.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| groupwire_fuzz_targets::tunnel_endpoint(data));
