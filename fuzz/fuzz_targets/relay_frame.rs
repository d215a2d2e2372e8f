//! Relay frames: whatever decodes re-encodes to a frame that decodes to the
//! same value, and the stream decoder cuts it back out whole.
#![no_main]

use groupwire_relay::frame::{DEFAULT_MAX_FRAME, FrameDecoder, decode, encode};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(env) = decode(data, DEFAULT_MAX_FRAME) {
        let bytes = encode(env.request, &env.frame);
        assert_eq!(decode(&bytes, DEFAULT_MAX_FRAME).as_ref(), Ok(&env));
    }
    // The stream decoder never panics and never returns more than it was fed.
    let mut d = FrameDecoder::new(4096);
    d.extend(data);
    let mut total = 0;
    while let Ok(Some(f)) = d.next_frame() {
        total += f.len();
        let _ = decode(&f, 4096);
    }
    assert!(total <= data.len());
});
