//! Any HTTP body sent to /validate or /mutate: decoded, then judged by both webhooks on both
//! CRDs. Neither may panic, and an answer always carries the request's uid. The webhook reads
//! the spec typed where it fits and as JSON where not; either way the rules must judge the
//! object as the CLI judges the same object read as JSON.
#![no_main]

use bsl_sentinel::admission::{self, ClusterView};
use bsl_sentinel::rules;
use bsl_sentinel::served_crd::ServedCrd;
use libfuzzer_sys::fuzz_target;

struct Cluster;

impl ClusterView for Cluster {
    fn defaults(&self, _: &str) -> Option<Vec<String>> {
        Some(vec!["primary".into()])
    }
    fn secret_exists(&self, _: &str, name: &str) -> Option<bool> {
        Some(name == "cloud-credentials")
    }
}

fuzz_target!(|body: &[u8]| {
    let Ok(request) = bsl_sentinel::review::decode(body) else {
        return;
    };
    let answer = admission::validate(&request, &Cluster);
    assert_eq!(answer.uid, request.uid);
    if let Some(object) = &request.object
        && let Ok(review) = serde_json::from_slice::<serde_json::Value>(body)
    {
        assert_eq!(
            rules::validate_parts(&object.head(), &object.spec),
            rules::validate_document(&review["request"]["object"])
        );
    }
    for served in [
        ServedCrd::default(),
        ServedCrd {
            unknown_phase_allowed: true,
            status_subresource: false,
        },
    ] {
        let answer = admission::mutate(&request, served);
        assert_eq!(answer.uid, request.uid);
    }
});
