//! The inline caCert: a PEM bundle Velero hands to the plugin, which trusts every certificate
//! block Go can parse and skips the rest.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use super::report::Report;

pub(crate) const PEM_BEGIN: &str = "-----BEGIN CERTIFICATE-----";

pub(crate) fn check_ca_cert(pem: &[u8], r: &mut Report) {
    const PATH: &str = "spec.objectStorage.caCert";
    // Velero hands an empty caCert to the plugin, which ignores it.
    if pem.is_empty() {
        r.warn(PATH, "is empty and has no effect; remove it");
        return;
    }
    r.warn(
        PATH,
        "inline caCert is deprecated; prefer caCertRef to a Secret holding the CA bundle",
    );
    let text = String::from_utf8_lossy(pem);
    let (good, bad) = scan_pem(pem);
    if good == 0 {
        let twice = base64_decode(&text).is_some_and(|d| {
            d.windows(PEM_BEGIN.len())
                .any(|w| w == PEM_BEGIN.as_bytes())
        });
        let detail = if twice {
            "the PEM bundle is base64-encoded twice; encode it once"
        } else {
            "must be a PEM bundle with at least one valid -----BEGIN CERTIFICATE----- block"
        };
        r.invalid(PATH, &text, detail);
    } else if bad > 0 {
        // Go skips blocks it cannot parse, so the good certificates still work.
        r.warn(
            PATH,
            format_args!("{bad} malformed certificate block(s) will be ignored"),
        );
    }
}

/// Counts well-formed and malformed CERTIFICATE blocks, read as Go's pem.Decode reads them
/// (blocks of other types are skipped). Structural only: base64 that decodes to one complete
/// DER SEQUENCE, which is what every X.509 certificate is.
fn scan_pem(pem: &[u8]) -> (usize, usize) {
    CertificateDer::pem_slice_iter(pem).fold((0, 0), |(good, bad), block| match block {
        Ok(der) if is_der_sequence(&der) => (good + 1, bad),
        _ => (good, bad + 1),
    })
}

fn is_der_sequence(der: &[u8]) -> bool {
    let [0x30, first, rest @ ..] = der else {
        return false;
    };
    let (len, content) = if first & 0x80 == 0 {
        (usize::from(*first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return false;
        }
        let (len, content) = rest.split_at(n);
        let len = len.iter().fold(0usize, |acc, b| acc << 8 | usize::from(*b));
        (len, content)
    };
    len == content.len()
}

/// Standard base64 with padding, whitespace ignored, as `base64` wraps its output.
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let chars: Vec<u8> = text.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    STANDARD.decode(chars).ok().filter(|d| !d.is_empty())
}

#[cfg(test)]
mod tests {
    use k8s_openapi::ByteString;
    use serde_json::Value;

    use super::super::testing::*;
    use super::super::validate;
    use super::*;
    use crate::bsl::BackupStorageLocationSpec;

    fn with_ca(pem: &[u8]) -> BackupStorageLocationSpec {
        let mut s = spec("aws", "b");
        s.object_storage.ca_cert = Some(ByteString(pem.to_vec()));
        s
    }

    const DEPRECATED: &str = "spec.objectStorage.caCert: inline caCert is deprecated; prefer caCertRef to a Secret holding the CA bundle";

    #[test]
    fn ca_cert_rules() {
        let pem = cert_pem();
        let r = validate(&with_ca(pem.as_bytes()));
        assert!(r.errors.is_empty(), "{r:?}");
        assert_eq!(r.warnings, [DEPRECATED]);

        let r = validate(&with_ca(b"not a certificate"));
        assert_eq!(
            messages(&r),
            [
                r#"spec.objectStorage.caCert: Invalid value: "not a certificate": must be a PEM bundle with at least one valid -----BEGIN CERTIFICATE----- block"#
            ]
        );

        let broken = format!("{PEM_BEGIN}\nMIIB!!!\n{PEM_END}\n");
        assert_eq!(
            paths(&validate(&with_ca(broken.as_bytes()))),
            ["spec.objectStorage.caCert"]
        );
        // A PEM key block is not a certificate.
        let key = "-----BEGIN PRIVATE KEY-----\nMAA=\n-----END PRIVATE KEY-----\n";
        assert_eq!(
            paths(&validate(&with_ca(key.as_bytes()))),
            ["spec.objectStorage.caCert"]
        );

        let r = validate(&with_ca(format!("{pem}{broken}").as_bytes()));
        assert!(r.errors.is_empty());
        assert_eq!(
            r.warnings[1],
            "spec.objectStorage.caCert: 1 malformed certificate block(s) will be ignored"
        );

        let twice = ByteString(pem.into_bytes());
        let encoded = serde_json::to_value(&twice).ok();
        let text = encoded.as_ref().and_then(Value::as_str).unwrap_or_default();
        let r = validate(&with_ca(text.as_bytes()));
        assert!(r.errors[0].detail.contains("base64-encoded twice"), "{r:?}");

        let r = validate(&with_ca(b""));
        assert!(r.errors.is_empty());
        assert_eq!(
            r.warnings,
            ["spec.objectStorage.caCert: is empty and has no effect; remove it"]
        );
    }

    #[test]
    fn blocks_are_read_as_go_reads_them() {
        let pem = cert_pem();
        let key = "-----BEGIN PRIVATE KEY-----\nMAA=\n-----END PRIVATE KEY-----\n";
        let broken = format!("{PEM_BEGIN}\nMIIB!!!\n{PEM_END}\n");
        let not_der = format!("{PEM_BEGIN}\nTWFu\n{PEM_END}\n");
        assert_eq!(scan_pem(format!("{key}{pem}{pem}").as_bytes()), (2, 0));
        assert_eq!(
            scan_pem(format!("{pem}{broken}{not_der}").as_bytes()),
            (1, 2)
        );
        assert_eq!(
            scan_pem(format!("{pem}{PEM_BEGIN}\nMIIB").as_bytes()),
            (1, 1)
        );
        assert_eq!(scan_pem(b"no blocks at all"), (0, 0));
    }

    #[test]
    fn der_length_must_match() {
        assert!(is_der_sequence(&[0x30, 0x01, 0x00]));
        assert!(is_der_sequence(&[0x30, 0x81, 0x01, 0x00]));
        assert!(!is_der_sequence(&[0x30, 0x02, 0x00]));
        assert!(!is_der_sequence(&[0x31, 0x01, 0x00]));
        assert!(!is_der_sequence(&[0x30, 0x80]));
        assert!(!is_der_sequence(&[0x30]));
        assert_eq!(base64_decode("TWFu"), Some(b"Man".to_vec()));
        assert_eq!(base64_decode("TW E=\n"), Some(b"Ma".to_vec()));
        assert_eq!(base64_decode("TQ=="), Some(b"M".to_vec()));
        assert_eq!(base64_decode("TQ="), None);
        assert_eq!(base64_decode("T=Q="), None);
    }

    #[test]
    fn ca_cert_and_ref_are_exclusive() {
        let mut s = with_ca(cert_pem().as_bytes());
        s.object_storage.ca_cert_ref = Some(selector(Some("ca"), "ca.crt"));
        let r = validate(&s);
        assert_eq!(
            messages(&r),
            [
                "spec.objectStorage: Forbidden: cannot specify both caCert and caCertRef in objectStorage; remove caCert and keep caCertRef"
            ]
        );
    }
}
