//! Block-FEC data packets and reports: whatever parses re-emits to bytes
//! that parse back to the same value.
#![no_main]

use groupwire_proto::wire::block::{DataRepr, REPORT_LEN, ReportRepr};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = DataRepr::parse(data) {
        let mut buf = vec![0u8; r.buffer_len()];
        r.emit(&mut buf);
        assert_eq!(DataRepr::parse(&buf).as_ref(), Ok(&r));
    }
    if let Ok(r) = ReportRepr::parse(data) {
        let mut buf = [0u8; REPORT_LEN];
        r.emit(&mut buf);
        assert_eq!(ReportRepr::parse(&buf), Ok(r));
    }
});
