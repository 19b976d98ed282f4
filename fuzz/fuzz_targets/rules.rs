//! The rule engine on arbitrary BSL JSON, as the webhook and the reconciler meet it: every
//! document is judged without a panic, and a spec that decodes is judged the same way twice.
#![no_main]

use bsl_sentinel::bsl::BackupStorageLocationSpec;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(doc) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let _ = bsl_sentinel::rules::validate_document(&doc);
    if let Ok(spec) = serde_json::from_value::<BackupStorageLocationSpec>(doc["spec"].clone()) {
        let first = bsl_sentinel::rules::validate(&spec);
        let again = bsl_sentinel::rules::validate(&spec);
        assert_eq!(first.errors.len(), again.errors.len());
    }
});
