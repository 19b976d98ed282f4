//! The storage message sanitizer on any text and secret: the result is one bounded line that
//! never contains the secret.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: (&str, &str)| {
    let (message, secret) = data;
    let secrets = [secret.to_string()];
    let out = bsl_sentinel::storage::sanitize(message, &secrets);
    assert!(out.chars().count() <= bsl_sentinel::storage::MAX_MESSAGE);
    assert!(!out.contains('\n'));
    // A secret made of the placeholder itself is no test of redaction.
    let secret = secret.split_whitespace().collect::<Vec<_>>().join(" ");
    if secret.len() >= 8 && !secret.contains("REDACTED") && !secret.contains(['<', '{']) {
        assert!(!out.contains(&secret), "{secret:?} leaked in {out:?}");
    }
});
