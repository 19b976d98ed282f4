//! `bsl-sentinel diagnose`: why a BackupStorageLocation is unavailable, step by step, each
//! failed step with one fix in the words a user needs.
//!
//! Here the pure part: the steps, their verdicts, the fixes that errors turn into, and the
//! table and JSON renderings. The I/O ([`run`]) makes the probe's own connections one step at a
//! time ([`crate::storage`]) and ends with the reconciler's very check, so a diagnose that
//! passes is a check that passes.

mod certificate;
pub mod run;

use std::fmt;
use std::io;
use std::time::Duration;

use serde::Serialize;

pub use certificate::Certificate;

use crate::provider::Provider;
use crate::storage::FailureReason;

/// The steps, in the order they run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Check {
    Spec,
    Credentials,
    Endpoint,
    Dns,
    Tcp,
    Tls,
    Authentication,
    Bucket,
    Layout,
}

impl Check {
    pub const ALL: [Check; 9] = [
        Check::Spec,
        Check::Credentials,
        Check::Endpoint,
        Check::Dns,
        Check::Tcp,
        Check::Tls,
        Check::Authentication,
        Check::Bucket,
        Check::Layout,
    ];

    pub fn number(self) -> usize {
        Check::ALL
            .iter()
            .position(|c| *c == self)
            .unwrap_or_default()
            + 1
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Check::Spec => "spec",
            Check::Credentials => "credentials",
            Check::Endpoint => "endpoint",
            Check::Dns => "dns",
            Check::Tcp => "tcp",
            Check::Tls => "tls",
            Check::Authentication => "authentication",
            Check::Bucket => "bucket",
            Check::Layout => "layout",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Ok,
    Failed,
    Skipped,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verdict::Ok => "ok",
            Verdict::Failed => "failed",
            Verdict::Skipped => "skipped",
        })
    }
}

/// One step's result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Step {
    pub step: Check,
    pub verdict: Verdict,
    pub duration_ms: u64,
    /// What was found, one line each; never a secret.
    pub details: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Step {
    pub fn ok(step: Check, took: Duration, details: Vec<String>) -> Step {
        Step {
            step,
            verdict: Verdict::Ok,
            duration_ms: millis(took),
            details,
            fix: None,
        }
    }

    pub fn failed(step: Check, took: Duration, failure: Failure) -> Step {
        let mut details = failure.found;
        details.insert(0, failure.what);
        Step {
            step,
            verdict: Verdict::Failed,
            duration_ms: millis(took),
            details,
            fix: Some(failure.fix),
        }
    }

    pub fn skipped(step: Check, why: &str) -> Step {
        Step {
            step,
            verdict: Verdict::Skipped,
            duration_ms: 0,
            details: vec![why.to_string()],
            fix: None,
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// What went wrong in a step and the one fix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub what: String,
    /// Further lines of what was found (a certificate's names, directories).
    pub found: Vec<String>,
    pub fix: String,
}

impl Failure {
    pub fn new(what: impl Into<String>, fix: impl Into<String>) -> Failure {
        Failure {
            what: what.into(),
            found: Vec::new(),
            fix: fix.into(),
        }
    }

    pub fn with(mut self, found: Vec<String>) -> Failure {
        self.found = found;
        self
    }
}

/// The whole diagnosis of one location.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Report {
    /// "namespace/name", or the file and the name in it.
    pub location: String,
    /// Every step ok: the reconciler's check passes too.
    pub available: bool,
    pub steps: Vec<Step>,
}

impl Report {
    /// The steps so far, the rest skipped after the first failure.
    pub fn new(location: String, mut steps: Vec<Step>) -> Report {
        let stopped = steps
            .iter()
            .find(|s| s.verdict != Verdict::Ok)
            .map(|s| s.step);
        for check in Check::ALL.iter().skip(steps.len()) {
            let why = match stopped {
                Some(at) => format!(
                    "not run: step {} ({}) did not pass",
                    at.number(),
                    at.as_str()
                ),
                None => "not run".to_string(),
            };
            steps.push(Step::skipped(*check, &why));
        }
        let available = steps.iter().all(|s| s.verdict == Verdict::Ok);
        Report {
            location,
            available,
            steps,
        }
    }

    /// 0 when every step passes, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        u8::from(!self.available)
    }

    /// The readable rendering: one line a step, its findings and fix indented under it.
    pub fn table(&self) -> String {
        let mut out = format!("BackupStorageLocation {}\n", self.location);
        out.push_str(&format!(
            "{:<4} {:<15} {:<8} {:>7}  DETAILS\n",
            "STEP", "CHECK", "VERDICT", "TIME"
        ));
        let pad = " ".repeat(4 + 1 + 15 + 1 + 8 + 1 + 7 + 2);
        for step in &self.steps {
            let mut details = step.details.iter();
            out.push_str(&format!(
                "{:<4} {:<15} {:<8} {:>7}  {}\n",
                step.step.number(),
                step.step.as_str(),
                step.verdict.to_string(),
                format!("{}ms", step.duration_ms),
                details.next().map(String::as_str).unwrap_or_default()
            ));
            for line in details {
                out.push_str(&format!("{pad}{line}\n"));
            }
            if let Some(fix) = &step.fix {
                out.push_str(&format!("{pad}fix: {fix}\n"));
            }
        }
        match self.steps.iter().find(|s| s.verdict != Verdict::Ok) {
            None => out.push_str("result: available, every step passed\n"),
            Some(s) => out.push_str(&format!(
                "result: unavailable, step {} ({}) {}\n",
                s.step.number(),
                s.step.as_str(),
                s.verdict
            )),
        }
        out
    }
}

/// The config key that names a provider's endpoint, for fixes.
pub fn url_key(provider: Provider) -> &'static str {
    match provider {
        Provider::Aws => "config.s3Url",
        Provider::Gcp => "config.storeEndpoint",
        Provider::Azure => "config.storageAccountURI",
    }
}

/// A name that does not resolve. `bucket_host`: the bucket went into the host name
/// (virtual-hosted S3), which only the aws plugin does.
pub fn dns_failure(host: &str, error: &str, key: &str, bucket_host: bool) -> Failure {
    let what = format!("{host} does not resolve: {error}");
    let fix = if bucket_host {
        format!(
            "the bucket is put in the host name (virtual-hosted style) and {host} has no DNS \
             record: set config.s3ForcePathStyle: \"true\", or add the DNS record"
        )
    } else {
        format!(
            "{host} is not a name this machine's DNS knows: correct the host in {key}, or add \
             the name to DNS"
        )
    };
    Failure::new(what, fix)
}

/// A TCP connect (or proxy tunnel) that failed with an error.
pub fn connect_failure(error: &io::Error, target: &str, proxy: Option<&str>, key: &str) -> Failure {
    let message = error.to_string();
    if let Some(proxy) = proxy {
        return Failure::new(
            format!("through proxy {proxy}: {message}"),
            format!(
                "the proxy from the environment does not reach {target}: fix HTTPS_PROXY/HTTP_PROXY \
                 (address, credentials), or add the storage host to NO_PROXY"
            ),
        );
    }
    match error.kind() {
        io::ErrorKind::ConnectionRefused => Failure::new(
            format!("connection refused by {target}: nothing listens on that port"),
            format!(
                "start the storage server, or correct the port in {key} (nothing listens on {target})"
            ),
        ),
        io::ErrorKind::HostUnreachable | io::ErrorKind::NetworkUnreachable => Failure::new(
            format!("{target} is unreachable: {message}"),
            format!(
                "there is no route from here to {target}: check the address in {key} and the network between"
            ),
        ),
        _ => Failure::new(
            format!("cannot connect to {target}: {message}"),
            format!("check the address in {key} and that the storage server accepts connections"),
        ),
    }
}

/// A step that did not finish within the check timeout.
pub fn timeout_failure(doing: &str, timeout: &str, target: &str) -> Failure {
    Failure::new(
        format!("timed out after {timeout} {doing}"),
        format!(
            "{target} does not answer: a firewall or network policy dropping the packets, a \
             blackholed route, or a hung server; allow the traffic, or fix the address (the \
             reconciler gives up after --check-timeout too)"
        ),
    )
}

/// A TLS handshake that failed. `cert`: the server's certificate, as read by a second,
/// unverified handshake; `ca`: whether caCert/caCertRef adds a CA.
pub fn tls_failure(error: &io::Error, host: &str, cert: Option<&Certificate>, ca: bool) -> Failure {
    use rustls::CertificateError as E;
    let rustls_error = error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>());
    let found = cert.map(Certificate::lines).unwrap_or_default();
    let names = cert.map_or_else(|| "other names".to_string(), |c| c.names().join(", "));
    let certificate = match rustls_error {
        Some(rustls::Error::InvalidCertificate(e)) => Some(e),
        _ => None,
    };
    let failure = match certificate {
        Some(E::NotValidForName | E::NotValidForNameContext { .. }) => {
            let ip = host.parse::<std::net::IpAddr>().is_ok();
            let fix = if ip {
                format!(
                    "the certificate is valid for {names}, not for {host}: use the DNS name in the \
                     endpoint URL or add the IP to the certificate"
                )
            } else {
                format!(
                    "the certificate is valid for {names}, not for {host}: use one of those names \
                     in the endpoint URL or add {host} to the certificate"
                )
            };
            Failure::new(
                format!("the certificate's names do not include {host}: it is valid for {names}"),
                fix,
            )
        }
        Some(E::Expired | E::ExpiredContext { .. }) => {
            let when = cert.map_or_else(String::new, |c| format!(" on {}", c.not_after));
            Failure::new(
                format!("the server's certificate expired{when}"),
                format!("renew the storage server's certificate for {host} (it expired{when})"),
            )
        }
        Some(E::NotValidYet | E::NotValidYetContext { .. }) => Failure::new(
            "the server's certificate is not valid yet",
            "check the clock of this machine and of the storage server, or reissue the certificate",
        ),
        Some(E::UnknownIssuer | E::BadSignature) => {
            let issuer = cert.map_or_else(|| "its issuer".to_string(), |c| c.issuer.clone());
            if ca {
                Failure::new(
                    format!(
                        "the certificate is issued by {issuer}, which neither the system roots nor the configured caCert trust"
                    ),
                    format!(
                        "put the certificate of the CA \"{issuer}\" in objectStorage.caCert (or the Secret caCertRef names): the one configured is another CA"
                    ),
                )
            } else {
                Failure::new(
                    format!(
                        "the certificate is issued by {issuer}, which the system roots do not trust"
                    ),
                    format!(
                        "put the certificate of the CA \"{issuer}\" in objectStorage.caCert (base64 PEM) or in a Secret named by objectStorage.caCertRef"
                    ),
                )
            }
        }
        Some(other) => Failure::new(
            format!("the server's certificate was refused: {other:?}"),
            format!(
                "reissue the storage server's certificate for {host}, or trust its CA with caCert"
            ),
        ),
        None => match rustls_error {
            Some(rustls::Error::InvalidMessage(_)) => Failure::new(
                format!("the server at {host} does not speak TLS: {error}"),
                "the port serves plain http: use http:// in the endpoint URL, or the server's TLS port",
            ),
            _ => Failure::new(
                format!("the TLS handshake with {host} failed: {error}"),
                "check that the endpoint URL names the server's TLS port and that it serves TLS 1.2 or 1.3",
            ),
        },
    };
    failure.with(found)
}

/// The failed listing's step and fix, from the check's reason and (sanitized) message.
pub fn listing_failure(
    reason: FailureReason,
    message: &str,
    what: &str,
    bucket: &str,
) -> (Check, Failure) {
    let has = |code: &str| message.contains(code);
    match reason {
        FailureReason::NotFound => (
            Check::Bucket,
            Failure::new(
                message,
                format!("create the {what} \"{bucket}\", or correct objectStorage.bucket"),
            ),
        ),
        FailureReason::Layout => (
            Check::Layout,
            Failure::new(
                message,
                "the prefix holds other data than Velero's: give Velero a prefix of its own \
                 (objectStorage.prefix), or move the other directories away",
            ),
        ),
        FailureReason::Auth => {
            let fix = if has("SignatureDoesNotMatch") || has("AuthenticationFailed") {
                "the secret key does not match the key id: correct the secret in the credentials \
                 (aws_secret_access_key, the account key, or the service account key)"
            } else if has("InvalidAccessKeyId") {
                "the server does not know this access key id: correct aws_access_key_id in the \
                 credentials, or create the key on the server"
            } else if has("RequestTimeTooSkewed") {
                "the clock of this machine differs from the server's: synchronise it (NTP)"
            } else if has("AccessDenied") || has("AuthorizationFailure") || has("HTTP 403") {
                "the credentials may not list the bucket: grant them list permission on it \
                 (s3:ListBucket, storage.objects.list, or a role that reads blobs)"
            } else {
                "the server rejected the credentials: correct the key in the credential Secret"
            };
            (Check::Authentication, Failure::new(message, fix))
        }
        FailureReason::Timeout => (
            Check::Authentication,
            Failure::new(
                message,
                "the server accepted the connection but did not answer the request in time: a \
                 hung or overloaded storage server; check its health",
            ),
        ),
        _ => (
            Check::Authentication,
            Failure::new(
                message,
                "the storage server refused the request: read its message above and its logs",
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert(names: &[&str]) -> Certificate {
        Certificate {
            subject: "CN=minio.internal".into(),
            issuer: "CN=Corp CA".into(),
            names: names.iter().map(|n| n.to_string()).collect(),
            not_after: "2020-01-01T00:00:00Z".into(),
        }
    }

    fn rustls_io(e: rustls::CertificateError) -> io::Error {
        io::Error::new(
            io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(e),
        )
    }

    #[test]
    fn name_mismatch_names_both_names() {
        let c = cert(&["minio.internal"]);
        let f = tls_failure(
            &rustls_io(rustls::CertificateError::NotValidForName),
            "10.0.0.5",
            Some(&c),
            false,
        );
        assert_eq!(
            f.fix,
            "the certificate is valid for minio.internal, not for 10.0.0.5: use the DNS name in \
             the endpoint URL or add the IP to the certificate"
        );
        assert!(
            f.found.iter().any(|l| l.contains("CN=Corp CA")),
            "{:?}",
            f.found
        );
    }

    #[test]
    fn expired_and_untrusted_are_named_as_such() {
        let c = cert(&["localhost"]);
        let f = tls_failure(
            &rustls_io(rustls::CertificateError::Expired),
            "localhost",
            Some(&c),
            false,
        );
        assert!(f.what.contains("expired on 2020-01-01"), "{}", f.what);
        let f = tls_failure(
            &rustls_io(rustls::CertificateError::UnknownIssuer),
            "localhost",
            Some(&c),
            false,
        );
        assert!(f.fix.contains("objectStorage.caCert"), "{}", f.fix);
        assert!(f.fix.contains("CN=Corp CA"), "{}", f.fix);
        let f = tls_failure(
            &rustls_io(rustls::CertificateError::UnknownIssuer),
            "localhost",
            Some(&c),
            true,
        );
        assert!(f.fix.contains("is another CA"), "{}", f.fix);
    }

    #[test]
    fn plain_http_on_a_tls_url() {
        let e = io::Error::new(
            io::ErrorKind::InvalidData,
            rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType),
        );
        assert!(
            tls_failure(&e, "h", None, false)
                .fix
                .contains("use http://")
        );
    }

    #[test]
    fn connect_failures_tell_refused_from_unreachable() {
        let refused = io::Error::from(io::ErrorKind::ConnectionRefused);
        let f = connect_failure(&refused, "127.0.0.1:9", None, "config.s3Url");
        assert!(f.what.starts_with("connection refused"), "{}", f.what);
        assert!(f.fix.contains("config.s3Url"));
        let unreachable = io::Error::from(io::ErrorKind::HostUnreachable);
        assert!(
            connect_failure(&unreachable, "10.1.1.1:9000", None, "k")
                .what
                .contains("unreachable")
        );
        let via = connect_failure(&refused, "h:1", Some("http://proxy:3128"), "k");
        assert!(via.fix.contains("NO_PROXY"), "{}", via.fix);
    }

    #[test]
    fn virtual_hosted_names_suggest_path_style() {
        assert!(
            dns_failure("b.minio", "no such host", "config.s3Url", true)
                .fix
                .contains("s3ForcePathStyle")
        );
        assert!(
            dns_failure("minio", "no such host", "config.s3Url", false)
                .fix
                .contains("correct the host in config.s3Url")
        );
    }

    #[test]
    fn listing_failures_land_on_their_step() {
        let (step, f) = listing_failure(
            FailureReason::Auth,
            "authentication failed: (HTTP 403, SignatureDoesNotMatch)",
            "bucket",
            "b",
        );
        assert_eq!(step, Check::Authentication);
        assert!(f.fix.contains("secret key does not match"));
        let (step, _) = listing_failure(
            FailureReason::Auth,
            "(HTTP 403, RequestTimeTooSkewed)",
            "bucket",
            "b",
        );
        assert_eq!(step, Check::Authentication);
        let (step, f) = listing_failure(
            FailureReason::NotFound,
            "bucket \"b\" does not exist",
            "bucket",
            "b",
        );
        assert_eq!(
            (step, f.fix.as_str()),
            (
                Check::Bucket,
                "create the bucket \"b\", or correct objectStorage.bucket"
            )
        );
        let (step, _) = listing_failure(
            FailureReason::Layout,
            "Backup store contains invalid top-level directories: [a]",
            "bucket",
            "b",
        );
        assert_eq!(step, Check::Layout);
    }

    #[test]
    fn report_skips_after_the_first_failure_and_exits_1() {
        let steps = vec![
            Step::ok(Check::Spec, Duration::ZERO, vec!["valid".into()]),
            Step::failed(
                Check::Credentials,
                Duration::from_millis(3),
                Failure::new("Secret \"x\" not found", "create it"),
            ),
        ];
        let report = Report::new("velero/b".into(), steps);
        assert_eq!(report.steps.len(), 9);
        assert_eq!(report.steps[2].verdict, Verdict::Skipped);
        assert_eq!(report.exit_code(), 1);
        let table = report.table();
        assert!(table.contains("fix: create it"), "{table}");
        assert!(
            table.ends_with("result: unavailable, step 2 (credentials) failed\n"),
            "{table}"
        );
        let all = Check::ALL
            .iter()
            .map(|c| Step::ok(*c, Duration::ZERO, vec![]))
            .collect();
        assert_eq!(Report::new("x".into(), all).exit_code(), 0);
    }
}
