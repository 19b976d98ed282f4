//! A server certificate as `diagnose` shows it: subject, names, issuer and expiry.

use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Certificate {
    pub subject: String,
    pub issuer: String,
    /// The subject alternative names: DNS names and IP addresses.
    pub names: Vec<String>,
    /// RFC 3339.
    pub not_after: String,
}

impl Certificate {
    /// None when the DER is no certificate x509-parser reads.
    pub fn parse(der: &[u8]) -> Option<Certificate> {
        let (_, cert) = X509Certificate::from_der(der).ok()?;
        let names = cert
            .subject_alternative_name()
            .ok()
            .flatten()
            .map(|san| {
                san.value
                    .general_names
                    .iter()
                    .filter_map(|name| match name {
                        GeneralName::DNSName(dns) => Some(dns.to_string()),
                        GeneralName::IPAddress(ip) => ip_text(ip),
                        _ => None,
                    })
                    .collect()
            })
            .unwrap_or_default();
        let not_after = jiff::Timestamp::from_second(cert.validity().not_after.timestamp())
            .map(|t| t.to_string())
            .unwrap_or_else(|_| "an unreadable date".to_string());
        Some(Certificate {
            subject: cert.subject().to_string(),
            issuer: cert.issuer().to_string(),
            names,
            not_after,
        })
    }

    /// The names it is valid for (the subject when it has no SANs, as old certificates do).
    pub fn names(&self) -> Vec<String> {
        if self.names.is_empty() {
            vec![self.subject.clone()]
        } else {
            self.names.clone()
        }
    }

    pub fn lines(&self) -> Vec<String> {
        vec![
            format!("certificate subject: {}", self.subject),
            format!("certificate names (SANs): {}", self.names.join(", ")),
            format!("certificate issuer: {}", self.issuer),
            format!("certificate expires: {}", self.not_after),
        ]
    }
}

fn ip_text(bytes: &[u8]) -> Option<String> {
    match bytes.len() {
        4 => <[u8; 4]>::try_from(bytes)
            .ok()
            .map(|b| std::net::Ipv4Addr::from(b).to_string()),
        16 => <[u8; 16]>::try_from(bytes)
            .ok()
            .map(|b| std::net::Ipv6Addr::from(b).to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_addresses_read_as_text() {
        assert_eq!(ip_text(&[10, 0, 0, 5]).as_deref(), Some("10.0.0.5"));
        assert_eq!(ip_text(&[0; 16]).as_deref(), Some("::"));
        assert_eq!(ip_text(&[1, 2]), None);
        assert_eq!(Certificate::parse(b"not der"), None);
    }

    #[test]
    fn reads_subject_names_issuer_and_expiry() {
        let mut params = rcgen::CertificateParams::new(vec!["minio.internal".to_string()])
            .unwrap_or_else(|e| panic!("{e}"));
        params
            .subject_alt_names
            .push(rcgen::SanType::IpAddress([10, 0, 0, 5].into()));
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "minio.internal");
        params.not_after = rcgen::date_time_ymd(2030, 6, 1);
        let key = rcgen::KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
        let cert = params.self_signed(&key).unwrap_or_else(|e| panic!("{e}"));
        let read = Certificate::parse(cert.der()).unwrap_or_else(|| panic!("not read"));
        assert_eq!(read.subject, "CN=minio.internal");
        assert_eq!(read.issuer, "CN=minio.internal");
        assert_eq!(read.names, ["minio.internal", "10.0.0.5"]);
        assert_eq!(read.not_after, "2030-06-01T00:00:00Z");
    }
}
