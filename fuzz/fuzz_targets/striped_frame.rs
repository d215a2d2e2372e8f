//! Parallel TCP striping's frames round-trip, and a byte stream of them is
//! walked the way a receiver reads one without leaving the input. The
//! check itself is `groupwire_fuzz_targets::striped_frame`, which `cargo
//! test` also runs over this target's committed corpus on stable.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| groupwire_fuzz_targets::striped_frame(data));
