//! AFEC data packets: whatever parses re-emits to the same bytes and parses
//! back to the same value.
#![no_main]

use groupwire_proto::wire::afec::DataRepr;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = DataRepr::parse(data) {
        let mut buf = vec![0u8; r.buffer_len()];
        r.emit(&mut buf);
        assert_eq!(DataRepr::parse(&buf).as_ref(), Ok(&r));
    }
});
