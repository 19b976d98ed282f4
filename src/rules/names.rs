//! Kubernetes' name rules for the names a BSL holds: Secret names and keys (spec.credential,
//! caCertRef), plugin domains and the BSL's own name, as the API server would judge them.

use super::report::{ErrorKind, Report};
use crate::bsl::SecretKeySelector;

pub(crate) fn check_secret_ref(
    selector: &SecretKeySelector,
    path: &str,
    holds: &str,
    r: &mut Report,
) {
    match selector.name() {
        "" => r.error(
            format!("{path}.name"),
            ErrorKind::Required,
            format!("set the name of the Secret, in the BSL's namespace, that holds {holds}"),
        ),
        name => {
            if let Err(why) = dns_subdomain(name) {
                r.invalid(format!("{path}.name"), name, format!("a Secret name {why}"));
            }
        }
    }
    match selector.key.as_str() {
        "" => r.error(
            format!("{path}.key"),
            ErrorKind::Required,
            format!("set the key, within the Secret, that holds {holds}"),
        ),
        key => {
            if let Err(why) = secret_key(key) {
                r.invalid(format!("{path}.key"), key, format!("a Secret key {why}"));
            }
        }
    }
}

/// Kubernetes' IsDNS1123Subdomain, which Secret names and plugin domains must satisfy.
pub(crate) fn dns_subdomain(s: &str) -> Result<(), &'static str> {
    let label_ok = |l: &str| {
        !l.is_empty()
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    };
    if s.len() > 253 {
        Err("must be no more than 253 characters")
    } else if !s.split('.').all(label_ok) {
        Err(
            "must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
        )
    } else {
        Ok(())
    }
}

/// Kubernetes' IsConfigMapKey, which Secret keys must satisfy.
fn secret_key(s: &str) -> Result<(), &'static str> {
    if s.len() > 253 {
        Err("must be no more than 253 characters")
    } else if !s
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    {
        Err("must consist of alphanumeric characters, '-', '_' or '.'")
    } else if s == "." || s.starts_with("..") {
        Err("must not be '.' or '..', nor start with '..'")
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::super::validate;
    use crate::rules::report::ErrorKind;

    #[test]
    fn secret_ref_rules() {
        let mut s = spec("aws", "b");
        s.credential = Some(selector(Some("cloud-credentials"), "cloud"));
        s.object_storage.ca_cert_ref = Some(selector(Some("ca"), "ca.crt"));
        assert_clean(&s);

        s.credential = Some(selector(None, ""));
        s.object_storage.ca_cert_ref = Some(selector(Some(""), ""));
        let r = validate(&s);
        assert_eq!(
            paths(&r),
            [
                "spec.objectStorage.caCertRef.name",
                "spec.objectStorage.caCertRef.key",
                "spec.credential.name",
                "spec.credential.key"
            ]
        );
        assert_eq!(
            r.errors[2].to_string(),
            "spec.credential.name: Required value: set the name of the Secret, in the BSL's namespace, that holds the credentials file"
        );

        s.credential = Some(selector(Some("Bad_Name"), "a/b"));
        s.object_storage.ca_cert_ref = Some(selector(Some("ca"), ".."));
        let r = validate(&s);
        assert_eq!(
            paths(&r),
            [
                "spec.objectStorage.caCertRef.key",
                "spec.credential.name",
                "spec.credential.key"
            ]
        );
        assert!(
            r.errors
                .iter()
                .all(|e| matches!(e.kind, ErrorKind::Invalid { .. }))
        );
    }
}
