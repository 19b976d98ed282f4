//! The real object-storage peers on free 127.0.0.1 ports: SeaweedFS (S3), fake-gcs-server (GCS)
//! and Azurite (Azure Blob), from tests/peers (built once into the cache; instant afterwards).
//!
//! `shared()` gives one instance per test binary (tests use distinct buckets);
//! `SeaweedFs::dedicated()` gives a private instance whose `stop()` and `start()` a test may call
//! (the ports stay; each start has fresh, empty data, so buckets must be made again).
//!
//! Seeding goes through object_store itself (a real client); creating buckets and containers,
//! which object_store cannot do, through requests signed by object_store's own signers.
//!
//! Teardown: the servers get PR_SET_PDEATHSIG (see `control_plane::spawn`), a dropped handle
//! kills its server, and an atexit hook kills the shared ones and removes their folders.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use super::pki::Ca;
use bsl_sentinel::bsl::{BackupStorageLocationSpec, ObjectStorageLocation, SecretKeySelector};
use object_store::aws::{AmazonS3Builder, AwsAuthorizer, AwsCredential};
use object_store::azure::{
    AzureAccessKey, AzureAuthorizer, AzureCredential, MicrosoftAzureBuilder,
};
use object_store::client::{HttpClient, HttpRequest, HttpRequestBody};
use object_store::path::Path as StorePath;
use object_store::{Certificate, ClientOptions, ObjectStore, ObjectStoreExt, PutPayload};

use super::control_plane::{free_port, spawn, wait_for};
use super::{eventually, run_script};

/// Azurite's well-known development account and key (published by Microsoft).
pub const AZURITE_ACCOUNT: &str = "devstoreaccount1";
pub const AZURITE_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// A BSL spec with a credentials file, ready for `Probe::check`.
#[derive(Clone)]
pub struct Location {
    pub spec: BackupStorageLocationSpec,
    pub credential: Vec<u8>,
}

fn spec(
    provider: &str,
    bucket: &str,
    prefix: Option<&str>,
    config: &[(&str, &str)],
) -> BackupStorageLocationSpec {
    BackupStorageLocationSpec {
        provider: provider.into(),
        config: Some(
            config
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        credential: Some(SecretKeySelector {
            key: "cloud".into(),
            name: Some("cloud-credentials".into()),
            optional: None,
        }),
        object_storage: ObjectStorageLocation {
            bucket: bucket.into(),
            prefix: prefix.map(str::to_string),
            ..Default::default()
        },
        ..Default::default()
    }
}

// ---------------------------------------------------------------------------------------------
// SeaweedFS

pub struct SeaweedFs {
    /// The S3 endpoint, e.g. http://127.0.0.1:41007.
    pub endpoint: String,
    /// The same over https, with a certificate from the test CA ([`test_ca_pem`]).
    pub https_endpoint: String,
    pub s3_port: u16,
    pub access_key: String,
    pub secret_key: String,
    server: Server,
}

impl SeaweedFs {
    pub fn shared() -> &'static SeaweedFs {
        static SHARED: OnceLock<SeaweedFs> = OnceLock::new();
        SHARED.get_or_init(SeaweedFs::dedicated)
    }

    /// A private, started instance.
    pub fn dedicated() -> SeaweedFs {
        static WEED: OnceLock<PathBuf> = OnceLock::new();
        let weed = WEED
            .get_or_init(|| {
                PathBuf::from(run_script("tests/peers/build-seaweedfs.sh")).join("weed")
            })
            .clone();
        let dir = scratch("seaweedfs");
        // Eleven distinct explicit ports: weed fails at once on a taken one, and its defaults
        // (gRPC at port+10000) could collide with another test's.
        let p = free_ports(11);
        let (access_key, secret_key) =
            ("bsl-admin".to_string(), "bsl-admin-secret-key".to_string());
        let s3_config = dir.join("s3.json");
        let identities = serde_json::json!({"identities": [{
            "name": "bsl-admin",
            "credentials": [{"accessKey": access_key, "secretKey": secret_key}],
            "actions": ["Admin", "Read", "List", "Tagging", "Write"],
        }]});
        write(&s3_config, &identities.to_string());
        // S3 is served over https too, with a certificate from the test CA; storage.test is the
        // name a test proxy resolves.
        let (cert, key) = (dir.join("serving.crt"), dir.join("serving.key"));
        let pem = test_ca()
            .issue_server(
                &["localhost", "storage.test"],
                &[Ipv4Addr::LOCALHOST.into()],
            )
            .unwrap_or_else(|e| panic!("certificates: {e}"));
        write(&cert, &pem.cert);
        write(&key, &pem.key);
        let (s3_port, https_port) = (p[6], p[10]);
        let run_dir = dir.clone();
        let launch = move |data: &Path| {
            let mut cmd = Command::new(&weed);
            cmd.env_remove("AWS_ACCESS_KEY_ID")
                .env_remove("AWS_SECRET_ACCESS_KEY")
                .arg("-logtostderr")
                .arg("mini")
                .arg(format!("-dir={}", data.display()))
                .args(["-ip=127.0.0.1", "-ip.bind=127.0.0.1"])
                .arg(format!("-master.port={}", p[0]))
                .arg(format!("-master.port.grpc={}", p[1]))
                .args(["-master.telemetry=false", "-master.volumeSizeLimitMB=64"])
                .arg("-volume.max=1000")
                .arg(format!("-volume.port={}", p[2]))
                .arg(format!("-volume.port.grpc={}", p[3]))
                .arg(format!("-filer.port={}", p[4]))
                .arg(format!("-filer.port.grpc={}", p[5]))
                .arg(format!(
                    "-filer.localSocket={}",
                    data.join("filer.sock").display()
                ))
                .arg(format!("-s3.port={}", p[6]))
                .arg(format!("-s3.port.grpc={}", p[7]))
                .args(["-s3.port.iceberg=0", "-s3.port.lance=0"])
                .arg(format!(
                    "-s3.localSocket={}",
                    data.join("s3.sock").display()
                ))
                .arg(format!("-s3.config={}", s3_config.display()))
                .arg(format!("-s3.port.https={}", p[10]))
                .arg(format!("-s3.cert.file={}", cert.display()))
                .arg(format!("-s3.key.file={}", key.display()))
                .args(["-webdav=false", "-admin.ui=false"])
                .arg(format!("-admin.port={}", p[8]))
                .arg(format!("-admin.port.grpc={}", p[9]))
                .arg("-admin.port.legacy=0")
                .current_dir(&run_dir);
            cmd
        };
        let server = Server::new(
            "SeaweedFS",
            dir,
            Box::new(launch),
            Box::new(move || http_status(s3_port, "/healthz") == Some(200)),
        );
        server.start();
        SeaweedFs {
            endpoint: format!("http://127.0.0.1:{s3_port}"),
            https_endpoint: format!("https://127.0.0.1:{https_port}"),
            s3_port,
            access_key,
            secret_key,
            server,
        }
    }

    /// Stops the server (a check then finds nothing listening).
    pub fn stop(&self) {
        self.server.stop();
    }

    /// Starts it again on the same ports, with empty data.
    pub fn start(&self) {
        self.server.start();
    }

    /// The shared credentials file Velero's aws plugin reads.
    pub fn credentials(&self) -> String {
        credentials_ini(&self.access_key, &self.secret_key)
    }

    pub fn location(&self, bucket: &str, prefix: Option<&str>) -> Location {
        self.location_via(&self.endpoint, bucket, prefix)
    }

    /// A location whose s3Url is `endpoint`, something in front of this server.
    pub fn location_via(&self, endpoint: &str, bucket: &str, prefix: Option<&str>) -> Location {
        Location {
            spec: spec(
                "aws",
                bucket,
                prefix,
                &[
                    ("region", "us-east-1"),
                    ("s3Url", endpoint),
                    ("s3ForcePathStyle", "true"),
                ],
            ),
            credential: self.credentials().into_bytes(),
        }
    }

    /// Creates a bucket with a SigV4-signed PUT (object_store cannot create buckets). The
    /// first write after a start can fail while the volume server settles, so it is retried.
    pub async fn create_bucket(&self, bucket: &str) {
        let credential = AwsCredential {
            key_id: self.access_key.clone(),
            secret_key: self.secret_key.clone(),
            token: None,
        };
        let url = format!("{}/{bucket}", self.endpoint);
        retry(
            &format!("creating bucket {bucket} on SeaweedFS"),
            || async {
                let mut request = request("PUT", &url, HttpRequestBody::empty());
                AwsAuthorizer::new(&credential, "s3", "us-east-1")
                    .try_authorize(&mut request, None)
                    .unwrap_or_else(|e| panic!("signing: {e}"));
                // A retry after a create that did land answers 409: the bucket is there.
                match send(request).await {
                    Err(e) if e.contains("BucketAlreadyOwnedByYou") => Ok(()),
                    other => other,
                }
            },
        )
        .await;
    }

    pub fn store(&self, bucket: &str) -> Arc<dyn ObjectStore> {
        let store = AmazonS3Builder::new()
            .with_bucket_name(bucket)
            .with_region("us-east-1")
            .with_endpoint(&self.endpoint)
            .with_allow_http(true)
            .with_access_key_id(&self.access_key)
            .with_secret_access_key(&self.secret_key)
            .build()
            .unwrap_or_else(|e| panic!("S3 store for {bucket}: {e}"));
        Arc::new(store)
    }

    /// Creates the bucket and puts one small object at each key.
    pub async fn seed(&self, bucket: &str, keys: &[&str]) {
        self.create_bucket(bucket).await;
        put_all(&*self.store(bucket), keys).await;
    }
}

/// An AWS shared credentials file with one default profile.
impl Location {
    /// The location's spec as JSON, its credential in Secret `secret` (key "cloud"), which is
    /// created in `namespace`.
    pub fn spec_with_secret(
        &self,
        kubectl: &crate::support::Kubectl,
        namespace: &str,
        secret: &str,
    ) -> serde_json::Value {
        use base64::Engine;
        let b64 = base64::engine::general_purpose::STANDARD.encode(&self.credential);
        let manifest = serde_json::json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": secret}, "data": {"cloud": b64}});
        let out = kubectl.apply(namespace, &manifest.to_string());
        assert!(out.success, "creating Secret {secret}: {}", out.stderr);
        let mut spec = serde_json::to_value(&self.spec).unwrap_or_default();
        spec["credential"] = serde_json::json!({"name": secret, "key": "cloud"});
        spec
    }
}

pub fn credentials_ini(access_key: &str, secret_key: &str) -> String {
    format!("[default]\naws_access_key_id = {access_key}\naws_secret_access_key = {secret_key}\n")
}

// ---------------------------------------------------------------------------------------------
// fake-gcs-server

pub struct FakeGcs {
    /// e.g. http://127.0.0.1:41020
    pub endpoint: String,
    _server: Server,
}

impl FakeGcs {
    pub fn shared() -> &'static FakeGcs {
        static SHARED: OnceLock<FakeGcs> = OnceLock::new();
        SHARED.get_or_init(FakeGcs::launch)
    }

    fn launch() -> FakeGcs {
        static BIN: OnceLock<PathBuf> = OnceLock::new();
        let bin = BIN
            .get_or_init(|| {
                PathBuf::from(run_script("tests/peers/build-fake-gcs.sh")).join("fake-gcs-server")
            })
            .clone();
        let port = free_port();
        let launch = move |data: &Path| {
            let mut cmd = Command::new(&bin);
            cmd.args(["-scheme", "http", "-host", "127.0.0.1"])
                .args(["-port", &port.to_string()])
                .args(["-backend", "filesystem"])
                .arg("-filesystem-root")
                .arg(data)
                .args(["-public-host", &format!("127.0.0.1:{port}")])
                .args(["-external-url", &format!("http://127.0.0.1:{port}")]);
            cmd
        };
        let server = Server::new(
            "fake-gcs-server",
            scratch("fake-gcs"),
            Box::new(launch),
            Box::new(move || http_status(port, "/storage/v1/b") == Some(200)),
        );
        server.start();
        FakeGcs {
            endpoint: format!("http://127.0.0.1:{port}"),
            _server: server,
        }
    }

    /// A service-account key that object_store accepts without contacting Google:
    /// `disable_oauth` sends no token (fake-gcs-server checks none).
    pub fn credentials(&self) -> String {
        serde_json::json!({
            "type": "service_account",
            "client_email": "velero@test.iam.gserviceaccount.com",
            "private_key_id": "unused",
            "private_key": "unused",
            "disable_oauth": true,
        })
        .to_string()
    }

    pub fn location(&self, bucket: &str, prefix: Option<&str>) -> Location {
        Location {
            spec: spec("gcp", bucket, prefix, &[("storeEndpoint", &self.endpoint)]),
            credential: self.credentials().into_bytes(),
        }
    }

    /// Creates a bucket through the JSON API (object_store cannot create buckets).
    pub async fn create_bucket(&self, bucket: &str) {
        let url = format!("{}/storage/v1/b?project=test", self.endpoint);
        let body = serde_json::json!({ "name": bucket }).to_string();
        retry(
            &format!("creating bucket {bucket} on fake-gcs-server"),
            || async {
                let mut request = request("POST", &url, HttpRequestBody::from(body.clone()));
                request.headers_mut().insert(
                    "content-type",
                    "application/json"
                        .parse()
                        .unwrap_or_else(|e| panic!("header: {e}")),
                );
                send(request).await
            },
        )
        .await;
    }

    /// Puts objects through the JSON API's media upload (fake-gcs-server does not take the
    /// XML API's PUT that object_store uses).
    pub async fn seed(&self, bucket: &str, keys: &[&str]) {
        self.create_bucket(bucket).await;
        for key in keys {
            let url = format!(
                "{}/upload/storage/v1/b/{bucket}/o?uploadType=media&name={key}",
                self.endpoint
            );
            retry(&format!("uploading {key} to fake-gcs-server"), || async {
                send(request(
                    "POST",
                    &url,
                    HttpRequestBody::from("x".to_string()),
                ))
                .await
            })
            .await;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Azurite

pub struct Azurite {
    /// The account URL, path style: http://127.0.0.1:PORT/devstoreaccount1 (https:// for
    /// [`Azurite::shared_tls`]).
    pub endpoint: String,
    tls: bool,
    _server: Server,
}

impl Azurite {
    pub fn shared() -> &'static Azurite {
        static SHARED: OnceLock<Azurite> = OnceLock::new();
        SHARED.get_or_init(|| Azurite::launch(false))
    }

    /// One serving HTTPS only, with a certificate for 127.0.0.1 from [`test_ca_pem`].
    pub fn shared_tls() -> &'static Azurite {
        static SHARED: OnceLock<Azurite> = OnceLock::new();
        SHARED.get_or_init(|| Azurite::launch(true))
    }

    fn launch(tls: bool) -> Azurite {
        static BIN: OnceLock<PathBuf> = OnceLock::new();
        let bin = BIN
            .get_or_init(|| PathBuf::from(run_script("tests/peers/install-azurite.sh")))
            .clone();
        let port = free_port();
        let dir = scratch(if tls { "azurite-tls" } else { "azurite" });
        let (cert, key) = (dir.join("serving.crt"), dir.join("serving.key"));
        if tls {
            let pem = test_ca()
                .issue_server(&["localhost"], &[Ipv4Addr::LOCALHOST.into()])
                .unwrap_or_else(|e| panic!("certificates: {e}"));
            write(&cert, &pem.cert);
            write(&key, &pem.key);
        }
        let launch = move |data: &Path| {
            let mut cmd = Command::new(&bin);
            cmd.args(["--blobHost", "127.0.0.1", "--blobPort", &port.to_string()])
                .arg("-l")
                .arg(data)
                .args(["--skipApiVersionCheck", "--loose", "--disableTelemetry"]);
            if tls {
                cmd.arg("--cert").arg(&cert).arg("--key").arg(&key);
            }
            cmd
        };
        let ready: Ready = if tls {
            // A plain-text probe gets no HTTP answer from a TLS port; listening is enough.
            Box::new(move || TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_ok())
        } else {
            // Any HTTP answer means it serves.
            Box::new(move || http_status(port, "/").is_some())
        };
        let server = Server::new("Azurite", dir, Box::new(launch), ready);
        server.start();
        let scheme = if tls { "https" } else { "http" };
        Azurite {
            endpoint: format!("{scheme}://127.0.0.1:{port}/{AZURITE_ACCOUNT}"),
            tls,
            _server: server,
        }
    }

    /// The env-style credentials file Velero's azure plugin reads.
    pub fn credentials(&self) -> String {
        format!(
            "AZURE_STORAGE_ACCOUNT_ACCESS_KEY={AZURITE_KEY}\nAZURE_CLOUD_NAME=AzurePublicCloud\n"
        )
    }

    pub fn location(&self, container: &str, prefix: Option<&str>) -> Location {
        Location {
            spec: spec(
                "azure",
                container,
                prefix,
                &[
                    ("storageAccount", AZURITE_ACCOUNT),
                    ("storageAccountURI", &self.endpoint),
                    ("resourceGroup", "test"),
                ],
            ),
            credential: self.credentials().into_bytes(),
        }
    }

    /// Creates a container with a SharedKey-signed PUT (object_store cannot create them).
    pub async fn create_container(&self, container: &str) {
        let key = AzureAccessKey::try_new(AZURITE_KEY).unwrap_or_else(|e| panic!("key: {e}"));
        let credential = AzureCredential::AccessKey(key);
        let url = format!("{}/{container}?restype=container", self.endpoint);
        retry(
            &format!("creating container {container} on Azurite"),
            || async {
                let mut request = request("PUT", &url, HttpRequestBody::empty());
                AzureAuthorizer::new(&credential, AZURITE_ACCOUNT)
                    .try_authorize(&mut request)
                    .unwrap_or_else(|e| panic!("signing: {e}"));
                // A retry after a create that did land answers 409: the container is there.
                match send(request).await {
                    Err(e) if e.contains("ContainerAlreadyExists") => Ok(()),
                    other => other,
                }
            },
        )
        .await;
    }

    pub fn store(&self, container: &str) -> Arc<dyn ObjectStore> {
        let mut options = ClientOptions::new().with_allow_http(true);
        if self.tls {
            let ca = Certificate::from_pem(test_ca_pem().as_bytes())
                .unwrap_or_else(|e| panic!("test CA: {e}"));
            options = options.with_root_certificate(ca);
        }
        let store = MicrosoftAzureBuilder::new()
            .with_account(AZURITE_ACCOUNT)
            .with_access_key(AZURITE_KEY)
            .with_endpoint(self.endpoint.clone())
            .with_client_options(options)
            .with_container_name(container)
            .build()
            .unwrap_or_else(|e| panic!("Azure store for {container}: {e}"));
        Arc::new(store)
    }

    pub async fn seed(&self, container: &str, keys: &[&str]) {
        self.create_container(container).await;
        put_all(&*self.store(container), keys).await;
    }
}

// ---------------------------------------------------------------------------------------------
// moto

/// moto's S3 server standing in for AWS itself: like AWS, it answers a HEAD of a bucket with
/// the bucket's region (x-amz-bucket-region). It accepts any credentials.
pub struct Moto {
    /// e.g. http://127.0.0.1:41009
    pub endpoint: String,
    _server: Server,
}

impl Moto {
    pub fn shared() -> &'static Moto {
        static SHARED: OnceLock<Moto> = OnceLock::new();
        SHARED.get_or_init(|| {
            let bin = PathBuf::from(run_script("tests/peers/install-moto.sh"));
            let port = free_port();
            let launch = move |_: &Path| {
                let mut cmd = Command::new(&bin);
                cmd.args(["-H", "127.0.0.1", "-p", &port.to_string()]);
                cmd
            };
            let ready = move || http_status(port, "/").is_some();
            let server = Server::new("moto", scratch("moto"), Box::new(launch), Box::new(ready));
            server.start();
            Moto {
                endpoint: format!("http://127.0.0.1:{port}"),
                _server: server,
            }
        })
    }

    /// An aws BSL on this bucket that names neither region nor s3Url, as for AWS itself.
    pub fn location(&self, bucket: &str) -> Location {
        Location {
            spec: spec("aws", bucket, None, &[]),
            credential: credentials_ini("AKIAMOTOTESTKEY00000", "moto-test-secret-key")
                .into_bytes(),
        }
    }

    /// Creates the bucket in `region` as the AWS CLI does (a CreateBucketConfiguration, signed
    /// for that region) and puts one small object at each key.
    pub async fn seed(&self, bucket: &str, region: &str, keys: &[&str]) {
        let credential = AwsCredential {
            key_id: "AKIAMOTOTESTKEY00000".into(),
            secret_key: "moto-test-secret-key".into(),
            token: None,
        };
        let url = format!("{}/{bucket}", self.endpoint);
        let body = format!(
            "<CreateBucketConfiguration><LocationConstraint>{region}</LocationConstraint>\
             </CreateBucketConfiguration>"
        );
        retry(&format!("creating bucket {bucket} on moto"), || async {
            let mut request = request("PUT", &url, HttpRequestBody::from(body.clone()));
            request.headers_mut().insert(
                "content-type",
                hyper::header::HeaderValue::from_static("application/xml"),
            );
            AwsAuthorizer::new(&credential, "s3", region)
                .try_authorize(&mut request, None)
                .unwrap_or_else(|e| panic!("signing: {e}"));
            match send(request).await {
                Err(e) if e.contains("BucketAlreadyOwnedByYou") => Ok(()),
                other => other,
            }
        })
        .await;
        let store = AmazonS3Builder::new()
            .with_bucket_name(bucket)
            .with_region(region)
            .with_endpoint(&self.endpoint)
            .with_allow_http(true)
            .with_access_key_id(&credential.key_id)
            .with_secret_access_key(&credential.secret_key)
            .build()
            .unwrap_or_else(|e| panic!("S3 store for {bucket}: {e}"));
        put_all(&store, keys).await;
    }
}

// ---------------------------------------------------------------------------------------------
// Shared plumbing

/// The CA of the TLS peers' serving certificates, one per test binary.
fn test_ca() -> &'static Ca {
    static CA: OnceLock<Ca> = OnceLock::new();
    CA.get_or_init(|| Ca::new("bsl-sentinel storage test CA").unwrap_or_else(|e| panic!("CA: {e}")))
}

/// The PEM a BSL's caCert (or the Secret caCertRef names) would hold to trust the TLS peers.
pub fn test_ca_pem() -> String {
    test_ca().cert_pem()
}

/// Writes one small object at each key.
pub async fn put_all(store: &dyn ObjectStore, keys: &[&str]) {
    for key in keys {
        store
            .put(&StorePath::from(*key), PutPayload::from_static(b"x"))
            .await
            .unwrap_or_else(|e| panic!("putting {key}: {e}"));
    }
}

fn request(method: &str, url: &str, body: HttpRequestBody) -> HttpRequest {
    hyper::Request::builder()
        .method(method)
        .uri(url)
        .body(body)
        .unwrap_or_else(|e| panic!("request {method} {url}: {e}"))
}

/// Sends through object_store's own HTTP client; Err describes a failure or an error status.
/// No connection stays open afterwards, so tests that count connections see only the probe's.
async fn send(request: HttpRequest) -> Result<(), String> {
    static CLIENT: OnceLock<HttpClient> = OnceLock::new();
    let client = CLIENT.get_or_init(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let ca = reqwest::Certificate::from_pem(test_ca_pem().as_bytes())
            .unwrap_or_else(|e| panic!("test CA: {e}"));
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .tls_certs_merge([ca])
            .build()
            .unwrap_or_else(|e| panic!("HTTP client: {e}"));
        HttpClient::new(client)
    });
    let response = client.execute(request).await.map_err(|e| e.to_string())?;
    let status = response.status();
    if status.is_success() {
        return Ok(());
    }
    let body = http_body_util::BodyExt::collect(response.into_body())
        .await
        .map(|b| String::from_utf8_lossy(&b.to_bytes()).into_owned())
        .unwrap_or_default();
    Err(format!("{status}: {body}"))
}

/// Retries a seeding step for up to 30 s: a fresh server may refuse its first writes.
async fn retry<Fut>(what: &str, step: impl FnMut() -> Fut)
where
    Fut: std::future::Future<Output = Result<(), String>>,
{
    eventually(what, Duration::from_secs(30), step).await
}

/// The status of a plain HTTP/1.0 GET to 127.0.0.1, or None when nothing answers.
fn http_status(port: u16, path: &str) -> Option<u16> {
    let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n"
    )
    .ok()?;
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).ok()?;
    std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
}

/// `n` distinct free ports.
pub fn free_ports(n: usize) -> Vec<u16> {
    let mut ports: Vec<u16> = Vec::with_capacity(n);
    while ports.len() < n {
        let port = free_port();
        if !ports.contains(&port) {
            ports.push(port);
        }
    }
    ports
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

type Launch = Box<dyn Fn(&Path) -> Command + Send + Sync>;
type Ready = Box<dyn Fn() -> bool + Send + Sync>;
/// A server's process, while it runs.
type Slot = Arc<Mutex<Option<Child>>>;

/// One peer process that can be stopped and started again with the same command.
struct Server {
    name: &'static str,
    dir: PathBuf,
    launch: Launch,
    ready: Ready,
    child: Slot,
    starts: AtomicUsize,
}

impl Server {
    fn new(name: &'static str, dir: PathBuf, launch: Launch, ready: Ready) -> Server {
        let child = Arc::new(Mutex::new(None));
        running()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(child.clone());
        Server {
            name,
            dir,
            launch,
            ready,
            child,
            starts: AtomicUsize::new(0),
        }
    }

    /// Starts the process on fresh data and waits until it serves.
    fn start(&self) {
        let n = self.starts.fetch_add(1, Ordering::Relaxed);
        let data = self.dir.join(format!("data-{n}"));
        std::fs::create_dir_all(&data).unwrap_or_else(|e| panic!("{}: {e}", data.display()));
        let log = self.dir.join(format!("{}-{n}.log", self.name));
        let child = spawn((self.launch)(&data), &log);
        *self.child.lock().unwrap_or_else(|e| e.into_inner()) = Some(child);
        wait_for(self.name, &log, Duration::from_secs(60), &self.ready);
    }

    fn stop(&self) {
        if let Some(mut child) = self.child.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Every server's process slot, for the atexit hook.
fn running() -> &'static Mutex<Vec<Slot>> {
    static RUNNING: OnceLock<Mutex<Vec<Slot>>> = OnceLock::new();
    RUNNING.get_or_init(|| {
        // SAFETY: registering a plain extern "C" fn with no captured state.
        #[allow(unsafe_code)]
        unsafe {
            libc::atexit(teardown)
        };
        Mutex::new(Vec::new())
    })
}

extern "C" fn teardown() {
    if let Some(servers) = running().try_lock().ok().as_deref() {
        for slot in servers {
            if let Ok(mut child) = slot.try_lock()
                && let Some(child) = child.as_mut()
            {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
    let _ = std::fs::remove_dir_all(root());
    // The binary's folder too, unless the control plane still uses it (it removes its own).
    if let Some(parent) = root().parent() {
        let _ = std::fs::remove_dir(parent);
    }
}

/// This binary's folder for storage peers (under the folder the control plane also uses,
/// whose stale entries it removes).
fn root() -> PathBuf {
    std::env::temp_dir()
        .join("bsl-sentinel-tests")
        .join(std::process::id().to_string())
        .join("storage")
}

/// A fresh folder for one server.
fn scratch(name: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = root().join(format!("{name}-{}", N.fetch_add(1, Ordering::Relaxed)));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    dir
}
