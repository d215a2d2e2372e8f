//! The common datagram header: parse(emit(parse(x))) == parse(x).
#![no_main]

use groupwire_proto::wire::header::{Packet, Repr};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = Repr::parse(&Packet::new_unchecked(data)) {
        let mut buf = vec![0u8; r.buffer_len()];
        r.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(Repr::parse(&Packet::new_unchecked(&buf[..])), Ok(r));
    }
});
