//! The webhook's HTTP edge over real TLS on 127.0.0.1, without an apiserver: what the
//! apiserver would send, and what it must get back.

use std::net::{Ipv4Addr, TcpListener};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bsl_sentinel::admission::{ClusterView, PENDING_MESSAGE};
use bsl_sentinel::served_crd::ServedCrd;
use bsl_sentinel::tls::ReloadingCert;
use bsl_sentinel::webhook::{self, State};
use serde_json::{Value, json};

use crate::support::https::{self, Conn};
use crate::support::webhook::{SecretMount, bsl, review};

/// The cluster as the watch caches would see it: one default BSL, one Secret.
struct Cluster;

impl ClusterView for Cluster {
    fn defaults(&self, _: &str) -> Option<Vec<String>> {
        Some(vec!["primary".into()])
    }
    fn secret_exists(&self, _: &str, name: &str) -> Option<bool> {
        Some(name == "cloud-credentials")
    }
}

struct Webhook {
    mount: SecretMount,
    cert: Arc<ReloadingCert>,
    state: Arc<State>,
    addr: std::net::SocketAddr,
    _dir: tempfile::TempDir,
}

impl Webhook {
    async fn start() -> Webhook {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let mount = SecretMount::new(&dir.path().join("tls"));
        let cert =
            ReloadingCert::load(&mount.cert(), &mount.key()).unwrap_or_else(|e| panic!("{e}"));
        let state = State::new(Cluster);
        let listener =
            TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap_or_else(|e| panic!("{e}"));
        let (server, addr) =
            webhook::serve(listener, &cert, state.clone(), 1).unwrap_or_else(|e| panic!("{e}"));
        tokio::spawn(server);
        Webhook {
            mount,
            cert,
            state,
            addr,
            _dir: dir,
        }
    }

    async fn connect(&self) -> Conn {
        https::connect(self.addr, https::client_config(&self.mount.ca.cert_pem()))
            .await
            .unwrap_or_else(|e| panic!("connect: {e}"))
    }

    fn serve_crd(&self, served: ServedCrd) {
        self.state.served.store(Arc::new(Some(served)));
    }
}

async fn post_json(conn: &mut Conn, path: &str, body: &Value) -> (u16, Value) {
    let (status, body) = conn.post(path, body.to_string()).await;
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

fn valid_spec() -> Value {
    json!({"provider": "aws", "objectStorage": {"bucket": "velero"}, "config": {"region": "us-east-1"}})
}

#[tokio::test]
async fn invalid_bsl_is_denied_with_every_field_error() {
    let webhook = Webhook::start().await;
    let mut conn = webhook.connect().await;
    let object = bsl(
        "bad",
        json!({
            "provider": "",
            "objectStorage": {"bucket": "a/b"},
            "accessMode": "WriteOnly",
            "validationFrequency": "5 minutes"
        }),
    );
    let (status, body) = post_json(
        &mut conn,
        "/validate",
        &review("uid-1", "CREATE", &object, None, false),
    )
    .await;
    assert_eq!(status, 200);
    let response = &body["response"];
    assert_eq!(response["uid"], "uid-1");
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["code"], 422);
    assert_eq!(response["status"]["reason"], "Invalid");
    let message = response["status"]["message"].as_str().unwrap_or_default();
    for needle in [
        "BackupStorageLocation.velero.io \"bad\" is invalid: [",
        "spec.provider: Required value",
        "spec.objectStorage.bucket: Invalid value: \"a/b\"",
        "spec.accessMode: Unsupported value: \"WriteOnly\"",
        "spec.validationFrequency: Invalid value: \"5 minutes\"",
    ] {
        assert!(message.contains(needle), "missing {needle:?} in {message}");
    }
    let causes = response["status"]["details"]["causes"]
        .as_array()
        .map(Vec::len);
    assert_eq!(causes, Some(4), "{response}");
    assert_eq!(body["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(body["kind"], "AdmissionReview");
}

#[tokio::test]
async fn valid_bsl_is_allowed_with_warnings_from_the_caches() {
    let webhook = Webhook::start().await;
    let mut conn = webhook.connect().await;
    let mut spec = valid_spec();
    spec["default"] = json!(true);
    spec["credential"] = json!({"name": "missing-secret", "key": "cloud"});
    spec["config"]["insecureSkipTLSVerify"] = json!("true");
    let object = bsl("second-default", spec);
    let (_, body) = post_json(
        &mut conn,
        "/validate",
        &review("uid-2", "CREATE", &object, None, false),
    )
    .await;
    let response = &body["response"];
    assert_eq!(response["allowed"], true, "{response}");
    assert_eq!(response["uid"], "uid-2");
    let warnings: Vec<&str> = response["warnings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let has = |needle: &str| warnings.iter().any(|w| w.contains(needle));
    assert!(
        has("spec.default: BackupStorageLocation \"primary\" is already the default"),
        "{warnings:?}"
    );
    assert!(
        has("spec.credential.name: Secret \"missing-secret\" does not exist (yet)"),
        "{warnings:?}"
    );
    assert!(has("spec.config.insecureSkipTLSVerify"), "{warnings:?}");
    assert!(
        warnings.iter().all(|w| w.len() <= 120 && !w.contains('\n')),
        "{warnings:?}"
    );
}

#[tokio::test]
async fn status_only_update_is_never_judged() {
    let webhook = Webhook::start().await;
    let mut conn = webhook.connect().await;
    let old = bsl(
        "old-invalid",
        json!({"provider": "", "objectStorage": {"bucket": "a/b"}}),
    );
    let mut new = old.clone();
    new["status"] = json!({"phase": "Unavailable"});
    let (_, body) = post_json(
        &mut conn,
        "/validate",
        &review("u", "UPDATE", &new, Some(&old), false),
    )
    .await;
    assert_eq!(body["response"]["allowed"], true, "{body}");
    // A spec change is judged.
    new["spec"]["provider"] = json!("aws/");
    let (_, body) = post_json(
        &mut conn,
        "/validate",
        &review("u", "UPDATE", &new, Some(&old), false),
    )
    .await;
    assert_eq!(body["response"]["allowed"], false, "{body}");
}

#[tokio::test]
async fn dry_run_gets_the_same_answer() {
    let webhook = Webhook::start().await;
    webhook.serve_crd(ServedCrd {
        unknown_phase_allowed: true,
        status_subresource: false,
    });
    let mut conn = webhook.connect().await;
    for (path, object) in [
        (
            "/validate",
            bsl(
                "bad",
                json!({"provider": "", "objectStorage": {"bucket": ""}}),
            ),
        ),
        ("/validate", bsl("good", valid_spec())),
        ("/mutate", bsl("good", valid_spec())),
    ] {
        let (_, wet) = post_json(
            &mut conn,
            path,
            &review("same", "CREATE", &object, None, false),
        )
        .await;
        let (_, dry) = post_json(
            &mut conn,
            path,
            &review("same", "CREATE", &object, None, true),
        )
        .await;
        assert_eq!(wet, dry, "{path}");
    }
}

/// kube-core sends the patch bytes as a JSON array of numbers (Go's []byte decodes from it
/// as well as from base64; the end-to-end tests show the apiserver applies it).
fn decoded_patch(response: &Value) -> Option<json_patch::Patch> {
    let bytes: Vec<u8> = serde_json::from_value(response["patch"].clone()).ok()?;
    serde_json::from_slice(&bytes).ok()
}

#[tokio::test]
async fn mutate_stamps_the_phase_the_served_crd_allows() {
    let webhook = Webhook::start().await;
    let mut conn = webhook.connect().await;
    let object = bsl("new", valid_spec());
    for (served, want) in [
        (
            ServedCrd {
                unknown_phase_allowed: true,
                status_subresource: false,
            },
            json!({"phase": "Unknown", "message": PENDING_MESSAGE}),
        ),
        (
            ServedCrd {
                unknown_phase_allowed: false,
                status_subresource: false,
            },
            json!({"message": PENDING_MESSAGE}),
        ),
    ] {
        webhook.serve_crd(served);
        let (_, body) = post_json(
            &mut conn,
            "/mutate",
            &review("m", "CREATE", &object, None, false),
        )
        .await;
        let response = &body["response"];
        assert_eq!(response["uid"], "m");
        assert_eq!(response["allowed"], true);
        assert_eq!(response["patchType"], "JSONPatch");
        let patch = decoded_patch(response).unwrap_or_else(|| panic!("no patch in {response}"));
        let mut patched = object.clone();
        json_patch::patch(&mut patched, &patch).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(patched["status"], want);

        // Reinvocation on its own output: no patch at all.
        let (_, again) = post_json(
            &mut conn,
            "/mutate",
            &review("m2", "CREATE", &patched, None, false),
        )
        .await;
        assert_eq!(again["response"]["patch"], Value::Null, "{again}");
        assert_eq!(again["response"]["allowed"], true);
    }
}

#[tokio::test]
async fn bad_bodies_get_400_and_oversized_413() {
    let webhook = Webhook::start().await;
    let mut conn = webhook.connect().await;
    let (status, body) = conn.post("/validate", "not json").await;
    assert_eq!(status, 400);
    assert!(String::from_utf8_lossy(&body).starts_with("the body is not an AdmissionReview"));
    let (status, body) = conn
        .post(
            "/mutate",
            r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#,
        )
        .await;
    assert_eq!(status, 400);
    assert_eq!(
        String::from_utf8_lossy(&body),
        "the AdmissionReview has no request"
    );

    let mut conn = webhook.connect().await;
    let huge = vec![b' '; webhook::MAX_BODY + 1];
    let (status, _) = conn.post("/validate", huge).await;
    assert_eq!(status, 413);

    // The server is unharmed.
    let mut conn = webhook.connect().await;
    assert_eq!(conn.get("/healthz").await.0, 200);
}

#[tokio::test]
async fn ready_once_the_crd_was_read() {
    let webhook = Webhook::start().await;
    let mut conn = webhook.connect().await;
    assert_eq!(conn.get("/healthz").await.0, 200);
    assert_eq!(conn.get("/readyz").await.0, 503);
    webhook.serve_crd(ServedCrd::default());
    assert_eq!(conn.get("/readyz").await.0, 200);
}

#[tokio::test]
async fn certificate_swap_serves_new_handshakes_and_keeps_open_connections() {
    let mut webhook = Webhook::start().await;
    tokio::spawn(webhook.cert.clone().watch(Duration::from_millis(50)));
    let mut open = webhook.connect().await;
    let before = open.peer_cert.clone();
    assert_eq!(open.get("/healthz").await.0, 200);

    let next = webhook.mount.issue();
    webhook.mount.update(&next);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut fresh = webhook.connect().await;
    while fresh.peer_cert == before {
        assert!(
            Instant::now() < deadline,
            "the new certificate was never served"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        fresh = webhook.connect().await;
    }
    assert_eq!(fresh.get("/healthz").await.0, 200);
    // The connection opened before the swap keeps working on its old session.
    let object = bsl("x", valid_spec());
    let (status, body) = post_json(
        &mut open,
        "/validate",
        &review("k", "CREATE", &object, None, false),
    )
    .await;
    assert_eq!((status, &body["response"]["allowed"]), (200, &json!(true)));
}

/// Certificate rotations while clients keep sending reviews, each on a new TLS connection (as
/// the apiserver does after idle) or on connections kept open: no request fails, and new
/// handshakes get the new certificates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_rotations_under_load_fail_no_request() {
    const ROTATIONS: usize = 10;
    let mut webhook = Webhook::start().await;
    tokio::spawn(webhook.cert.clone().watch(Duration::from_millis(50)));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let body = review("load", "CREATE", &bsl("x", valid_spec()), None, false).to_string();
    let mut clients = Vec::new();
    for client in 0..4 {
        let (stop, body) = (stop.clone(), body.clone());
        let (addr, ca) = (webhook.addr, webhook.mount.ca.cert_pem());
        clients.push(tokio::spawn(async move {
            let mut leaves = std::collections::HashSet::new();
            let (mut ok, mut failed) = (0usize, Vec::new());
            let mut kept = None;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                // Odd clients keep one connection; even ones open a new one each time.
                let conn = match kept.take() {
                    Some(conn) if client % 2 == 1 => Ok(conn),
                    // A fresh client configuration: no session to resume (a resumed session
                    // shows the certificate of the one it resumes).
                    _ => https::connect(addr, https::client_config(&ca)).await,
                };
                let mut conn = match conn {
                    Ok(conn) => conn,
                    Err(e) => {
                        failed.push(format!("connect: {e}"));
                        continue;
                    }
                };
                leaves.insert(conn.peer_cert.clone());
                match conn.request("POST", "/validate", body.clone().into()).await {
                    Ok((200, answer)) if answer.windows(14).any(|w| w == b"\"allowed\":true") => {
                        ok += 1
                    }
                    Ok((status, answer)) => failed.push(format!(
                        "HTTP {status}: {}",
                        String::from_utf8_lossy(&answer)
                    )),
                    Err(e) => failed.push(format!("request: {e}")),
                }
                kept = Some(conn);
            }
            (ok, failed, leaves.len())
        }));
    }
    for _ in 0..ROTATIONS {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let next = webhook.mount.issue();
        webhook.mount.update(&next);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut total = 0;
    for (client, handle) in clients.into_iter().enumerate() {
        let (ok, failed, leaves) = handle.await.unwrap_or_else(|e| panic!("client: {e}"));
        assert!(
            failed.is_empty(),
            "client {client}: {} failed: {failed:?}",
            failed.len()
        );
        if client % 2 == 0 {
            assert!(
                leaves > ROTATIONS / 2,
                "client {client} saw {leaves} certificates"
            );
        }
        total += ok;
    }
    eprintln!("{ROTATIONS} certificate rotations under load: {total} reviews, 0 failed");
    assert!(total > 100, "only {total} reviews under load");
}

/// The test CA and server certificates every TLS test relies on are PEM, as the webhook reads them.
#[test]
fn test_pki_issues_a_pem_ca_and_server_chain() -> Result<(), rcgen::Error> {
    let ca = crate::support::pki::Ca::new("test CA")?;
    let server = ca.issue_server(
        &["localhost"],
        &["127.0.0.1"
            .parse()
            .map_err(|_| rcgen::Error::CouldNotParseCertificate)?],
    )?;
    assert!(ca.cert_pem().starts_with("-----BEGIN CERTIFICATE-----"));
    assert!(server.cert.starts_with("-----BEGIN CERTIFICATE-----"));
    assert!(server.key.starts_with("-----BEGIN PRIVATE KEY-----"));
    Ok(())
}
