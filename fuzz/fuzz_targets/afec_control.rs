//! AFEC control packets: parse(emit(parse(x))) == parse(x). (Reserved
//! bytes are ignored on parse, so the bytes themselves may differ.)
#![no_main]

use groupwire_proto::wire::afec::ControlRepr;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = ControlRepr::parse(data) {
        let mut buf = vec![0u8; r.buffer_len()];
        r.emit(&mut buf);
        assert_eq!(ControlRepr::parse(&buf).as_ref(), Ok(&r));
    }
});
