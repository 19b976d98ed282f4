//! The storage probe against the real peers: SeaweedFS (aws), fake-gcs-server (gcp) and
//! Azurite (azure), each on free 127.0.0.1 ports. No mocks: every outcome comes from a real
//! listing, a real refused connection or a real silent socket.

use std::net::{Ipv4Addr, TcpListener};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bsl_sentinel::proxy::Proxies;
use bsl_sentinel::storage::connections::{self, Lanes};
use bsl_sentinel::storage::{FailureReason, Outcome, Probe};
use k8s_openapi::ByteString;
use object_store::client::{HttpClient, HttpRequestBody};

use crate::support::control_plane::free_port;
use crate::support::faults::{Faulty, Link, Unconnectable};
use crate::support::forward_proxy::ForwardProxy;
use crate::support::storage::{
    Azurite, FakeGcs, Location, Moto, SeaweedFs, credentials_ini, test_ca_pem,
};

const TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Clone, Copy, Debug)]
enum Peer {
    Aws,
    Gcp,
    Azure,
}

impl Peer {
    /// Bucket names unique to one test and provider.
    fn bucket(self, test: &str) -> String {
        format!("{test}-{self:?}").to_lowercase()
    }

    async fn seed(self, bucket: &str, keys: &[&str]) {
        match self {
            Peer::Aws => SeaweedFs::shared().seed(bucket, keys).await,
            Peer::Gcp => FakeGcs::shared().seed(bucket, keys).await,
            Peer::Azure => Azurite::shared().seed(bucket, keys).await,
        }
    }

    fn location(self, bucket: &str, prefix: Option<&str>) -> Location {
        match self {
            Peer::Aws => SeaweedFs::shared().location(bucket, prefix),
            Peer::Gcp => FakeGcs::shared().location(bucket, prefix),
            Peer::Azure => Azurite::shared().location(bucket, prefix),
        }
    }

    /// The same location, pointed at another endpoint.
    fn location_at(self, bucket: &str, endpoint: &str) -> Location {
        let mut location = self.location(bucket, None);
        let key = match self {
            Peer::Aws => "s3Url",
            Peer::Gcp => "storeEndpoint",
            Peer::Azure => "storageAccountURI",
        };
        let url = match self {
            Peer::Azure => format!("{endpoint}/devstoreaccount1"),
            Peer::Aws | Peer::Gcp => endpoint.to_string(),
        };
        if let Some(config) = location.spec.config.as_mut() {
            config.insert(key.into(), url);
        }
        location
    }
}

async fn check(probe: &Probe, location: &Location) -> Outcome {
    probe
        .check(&location.spec, Some(&location.credential), None)
        .await
}

fn expect_unavailable(outcome: Outcome, want: FailureReason) -> String {
    match outcome {
        Outcome::Unavailable { reason, message } if reason == want => {
            assert!(message.len() <= 512, "message too long: {message}");
            message
        }
        other => panic!("expected Unavailable({want:?}), got {other:?}"),
    }
}

async fn valid_location_is_available(peer: Peer) {
    let bucket = peer.bucket("valid");
    peer.seed(
        &bucket,
        &[
            "backups/b1/velero-backup.json",
            "restores/r1/restore.json",
            "kopia/default/kopia.repository",
            "metadata/revision",
            "README.txt",
        ],
    )
    .await;
    let probe = Probe::new(4, TIMEOUT);
    assert_eq!(
        check(&probe, &peer.location(&bucket, None)).await,
        Outcome::Available
    );
    // Again, through the cached store.
    assert_eq!(
        check(&probe, &peer.location(&bucket, None)).await,
        Outcome::Available
    );
}

async fn empty_bucket_is_available(peer: Peer) {
    let bucket = peer.bucket("empty");
    peer.seed(&bucket, &[]).await;
    let probe = Probe::new(4, TIMEOUT);
    assert_eq!(
        check(&probe, &peer.location(&bucket, None)).await,
        Outcome::Available
    );
}

async fn prefix_is_honoured(peer: Peer) {
    let bucket = peer.bucket("prefix");
    peer.seed(
        &bucket,
        &[
            "velero/cluster-a/backups/b1/velero-backup.json",
            "velero/cluster-b/scratch/x",
            "loki/chunks/1",
        ],
    )
    .await;
    let probe = Probe::new(4, TIMEOUT);
    for prefix in [
        "velero/cluster-a",
        "velero/cluster-a/",
        "/velero/cluster-a/",
    ] {
        assert_eq!(
            check(&probe, &peer.location(&bucket, Some(prefix))).await,
            Outcome::Available,
            "prefix {prefix:?}"
        );
    }
    let message = expect_unavailable(
        check(&probe, &peer.location(&bucket, Some("velero/cluster-b"))).await,
        FailureReason::Layout,
    );
    assert_eq!(
        message,
        "Backup store contains invalid top-level directories: [scratch]"
    );
    let message = expect_unavailable(
        check(&probe, &peer.location(&bucket, None)).await,
        FailureReason::Layout,
    );
    assert_eq!(
        message,
        "Backup store contains invalid top-level directories: [loki velero]"
    );
}

async fn foreign_directories_are_layout_errors(peer: Peer) {
    let bucket = peer.bucket("foreign");
    peer.seed(
        &bucket,
        &[
            "backups/b1/velero-backup.json",
            "a/1",
            "b/1",
            "c/1",
            "d/1",
            "e/1",
        ],
    )
    .await;
    let probe = Probe::new(4, TIMEOUT);
    let message = expect_unavailable(
        check(&probe, &peer.location(&bucket, None)).await,
        FailureReason::Layout,
    );
    assert_eq!(
        message,
        "Backup store contains 5 invalid top-level directories: [a b c ...]"
    );
}

/// Nothing listens on the port: refused at once, well under the timeout.
async fn dead_endpoint_is_unreachable_fast(peer: Peer) {
    let port = free_port();
    let probe = Probe::new(4, TIMEOUT);
    let location = peer.location_at("anything", &format!("http://127.0.0.1:{port}"));
    let start = Instant::now();
    let message = expect_unavailable(check(&probe, &location).await, FailureReason::Unreachable);
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "took {:?}",
        start.elapsed()
    );
    assert!(
        message.contains(&format!("127.0.0.1:{port}")),
        "message names the endpoint: {message}"
    );
}

/// A listener that accepts and never answers: the check gives up at its timeout.
async fn silent_endpoint_times_out(peer: Peer) {
    let listener =
        TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap_or_else(|e| panic!("bind: {e}"));
    let port = listener
        .local_addr()
        .unwrap_or_else(|e| panic!("addr: {e}"))
        .port();
    // Accepted sockets are kept open, silent, until the test binary ends.
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().flatten() {
            held.push(stream);
        }
    });
    let timeout = Duration::from_secs(2);
    let probe = Probe::new(4, timeout);
    let location = peer.location_at("anything", &format!("http://127.0.0.1:{port}"));
    let start = Instant::now();
    let message = expect_unavailable(check(&probe, &location).await, FailureReason::Timeout);
    let took = start.elapsed();
    assert!(
        took >= timeout && took < timeout + Duration::from_secs(2),
        "took {took:?}"
    );
    assert!(
        message.starts_with(&format!(
            "timed out after 2s waiting for the first byte of the response from \
             http://127.0.0.1:{port}"
        )),
        "{message}"
    );
}

/// A port whose connections never complete (its accept queue is full, as behind a DROP
/// firewall): the check times out connecting, and says so.
#[tokio::test]
async fn unconnectable_endpoint_times_out_connecting() {
    let port = Unconnectable::start();
    let probe = Probe::new(4, Duration::from_secs(2));
    let location = Peer::Aws.location_at("anything", &format!("http://127.0.0.1:{}", port.port));
    let message = expect_unavailable(check(&probe, &location).await, FailureReason::Timeout);
    assert!(
        message.starts_with(&format!(
            "timed out after 2s connecting to 127.0.0.1:{}",
            port.port
        )),
        "{message}"
    );
}

/// An https endpoint that accepts and never answers the ClientHello.
#[tokio::test]
async fn tls_handshake_stall_times_out_in_the_handshake() {
    let stall = Faulty::silent();
    let probe = Probe::new(4, Duration::from_secs(2));
    let location = Peer::Aws.location_at("anything", &stall.https_url());
    let message = expect_unavailable(check(&probe, &location).await, FailureReason::Timeout);
    assert!(
        message.starts_with(&format!(
            "timed out after 2s in the TLS handshake with 127.0.0.1:{}",
            stall.port
        )),
        "{message}"
    );
}

macro_rules! provider_tests {
    ($module:ident, $peer:expr) => {
        mod $module {
            use super::*;

            #[tokio::test]
            async fn valid_location_is_available() {
                super::valid_location_is_available($peer).await;
            }

            #[tokio::test]
            async fn empty_bucket_is_available() {
                super::empty_bucket_is_available($peer).await;
            }

            #[tokio::test]
            async fn prefix_is_honoured() {
                super::prefix_is_honoured($peer).await;
            }

            #[tokio::test]
            async fn foreign_directories_are_layout_errors() {
                super::foreign_directories_are_layout_errors($peer).await;
            }

            #[tokio::test]
            async fn dead_endpoint_is_unreachable_fast() {
                super::dead_endpoint_is_unreachable_fast($peer).await;
            }

            #[tokio::test]
            async fn silent_endpoint_times_out() {
                super::silent_endpoint_times_out($peer).await;
            }
        }
    };
}

provider_tests!(aws, Peer::Aws);
provider_tests!(gcp, Peer::Gcp);
provider_tests!(azure, Peer::Azure);

#[tokio::test]
async fn aws_wrong_secret_is_auth() {
    let weed = SeaweedFs::shared();
    let bucket = "auth-aws";
    weed.seed(bucket, &["backups/b1/velero-backup.json"]).await;
    let probe = Probe::new(4, TIMEOUT);
    let wrong = "wrong-secret-key-0123456789";
    for (access_key, secret) in [(weed.access_key.as_str(), wrong), ("AKIDUNKNOWN", wrong)] {
        let mut location = weed.location(bucket, None);
        location.credential = credentials_ini(access_key, secret).into_bytes();
        let message = expect_unavailable(check(&probe, &location).await, FailureReason::Auth);
        assert!(
            message.contains("authentication failed") && message.contains("credentials"),
            "{message}"
        );
        assert!(!message.contains(secret), "leaks the secret: {message}");
        assert!(!message.contains(&weed.secret_key), "{message}");
    }
}

#[tokio::test]
async fn aws_unknown_bucket_is_not_found() {
    let probe = Probe::new(4, TIMEOUT);
    let location = SeaweedFs::shared().location("no-such-bucket-aws", None);
    let message = expect_unavailable(check(&probe, &location).await, FailureReason::NotFound);
    assert!(
        message.contains("bucket \"no-such-bucket-aws\" does not exist")
            && message.contains("NoSuchBucket"),
        "{message}"
    );
}

#[tokio::test]
async fn aws_missing_profile_is_config() {
    let weed = SeaweedFs::shared();
    let probe = Probe::new(4, TIMEOUT);
    let mut location = weed.location("any-bucket", None);
    if let Some(config) = location.spec.config.as_mut() {
        config.insert("profile".into(), "backup".into());
    }
    let message = expect_unavailable(check(&probe, &location).await, FailureReason::Config);
    assert!(message.contains("no profile \"backup\""), "{message}");
}

#[tokio::test]
async fn azure_wrong_key_is_auth() {
    let azurite = Azurite::shared();
    let container = "auth-azure";
    azurite
        .seed(container, &["backups/b1/velero-backup.json"])
        .await;
    let probe = Probe::new(4, TIMEOUT);
    let mut location = azurite.location(container, None);
    // Valid base64, wrong key.
    let wrong = "d3Jvbmcta2V5LXdyb25nLWtleS13cm9uZy1rZXk=";
    location.credential = format!("AZURE_STORAGE_ACCOUNT_ACCESS_KEY={wrong}\n").into_bytes();
    let message = expect_unavailable(check(&probe, &location).await, FailureReason::Auth);
    assert!(message.contains("authentication failed"), "{message}");
    assert!(!message.contains(wrong), "leaks the key: {message}");
}

#[tokio::test]
async fn azure_unknown_container_is_not_found() {
    let probe = Probe::new(4, TIMEOUT);
    let location = Azurite::shared().location("no-such-container", None);
    let message = expect_unavailable(check(&probe, &location).await, FailureReason::NotFound);
    assert!(
        message.contains("container \"no-such-container\" does not exist")
            && message.contains("ContainerNotFound"),
        "{message}"
    );
}

/// TLS with a private CA: rejected without it; trusted from the BSL's caCert, or from the
/// Secret key caCertRef names.
#[tokio::test]
async fn azure_tls_trusts_the_configured_ca() {
    let azurite = Azurite::shared_tls();
    let container = "tls-azure";
    azurite.seed(container, &[]).await;
    let probe = Probe::new(4, TIMEOUT);
    let mut location = azurite.location(container, None);
    assert!(
        probe
            .endpoint_key(&location.spec)
            .is_some_and(|key| key.starts_with("https://127.0.0.1:"))
    );
    let message = expect_unavailable(check(&probe, &location).await, FailureReason::Unreachable);
    assert!(message.contains("certificate"), "{message}");
    let ca = test_ca_pem();
    let from_ref = probe
        .check(
            &location.spec,
            Some(&location.credential),
            Some(ca.as_bytes()),
        )
        .await;
    assert_eq!(from_ref, Outcome::Available);
    location.spec.object_storage.ca_cert = Some(ByteString(ca.into_bytes()));
    assert_eq!(check(&probe, &location).await, Outcome::Available);
}

/// Seeding a container that exists reuses it (a retried create answers
/// ContainerAlreadyExists), so the shared Azurite can be seeded again.
#[tokio::test]
async fn azure_seeding_twice_reuses_the_container() {
    let azurite = Azurite::shared();
    let container = Peer::Azure.bucket("seed-twice");
    azurite.create_container(&container).await;
    azurite
        .seed(&container, &["backups/b1/velero-backup.json"])
        .await;
    let probe = Probe::new(4, TIMEOUT);
    assert_eq!(
        check(&probe, &azurite.location(&container, None)).await,
        Outcome::Available
    );
}

/// aws over https with a private CA: rejected without it; trusted from caCert; and, with
/// insecureSkipTLSVerify, accepted without any CA.
#[tokio::test]
async fn aws_tls_trusts_the_configured_ca_or_skips_verification() {
    let weed = SeaweedFs::shared();
    let bucket = "tls-aws";
    weed.seed(bucket, &["backups/b1/velero-backup.json"]).await;
    let probe = Probe::new(4, TIMEOUT);
    let location = Peer::Aws.location_at(bucket, &weed.https_endpoint);
    let message = expect_unavailable(check(&probe, &location).await, FailureReason::Unreachable);
    assert!(message.contains("certificate"), "{message}");

    let mut trusted = location.clone();
    trusted.spec.object_storage.ca_cert = Some(ByteString(test_ca_pem().into_bytes()));
    assert_eq!(check(&probe, &trusted).await, Outcome::Available);

    let mut insecure = location.clone();
    insecure
        .spec
        .config
        .get_or_insert_default()
        .insert("insecureSkipTLSVerify".into(), "true".into());
    assert_eq!(check(&probe, &insecure).await, Outcome::Available);
}

/// Through an HTTP proxy, as HTTPS_PROXY and HTTP_PROXY name it (Velero's plugins honour
/// them): https in a CONNECT tunnel, http as absolute-form requests, with the credentials of
/// the proxy URL. The storage host name resolves only at the proxy, so Available means the
/// check went through it; wrong credentials give the proxy's own refusal.
#[tokio::test]
async fn checks_go_through_the_configured_proxy() {
    let weed = SeaweedFs::shared();
    let bucket = "via-proxy";
    weed.seed(bucket, &["backups/b1/velero-backup.json"]).await;
    let proxy = ForwardProxy::start("svc", "s3cret pw").await;
    let through = |user: &str| {
        let url = format!("http://{user}@127.0.0.1:{}", proxy.port);
        let (proxies, problems) = Proxies::from_vars(|name| {
            matches!(name, "HTTPS_PROXY" | "HTTP_PROXY").then(|| url.clone())
        });
        assert!(problems.is_empty(), "{problems:?}");
        Probe::new(4, TIMEOUT).with_proxies(proxies)
    };
    let https_port = weed
        .https_endpoint
        .rsplit_once(':')
        .map(|(_, p)| p.to_string())
        .unwrap_or_default();
    let mut https = Peer::Aws.location_at(bucket, &format!("https://storage.test:{https_port}"));
    https.spec.object_storage.ca_cert = Some(ByteString(test_ca_pem().into_bytes()));
    let http = Peer::Aws.location_at(bucket, &format!("http://storage.test:{}", weed.s3_port));

    let probe = through("svc:s3cret%20pw");
    assert_eq!(check(&probe, &https).await, Outcome::Available);
    assert_eq!(check(&probe, &http).await, Outcome::Available);
    let seen = proxy.seen();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(
        seen[0],
        format!("CONNECT storage.test:{https_port} HTTP/1.1")
    );
    assert!(
        seen[1].starts_with(&format!(
            "GET http://storage.test:{}/{bucket}?",
            weed.s3_port
        )),
        "{seen:?}"
    );

    let message = expect_unavailable(
        check(&through("svc:wrong"), &https).await,
        FailureReason::Unreachable,
    );
    assert!(
        message.contains("407 Proxy Authentication Required") && !message.contains("wrong"),
        "{message}"
    );
}

/// An aws BSL naming neither region nor s3Url is in its bucket's own region, which Velero finds
/// with an unsigned HEAD of the bucket at AWS (here moto stands in for AWS): the answer carries
/// x-amz-bucket-region. A missing bucket says so.
#[tokio::test]
async fn aws_region_is_looked_up_from_the_bucket() {
    let moto = Moto::shared();
    moto.seed("velero-eu", "eu-west-1", &["backups/b1/velero-backup.json"])
        .await;
    moto.seed("velero-ap", "ap-southeast-2", &["restic/r1/config"])
        .await;
    let probe = Probe::new(4, TIMEOUT).with_aws_service(&moto.endpoint);
    assert_eq!(
        probe.bucket_region("velero-eu").await,
        Ok("eu-west-1".into())
    );
    assert_eq!(
        probe.bucket_region("velero-ap").await,
        Ok("ap-southeast-2".into())
    );
    assert_eq!(
        check(&probe, &moto.location("velero-eu")).await,
        Outcome::Available
    );
    assert_eq!(
        check(&probe, &moto.location("velero-ap")).await,
        Outcome::Available
    );
    let message = expect_unavailable(
        check(&probe, &moto.location("no-such-velero-bucket")).await,
        FailureReason::NotFound,
    );
    assert!(
        message.contains("bucket \"no-such-velero-bucket\" does not exist"),
        "{message}"
    );
}

/// fake-gcs-server answers the XML listing of a missing bucket with 500 (real GCS: 404
/// NoSuchBucket, classified NotFound by the unit tests); the probe must still say Unavailable.
#[tokio::test]
async fn gcp_unknown_bucket_is_unavailable() {
    let probe = Probe::new(4, TIMEOUT);
    let location = FakeGcs::shared().location("no-such-bucket-gcp", None);
    let message = expect_unavailable(check(&probe, &location).await, FailureReason::Other);
    assert!(message.contains("HTTP 500"), "{message}");
}

#[tokio::test]
async fn plugin_provider_is_unchecked() {
    let probe = Probe::new(4, TIMEOUT);
    let mut location = SeaweedFs::shared().location("any-bucket", None);
    location.spec.provider = "example.io/object-store".into();
    assert_eq!(
        probe.endpoint_key(&location.spec),
        None,
        "no endpoint to wait for"
    );
    match check(&probe, &location).await {
        Outcome::Unchecked { message } => assert_eq!(
            message,
            "bsl-sentinel cannot check provider \"example.io/object-store\"; the phase is left to Velero"
        ),
        other => panic!("expected Unchecked, got {other:?}"),
    }
}

/// A stopped endpoint is unreachable; once it is back (same port, empty data), the location is
/// available again.
#[tokio::test]
async fn endpoint_outage_and_recovery() {
    let weed = SeaweedFs::dedicated();
    let bucket = "outage";
    weed.seed(bucket, &["backups/b1/velero-backup.json"]).await;
    let probe = Probe::new(4, TIMEOUT);
    let location = weed.location(bucket, None);
    assert_eq!(check(&probe, &location).await, Outcome::Available);
    weed.stop();
    expect_unavailable(check(&probe, &location).await, FailureReason::Unreachable);
    weed.start();
    weed.seed(bucket, &[]).await;
    assert_eq!(check(&probe, &location).await, Outcome::Available);
}

/// "A thousand BSLs on one endpoint must not open a thousand connections": 200 distinct BSLs
/// checked at once with per_endpoint = 4, counted by a TCP link in front of the server. The
/// bound is per_endpoint, by construction (a socket lives only in one of the endpoint's lanes),
/// so even one more would fail this test.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn connections_per_endpoint_are_bounded() {
    const PER_ENDPOINT: usize = 4;
    const CHECKS: usize = 200;
    // Its own server, so no other test's connections count.
    let weed = SeaweedFs::dedicated();
    let bucket = "bounded";
    let keys: Vec<String> = (0..CHECKS)
        .map(|i| format!("bsl-{i}/backups/b/velero-backup.json"))
        .collect();
    weed.create_bucket(bucket).await;
    let store = weed.store(bucket);
    for key in &keys {
        object_store::ObjectStoreExt::put(
            &*store,
            &object_store::path::Path::from(key.as_str()),
            object_store::PutPayload::from_static(b"x"),
        )
        .await
        .unwrap_or_else(|e| panic!("putting {key}: {e}"));
    }
    // Every connection of the checks, and only theirs (the seeding went direct), goes through
    // the link, which counts each from accept to close: none is too short-lived to be seen.
    let link = Link::start(&format!("127.0.0.1:{}", weed.s3_port));
    let via = format!("http://127.0.0.1:{}", link.port);

    let probe = Arc::new(Probe::new(PER_ENDPOINT, TIMEOUT));
    let start = Instant::now();
    let checks = (0..CHECKS).map(|i| {
        let probe = probe.clone();
        let location = weed.location_via(&via, bucket, Some(&format!("bsl-{i}")));
        tokio::spawn(async move { check(&probe, &location).await })
    });
    let outcomes = futures::future::join_all(checks).await;
    let took = start.elapsed();
    for outcome in outcomes {
        let outcome = outcome.unwrap_or_else(|e| panic!("check task: {e}"));
        assert_eq!(outcome, Outcome::Available);
    }
    eprintln!("{CHECKS} checks in {took:?}: {}", seen(&link));
    assert_bounded(&link, PER_ENDPOINT);
    // Connections are reused across checks, not opened per check (a few may be replaced when
    // the server closes them).
    assert!(
        link.accepted_connections() <= 2 * PER_ENDPOINT,
        "{} connections opened for {CHECKS} checks",
        link.accepted_connections()
    );
}

/// The lanes bound the sockets on their own, with no check permits in front: 1,000 requests
/// at once through one endpoint's client with 2 lanes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lanes_bound_sockets_on_their_own() {
    const LANES: usize = 2;
    const REQUESTS: usize = 1000;
    let weed = SeaweedFs::dedicated();
    let tls = connections::tls_config(None, false).unwrap_or_else(|e| panic!("TLS: {e}"));
    let client = HttpClient::new(connections::Client::new(
        Lanes::new(LANES),
        tls,
        Arc::default(),
    ));
    let link = Link::start(&format!("127.0.0.1:{}", weed.s3_port));
    let url = format!("http://127.0.0.1:{}/healthz", link.port);
    let requests = (0..REQUESTS).map(|_| {
        let (client, url) = (client.clone(), url.clone());
        tokio::spawn(async move {
            let request = hyper::Request::get(&url)
                .body(HttpRequestBody::empty())
                .map_err(|e| e.to_string())?;
            let response = client.execute(request).await.map_err(|e| e.to_string())?;
            let status = response.status();
            http_body_util::BodyExt::collect(response.into_body())
                .await
                .map_err(|e| e.to_string())?;
            Ok::<_, String>(status)
        })
    });
    let responses = futures::future::join_all(requests).await;
    for response in responses {
        let status = response
            .unwrap_or_else(|e| panic!("request task: {e}"))
            .unwrap_or_else(|e| panic!("request: {e}"));
        assert_eq!(status, 200);
    }
    eprintln!("{REQUESTS} requests: {}", seen(&link));
    assert_bounded(&link, LANES);
}

fn seen(link: &Link) -> String {
    format!(
        "peak {} connections at once, {} in all",
        link.peak_connections(),
        link.accepted_connections()
    )
}

fn assert_bounded(link: &Link, bound: usize) {
    let peak = link.peak_connections();
    assert!(
        peak <= bound,
        "{peak} connections to one endpoint, bound {bound}"
    );
    assert!(
        peak >= 1,
        "no connection went through the link ({})",
        seen(link)
    );
}
