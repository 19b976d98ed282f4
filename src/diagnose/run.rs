//! The steps' I/O: the spec through the rule engine, the Secrets as the reconciler reads them,
//! then the probe's own pieces one at a time (region lookup, proxy choice, socket, TLS
//! handshake) and last the reconciler's check itself, which makes the signed listing.

use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject};
use serde_json::Value;

use super::{
    Certificate, Check, Failure, Report, Step, connect_failure, dns_failure, listing_failure,
    timeout_failure, tls_failure, url_key,
};
use crate::bsl::{BackupStorageLocationSpec, SecretKeySelector, bsl_resource};
use crate::duration::GoDuration;
use crate::reconciler::secrets;
use crate::storage::connections::{socket, tls_config, tls_handshake};
use crate::storage::{Outcome, Probe, Route, sanitize};

/// Where the Secrets' bytes come from.
pub enum Secrets {
    /// Read from the BSL's namespace, as the reconciler reads them.
    Cluster {
        client: kube::Client,
        namespace: String,
    },
    /// `--credentials-file` and `--ca-file`, standing for the Secret keys the spec names.
    Files {
        credential: Option<Vec<u8>>,
        ca: Option<Vec<u8>>,
    },
}

/// One location to diagnose.
pub struct Input {
    /// "namespace/name", or "file: name".
    pub location: String,
    /// The BSL manifest.
    pub document: Value,
    pub secrets: Secrets,
}

/// The first BackupStorageLocation of a manifest (YAML or JSON); Err: nothing to diagnose.
pub fn document_from_text(source: &str, text: &str) -> Result<Value, String> {
    let documents: Vec<Value> = serde_saphyr::from_multiple(text).map_err(|e| {
        let e = e.to_string();
        format!(
            "{source}: cannot parse: {}",
            e.lines().next().unwrap_or_default()
        )
    })?;
    documents
        .into_iter()
        .find(|d| d["kind"] == "BackupStorageLocation")
        .ok_or_else(|| format!("{source}: no BackupStorageLocation in it"))
}

/// The BSL as the apiserver serves it; Err: it cannot be read.
pub async fn document_from_cluster(
    client: kube::Client,
    namespace: &str,
    name: &str,
) -> Result<Value, String> {
    let api: Api<DynamicObject> = Api::namespaced_with(client, namespace, &bsl_resource());
    let object = api
        .get(name)
        .await
        .map_err(|e| format!("cannot read BackupStorageLocation {namespace}/{name}: {e}"))?;
    let mut document = serde_json::to_value(&object).map_err(|e| e.to_string())?;
    // A get may leave the type out; the rules check it as a manifest's.
    document["apiVersion"] = "velero.io/v1".into();
    document["kind"] = "BackupStorageLocation".into();
    Ok(document)
}

/// Runs every step; `timeout` bounds each network step as `--check-timeout` bounds a check.
pub async fn diagnose(input: Input, probe: &Probe, timeout: Duration) -> Report {
    let mut steps = Vec::new();
    let mut secrets = Vec::new();
    run(&input, probe, timeout, &mut steps, &mut secrets).await;
    // Nothing a step found is shown with a secret in it, whatever it quotes.
    for step in &mut steps {
        for line in &mut step.details {
            *line = sanitize(line, &secrets);
        }
        if let Some(fix) = &mut step.fix {
            *fix = sanitize(fix, &secrets);
        }
    }
    Report::new(input.location, steps)
}

/// Records a step's result; Some(value) when it passed and the next step may run.
fn record<T>(
    steps: &mut Vec<Step>,
    check: Check,
    started: Instant,
    result: Result<(T, Vec<String>), Failure>,
) -> Option<T> {
    match result {
        Ok((value, details)) => {
            steps.push(Step::ok(check, started.elapsed(), details));
            Some(value)
        }
        Err(failure) => {
            steps.push(Step::failed(check, started.elapsed(), failure));
            None
        }
    }
}

async fn run(
    input: &Input,
    probe: &Probe,
    timeout: Duration,
    steps: &mut Vec<Step>,
    redacted: &mut Vec<String>,
) -> Option<()> {
    let waited = GoDuration::from_std(timeout).to_string();

    // 1. The spec against the rules.
    let started = Instant::now();
    let spec = record(steps, Check::Spec, started, spec_step(&input.document))?;

    // 2. The credentials: the Secrets exist and parse as the provider expects.
    let started = Instant::now();
    let (credential, ca, details) = match read_secrets(&input.secrets, &spec).await {
        Ok(read) => read,
        Err(failure) => {
            steps.push(Step::failed(Check::Credentials, started.elapsed(), failure));
            return None;
        }
    };
    let (credential, ca) = (credential.as_deref(), ca.as_deref());
    match probe.route(&spec, credential, ca) {
        Ok(route) => {
            redacted.extend(route.secrets());
            let mut details = details;
            details.push(format!(
                "read as the {} plugin reads it",
                route.provider().plugin_name()
            ));
            steps.push(Step::ok(Check::Credentials, started.elapsed(), details));
        }
        Err(outcome) => {
            not_checked(
                steps,
                Check::Credentials,
                started,
                outcome,
                credentials_fix(&spec),
            );
            return None;
        }
    }

    // 3. The endpoint: region, URL, proxy.
    let started = Instant::now();
    let (route, uri, proxy) = record(
        steps,
        Check::Endpoint,
        started,
        endpoint_step(probe, &spec, credential, ca, &waited, timeout).await,
    )?;
    let key = url_key(route.provider());
    let https = uri.scheme_str() == Some("https");
    let host = uri
        .host()
        .unwrap_or_default()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
    let target = crate::proxy::authority(&host, port);

    // 4. DNS of the host the socket goes to: the proxy's when one is used.
    let started = Instant::now();
    let (dns_host, dns_port) = proxy
        .as_ref()
        .map_or((host.as_str(), port), |p| (p.host(), p.port()));
    let bucket_host = route.provider() == crate::provider::Provider::Aws
        && proxy.is_none()
        && host.starts_with(&format!(
            "{}.",
            spec.object_storage.bucket.trim_matches('/')
        ));
    let dns = async {
        if dns_host.parse::<std::net::IpAddr>().is_ok() {
            return Ok((
                (),
                vec![format!("{dns_host} is an IP address: nothing to resolve")],
            ));
        }
        let mut details = Vec::new();
        if let Some(p) = &proxy {
            details.push(format!(
                "the proxy {p} resolves {host}; resolving the proxy's host"
            ));
        }
        match tokio::time::timeout(timeout, tokio::net::lookup_host((dns_host, dns_port))).await {
            Err(_) => Err(timeout_failure(
                &format!("resolving {dns_host}"),
                &waited,
                dns_host,
            )),
            Ok(Err(e)) => Err(dns_failure(dns_host, &e.to_string(), key, bucket_host)),
            Ok(Ok(addresses)) => {
                let found: Vec<String> = addresses.map(|a| a.ip().to_string()).collect();
                details.push(format!("{dns_host} resolves to {}", found.join(", ")));
                Ok(((), details))
            }
        }
    };
    record(steps, Check::Dns, started, dns.await)?;

    // 5. TCP connect (and the proxy's tunnel), as the checks' connections make it.
    let started = Instant::now();
    let proxy_text = proxy.as_ref().map(ToString::to_string);
    let tcp = match tokio::time::timeout(timeout, socket(https, &host, port, proxy.as_ref())).await
    {
        Err(_) => {
            let to = proxy_text.clone().unwrap_or_else(|| target.clone());
            Err(timeout_failure(
                &format!("connecting to {to}"),
                &waited,
                &to,
            ))
        }
        Ok(Err(e)) => Err(connect_failure(&e, &target, proxy_text.as_deref(), key)),
        Ok(Ok(tcp)) => {
            let peer = tcp.peer_addr().map(|a| a.to_string()).unwrap_or_default();
            let line = match &proxy_text {
                Some(p) if https => {
                    format!("connected to proxy {p} ({peer}); tunnel to {target} open")
                }
                Some(p) => format!("connected to proxy {p} ({peer}); http requests go through it"),
                None if peer == target => format!("connected to {target}"),
                None => format!("connected to {target} ({peer})"),
            };
            Ok((tcp, vec![line]))
        }
    };
    let tcp = record(steps, Check::Tcp, started, tcp)?;

    // 6. TLS.
    let started = Instant::now();
    let tls = if https {
        tls_step(
            probe,
            &route,
            tcp,
            &host,
            port,
            proxy.as_ref(),
            timeout,
            &waited,
        )
        .await
    } else {
        drop(tcp);
        Ok(((), vec!["plain http: no TLS (the credentials' signatures and the data cross the network unencrypted)".to_string()]))
    };
    record(steps, Check::Tls, started, tls)?;

    // 7-9. The reconciler's check: one signed listing under the prefix, and Velero's layout rule.
    let started = Instant::now();
    let (outcome, dirs) = probe.check_listing(&spec, credential, ca).await;
    let took = started.elapsed();
    let location = route.location();
    let what = route.provider().container_word();
    let bucket = spec.object_storage.bucket.trim_matches('/');
    let signed = format!("signed listing of {location} accepted");
    let exists = format!("{what} \"{bucket}\" exists; {location} can be listed");
    let found = |dirs: &Option<Vec<String>>| match dirs.as_deref() {
        None | Some([]) => format!("no top-level directories under {location} (empty)"),
        Some(dirs) => format!(
            "top-level directories under {location}: {}",
            dirs.join(", ")
        ),
    };
    match outcome {
        Outcome::Available => {
            steps.push(Step::ok(Check::Authentication, took, vec![signed]));
            steps.push(Step::ok(Check::Bucket, Duration::ZERO, vec![exists]));
            steps.push(Step::ok(
                Check::Layout,
                Duration::ZERO,
                vec![found(&dirs), "all are Velero's".to_string()],
            ));
        }
        Outcome::Unavailable { reason, message } => {
            let (check, failure) = listing_failure(reason, &message, what, bucket);
            match check {
                Check::Bucket => {
                    steps.push(Step::ok(
                        Check::Authentication,
                        took,
                        vec![format!("the server accepted the signed request")],
                    ));
                    steps.push(Step::failed(Check::Bucket, Duration::ZERO, failure));
                }
                Check::Layout => {
                    steps.push(Step::ok(Check::Authentication, took, vec![signed]));
                    steps.push(Step::ok(Check::Bucket, Duration::ZERO, vec![exists]));
                    let mut lines = vec![found(&dirs)];
                    lines.extend(foreign(&dirs));
                    steps.push(Step::failed(
                        Check::Layout,
                        Duration::ZERO,
                        failure.with(lines),
                    ));
                }
                _ => steps.push(Step::failed(Check::Authentication, took, failure)),
            }
        }
        Outcome::Unchecked { message } => {
            steps.push(Step::skipped(Check::Authentication, &message))
        }
    }
    Some(())
}

/// The directories that are not Velero's, as a line.
fn foreign(dirs: &Option<Vec<String>>) -> Option<String> {
    const VELERO: [&str; 6] = [
        "backups", "restores", "restic", "metadata", "plugins", "kopia",
    ];
    let others: Vec<&str> = dirs
        .iter()
        .flatten()
        .map(String::as_str)
        .filter(|d| !VELERO.contains(d))
        .collect();
    (!others.is_empty()).then(|| format!("not Velero's: {}", others.join(", ")))
}

/// A route the probe refuses: a spec or credentials that cannot work (failed), or one
/// bsl-sentinel cannot check (skipped: Velero's own validation decides).
fn not_checked(
    steps: &mut Vec<Step>,
    check: Check,
    started: Instant,
    outcome: Outcome,
    fix: String,
) {
    match outcome {
        Outcome::Unchecked { message } => steps.push(Step::skipped(check, &message)),
        Outcome::Unavailable { message, .. } => steps.push(Step::failed(
            check,
            started.elapsed(),
            Failure::new(message, fix),
        )),
        Outcome::Available => steps.push(Step::ok(check, started.elapsed(), Vec::new())),
    }
}

fn credentials_fix(spec: &BackupStorageLocationSpec) -> String {
    match crate::provider::known_provider(&spec.provider) {
        Some(crate::provider::Provider::Aws) => "the credentials must be an AWS shared credentials file ([default] or the config.profile section, with aws_access_key_id and aws_secret_access_key)".into(),
        Some(crate::provider::Provider::Gcp) => "the credentials must be a Google service account key (JSON)".into(),
        Some(crate::provider::Provider::Azure) => "the credentials must be the azure plugin's env file (AZURE_STORAGE_ACCOUNT_ACCESS_KEY=..., or the variable the config names)".into(),
        None => "correct the credentials".into(),
    }
}

fn spec_step(document: &Value) -> Result<(BackupStorageLocationSpec, Vec<String>), Failure> {
    let report = crate::rules::validate_document(document);
    let warnings = report.warnings.iter().map(|w| format!("warning: {w}"));
    if !report.errors.is_empty() {
        let mut lines: Vec<String> = report.errors.iter().map(ToString::to_string).collect();
        lines.extend(warnings);
        let first = lines.remove(0);
        return Err(Failure::new(first, "correct the fields named above (`bsl-sentinel validate -f` and the webhook say the same)").with(lines));
    }
    let spec: BackupStorageLocationSpec = serde_json::from_value(document["spec"].clone())
        .map_err(|e| {
            Failure::new(
                format!("the spec cannot be read: {e}"),
                "correct the spec's field types",
            )
        })?;
    let mut details = vec!["valid: no field errors".to_string()];
    details.extend(warnings);
    Ok((spec, details))
}

/// The bytes of the credential and caCertRef keys, and what was read.
async fn read_secrets(
    source: &Secrets,
    spec: &BackupStorageLocationSpec,
) -> Result<(Option<Vec<u8>>, Option<Vec<u8>>, Vec<String>), Failure> {
    let mut details = Vec::new();
    let selectors = [
        ("spec.credential", spec.credential.as_ref()),
        (
            "spec.objectStorage.caCertRef",
            spec.object_storage.ca_cert_ref.as_ref(),
        ),
    ];
    let mut read = Vec::new();
    for (i, (field, selector)) in selectors.into_iter().enumerate() {
        let bytes = match source {
            Secrets::Cluster { client, namespace } => match selector {
                None => None,
                Some(s) => {
                    let secret = secrets::read(client, namespace, s.name()).await.map_err(|m| Failure::new(m, "check that this kubeconfig's user may get Secrets in the BSL's namespace"))?;
                    let bytes = secrets::key_of(secret.as_ref(), namespace, s.name(), &s.key)
                        .map_err(|m| {
                            Failure::new(m, missing_fix(field, s, namespace, secret.is_some()))
                        })?;
                    details.push(format!(
                        "{field}: Secret {namespace}/{} key {:?} found ({} bytes)",
                        s.name(),
                        s.key,
                        bytes.len()
                    ));
                    Some(bytes)
                }
            },
            Secrets::Files { credential, ca } => {
                let (file, flag) = if i == 0 {
                    (credential, "--credentials-file")
                } else {
                    (ca, "--ca-file")
                };
                match (selector, file) {
                    (Some(s), None) => {
                        return Err(Failure::new(
                            format!(
                                "{field} names Secret {:?} key {:?}, and no {flag} stands for it",
                                s.name(),
                                s.key
                            ),
                            format!("pass the Secret key's contents with {flag} FILE"),
                        ));
                    }
                    (_, Some(bytes)) => {
                        details.push(format!("{flag}: {} bytes", bytes.len()));
                        Some(bytes.clone())
                    }
                    (None, None) => None,
                }
            }
        };
        if bytes.is_none() && i == 0 {
            details.push("spec.credential: none; the plugin's default credentials apply".into());
        }
        read.push(bytes);
    }
    let ca = read.pop().flatten();
    let credential = read.pop().flatten();
    Ok((credential, ca, details))
}

fn missing_fix(field: &str, s: &SecretKeySelector, namespace: &str, exists: bool) -> String {
    let (name, key) = (s.name(), &s.key);
    if exists {
        format!("add key \"{key}\" to Secret {namespace}/{name}, or correct {field}.key")
    } else {
        format!(
            "create the Secret: kubectl -n {namespace} create secret generic {name} --from-file={key}=FILE, or correct {field}.name"
        )
    }
}

type Endpoint = (Route, hyper::Uri, Option<crate::proxy::Proxy>);

async fn endpoint_step(
    probe: &Probe,
    spec: &BackupStorageLocationSpec,
    credential: Option<&[u8]>,
    ca: Option<&[u8]>,
    waited: &str,
    timeout: Duration,
) -> Result<(Endpoint, Vec<String>), Failure> {
    let mut details = Vec::new();
    let in_region = match tokio::time::timeout(timeout, probe.in_region(spec)).await {
        Err(_) => {
            return Err(timeout_failure(
                "looking up the bucket's region",
                waited,
                "the region lookup service",
            ));
        }
        Ok(Err(Outcome::Unavailable { reason, message })) => {
            let bucket = spec.object_storage.bucket.trim_matches('/');
            let (_, failure) = listing_failure(reason, &message, "bucket", bucket);
            return Err(failure);
        }
        Ok(Err(other)) => return Err(Failure::new(format!("{other:?}"), "set config.region")),
        Ok(Ok(in_region)) => in_region,
    };
    if let std::borrow::Cow::Owned(s) = &in_region {
        let region = s
            .config
            .as_ref()
            .and_then(|c| c.get("region"))
            .cloned()
            .unwrap_or_default();
        details.push(format!(
            "region: {region}, looked up (neither config.region nor config.s3Url is set)"
        ));
    }
    let route = probe
        .route(&in_region, credential, ca)
        .map_err(|o| Failure::new(format!("{o:?}"), "correct the endpoint in the config"))?;
    let uri: hyper::Uri = route.url().parse().map_err(|e| {
        Failure::new(
            format!("the URL {} cannot be used: {e}", route.url()),
            format!("correct {}", url_key(route.provider())),
        )
    })?;
    details.push(format!("endpoint: {}", route.endpoint()));
    details.push(format!("requests go to {}", route.url()));
    let proxy = probe.proxy_for(&uri);
    let var = if uri.scheme_str() == Some("https") {
        "HTTPS_PROXY"
    } else {
        "HTTP_PROXY"
    };
    details.push(match &proxy {
        Some(p) => format!("proxy: {p} (from {var})"),
        None => "proxy: none (direct)".to_string(),
    });
    if uri.scheme_str() == Some("https") {
        details.push(match (route.insecure(), route.has_ca()) {
            (true, _) => "TLS: certificates not verified (insecureSkipTLSVerify)".to_string(),
            (false, true) => {
                "TLS: verified with the system roots and the configured caCert".to_string()
            }
            (false, false) => "TLS: verified with the system roots".to_string(),
        });
    }
    Ok(((route, uri, proxy), details))
}

#[allow(clippy::too_many_arguments)]
async fn tls_step(
    probe: &Probe,
    route: &Route,
    tcp: tokio::net::TcpStream,
    host: &str,
    port: u16,
    proxy: Option<&crate::proxy::Proxy>,
    timeout: Duration,
    waited: &str,
) -> Result<((), Vec<String>), Failure> {
    let config = probe.tls_of(route, true).map_err(|m| {
        Failure::new(
            m,
            "objectStorage.caCert (or the Secret key caCertRef names) must hold PEM certificates",
        )
    })?;
    let target = crate::proxy::authority(host, port);
    let handshake = tokio::time::timeout(timeout, tls_handshake(tcp, host, port, &config)).await;
    let error = match handshake {
        Err(_) => {
            return Err(timeout_failure(
                &format!("in the TLS handshake with {target}"),
                waited,
                &target,
            ));
        }
        Ok(Ok(stream)) => {
            let connection = stream.get_ref().1;
            let mut details = vec![format!(
                "handshake done: {}",
                connection
                    .protocol_version()
                    .map(|v| format!("{v:?}"))
                    .unwrap_or_default()
            )];
            let cert = connection
                .peer_certificates()
                .and_then(|c| c.first())
                .and_then(|c| Certificate::parse(c));
            details.extend(cert.iter().flat_map(Certificate::lines));
            details.push(if route.insecure() {
                "not verified: insecureSkipTLSVerify is set".to_string()
            } else if route.has_ca() {
                match verifies_without_ca(probe, route, host, port, proxy, timeout).await {
                    true => "verified with the system roots (the configured caCert is not needed)"
                        .to_string(),
                    false => "verified with the configured caCert".to_string(),
                }
            } else {
                "verified with the system roots".to_string()
            });
            return Ok(((), details));
        }
        Ok(Err(e)) => e,
    };
    // A second handshake that accepts any certificate shows what the server presented.
    let cert = presented(host, port, proxy, timeout).await;
    Err(tls_failure(&error, host, cert.as_ref(), route.has_ca()))
}

async fn verifies_without_ca(
    probe: &Probe,
    route: &Route,
    host: &str,
    port: u16,
    proxy: Option<&crate::proxy::Proxy>,
    timeout: Duration,
) -> bool {
    let Ok(config) = probe.tls_of(route, false) else {
        return false;
    };
    let attempt = async {
        let tcp = socket(true, host, port, proxy).await?;
        tls_handshake(tcp, host, port, &config).await
    };
    matches!(tokio::time::timeout(timeout, attempt).await, Ok(Ok(_)))
}

async fn presented(
    host: &str,
    port: u16,
    proxy: Option<&crate::proxy::Proxy>,
    timeout: Duration,
) -> Option<Certificate> {
    let config = tls_config(None, true).ok()?;
    let attempt = async {
        let tcp = socket(true, host, port, proxy).await?;
        tls_handshake(tcp, host, port, &config).await
    };
    let stream = tokio::time::timeout(timeout, attempt).await.ok()?.ok()?;
    let der = stream.get_ref().1.peer_certificates()?.first()?.clone();
    Certificate::parse(&der)
}
