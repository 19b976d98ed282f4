//! Go's ParseDuration on any text: an error or a duration whose printed form parses back to
//! the same value.
#![no_main]

use bsl_sentinel::duration::GoDuration;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(d) = GoDuration::parse(text) {
        let printed = d.to_string();
        assert_eq!(
            GoDuration::parse(&printed).ok(),
            Some(d),
            "{text:?} printed {printed:?}"
        );
    }
});
