//! `bsl-sentinel validate -f` on any text: YAML or JSON, many documents, deep nesting,
//! aliases, huge scalars, duplicate keys. It reports, it never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = bsl_sentinel::lint::lint("fuzz.yaml", text);
    }
});
