//! HTTP/1.1 connections to storage endpoints, with a hard bound on the sockets open to each.
//!
//! An endpoint has `limit` lanes. A socket lives only in a lane, and a request holds a lane
//! from sending until its response body ends or is dropped, so at most `limit` sockets are open
//! per endpoint, counting every host its checks talk to (virtual-hosted buckets, token
//! services). A pool that races a new connect against a connection being returned (hyper's,
//! under reqwest) cannot promise that; the seed's maintainers asked for exactly this bound.
//!
//! A lane keeps its connection for the next request to the same origin with the same TLS
//! settings; otherwise the old socket is closed before a new one is opened. Requests go
//! through the proxies the environment names ([`crate::proxy`]).

use std::fmt;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{HOST, HeaderValue, PROXY_AUTHORIZATION, USER_AGENT};
use hyper::{Request, Uri};
use hyper_util::rt::TokioIo;
use object_store::client::{
    HttpError, HttpErrorKind, HttpRequest, HttpRequestBody, HttpResponse, HttpResponseBody,
    HttpService,
};
use rustls::ClientConfig;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;

use crate::proxy::{Proxies, Proxy, authority};

tokio::task_local! {
    /// Where the requests of the check running in this task stand.
    static PROGRESS: Arc<Progress>;
}

/// The step a check's requests are in, so that a check that times out can say what it timed
/// out on (connecting, the TLS handshake, the first byte of the response).
#[derive(Debug, Default)]
pub struct Progress(Mutex<Option<Step>>);

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    Lane(String),
    Connect(String),
    Tunnel(String),
    Tls(String),
    FirstByte(String),
    Body(String),
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Lane(origin) => write!(f, "waiting for a free connection to {origin}"),
            Step::Connect(address) => write!(f, "connecting to {address}"),
            Step::Tunnel(proxy) => write!(f, "opening a tunnel through proxy {proxy}"),
            Step::Tls(host) => write!(f, "in the TLS handshake with {host}"),
            Step::FirstByte(origin) => {
                write!(
                    f,
                    "waiting for the first byte of the response from {origin}"
                )
            }
            Step::Body(origin) => write!(f, "reading the response from {origin}"),
        }
    }
}

impl Progress {
    /// Runs `f` (a check) with its requests reporting their steps here.
    pub async fn track<F: std::future::Future>(self: &Arc<Self>, f: F) -> F::Output {
        PROGRESS.scope(self.clone(), f).await
    }

    /// The step the requests were in last.
    pub fn step(&self) -> Option<Step> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

fn enter(step: Step) {
    let _ = PROGRESS.try_with(|p| *p.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(step));
}

/// An idle connection older than this is closed rather than reused: servers close idle
/// keep-alive connections after a while, and a request on a closing one fails.
const MAX_IDLE: Duration = Duration::from_secs(30);

const AGENT: &str = concat!("bsl-sentinel/", env!("CARGO_PKG_VERSION"));

/// The lanes of one storage endpoint.
pub struct Lanes {
    permits: Arc<Semaphore>,
    /// Lanes no request holds; lanes are made on demand, and a new one only when this is empty,
    /// so there are never more lanes than permits.
    free: Mutex<Vec<Lane>>,
}

impl fmt::Debug for Lanes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lanes")
            .field("available", &self.permits.available_permits())
            .finish()
    }
}

impl Lanes {
    pub fn new(limit: usize) -> Arc<Lanes> {
        Arc::new(Lanes {
            permits: Arc::new(Semaphore::new(limit.max(1))),
            free: Mutex::new(Vec::new()),
        })
    }

    /// Waits for a lane, preferring one already connected to `origin` with `tls`.
    async fn lease(self: &Arc<Self>, origin: &Origin, tls: &Arc<ClientConfig>) -> Lease {
        // The semaphore is never closed.
        let permit = self.permits.clone().acquire_owned().await.ok();
        let lane = {
            let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
            let at = free
                .iter()
                .rposition(|l| l.conn.as_ref().is_some_and(|c| c.serves(origin, tls)))
                .or_else(|| free.iter().rposition(|l| l.conn.is_none()))
                .or_else(|| free.len().checked_sub(1));
            at.map(|i| free.swap_remove(i)).unwrap_or_default()
        };
        Lease {
            lanes: self.clone(),
            lane,
            _permit: permit,
        }
    }
}

#[derive(Default)]
struct Lane {
    conn: Option<Conn>,
}

/// One HTTP/1.1 connection; its socket is owned by the `driver` task.
struct Conn {
    origin: Origin,
    tls: Arc<ClientConfig>,
    sender: SendRequest<HttpRequestBody>,
    driver: JoinHandle<()>,
    /// Set when a response body ended cleanly; a connection whose request failed or whose body
    /// was dropped early is never reused.
    reusable: bool,
    idle_since: Instant,
}

impl Conn {
    fn serves(&self, origin: &Origin, tls: &Arc<ClientConfig>) -> bool {
        self.origin == *origin && Arc::ptr_eq(&self.tls, tls)
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

/// A lane held by one request; dropping it frees the lane.
struct Lease {
    lanes: Arc<Lanes>,
    lane: Lane,
    _permit: Option<OwnedSemaphorePermit>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        // The lane is back before the permit (a field, dropped after this) lets a waiter in.
        let lane = std::mem::take(&mut self.lane);
        let mut free = self.lanes.free.lock().unwrap_or_else(|e| e.into_inner());
        free.push(lane);
    }
}

impl Lease {
    /// A connection ready for a request to `origin`: the lane's own, or a new one once the old
    /// socket is closed.
    async fn connect(
        &mut self,
        origin: &Origin,
        proxy: Option<&Proxy>,
        tls: &Arc<ClientConfig>,
    ) -> Result<&mut SendRequest<HttpRequestBody>, HttpError> {
        let reuse = match &mut self.lane.conn {
            Some(c) if c.reusable && c.serves(origin, tls) && c.idle_since.elapsed() < MAX_IDLE => {
                c.sender.ready().await.is_ok()
            }
            _ => false,
        };
        if !reuse && let Some(mut old) = self.lane.conn.take() {
            old.driver.abort();
            let _ = (&mut old.driver).await;
        }
        let conn = match self.lane.conn.take() {
            Some(conn) => conn,
            None => open(origin, proxy, tls).await?,
        };
        let conn = self.lane.conn.insert(conn);
        conn.reusable = false;
        Ok(&mut conn.sender)
    }

    fn finished(&mut self) {
        if let Some(conn) = &mut self.lane.conn {
            conn.reusable = true;
            conn.idle_since = Instant::now();
        }
    }
}

async fn open(
    origin: &Origin,
    proxy: Option<&Proxy>,
    tls: &Arc<ClientConfig>,
) -> Result<Conn, HttpError> {
    let connect_error = |e: io::Error| HttpError::new(HttpErrorKind::Connect, e);
    let tcp = socket(origin.https, &origin.host, origin.port, proxy)
        .await
        .map_err(connect_error)?;
    let (sender, driver) = if origin.https {
        let stream = tls_handshake(tcp, &origin.host, origin.port, tls)
            .await
            .map_err(connect_error)?;
        handshake(stream).await?
    } else {
        handshake(tcp).await?
    };
    Ok(Conn {
        origin: origin.clone(),
        tls: tls.clone(),
        sender,
        driver,
        reusable: false,
        idle_since: Instant::now(),
    })
}

/// A socket on which to speak to host:port: connected to it, or to the proxy (and for https
/// tunnelled through it). Public so that `diagnose` makes the very connections checks make.
pub async fn socket(
    https: bool,
    host: &str,
    port: u16,
    proxy: Option<&Proxy>,
) -> io::Result<tokio::net::TcpStream> {
    let (to_host, to_port) = proxy.map_or((host, port), |p| (p.host(), p.port()));
    enter(Step::Connect(authority(to_host, to_port)));
    let mut tcp = tokio::net::TcpStream::connect((to_host, to_port)).await?;
    let _ = tcp.set_nodelay(true);
    if https && let Some(proxy) = proxy {
        enter(Step::Tunnel(authority(proxy.host(), proxy.port())));
        proxy.tunnel(&mut tcp, host, port).await?;
    }
    Ok(tcp)
}

/// The TLS handshake with host:port over `tcp`, verifying as `tls` says.
pub async fn tls_handshake(
    tcp: tokio::net::TcpStream,
    host: &str,
    port: u16,
    tls: &Arc<ClientConfig>,
) -> io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    let name = ServerName::try_from(host.to_string())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    enter(Step::Tls(authority(host, port)));
    tokio_rustls::TlsConnector::from(tls.clone())
        .connect(name, tcp)
        .await
}

async fn handshake<T>(io: T) -> Result<(SendRequest<HttpRequestBody>, JoinHandle<()>), HttpError>
where
    T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| HttpError::new(HttpErrorKind::Connect, e))?;
    let driver = tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "storage connection ended");
        }
    });
    Ok((sender, driver))
}

/// Where a request goes: scheme, host and port.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Origin {
    https: bool,
    /// Without the brackets of an IPv6 literal.
    host: String,
    port: u16,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.https { "https" } else { "http" };
        write!(f, "{scheme}://{}", authority(&self.host, self.port))
    }
}

impl Origin {
    fn of(uri: &Uri) -> Result<Origin, String> {
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            other => return Err(format!("unsupported URL scheme {other:?} in {uri}")),
        };
        let host = uri
            .host()
            .filter(|h| !h.is_empty())
            .ok_or_else(|| format!("no host in {uri}"))?;
        Ok(Origin {
            https,
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string(),
            port: uri.port_u16().unwrap_or(if https { 443 } else { 80 }),
        })
    }
}

/// An object_store HTTP client whose connections are the lanes of one endpoint.
#[derive(Clone, Debug)]
pub struct Client {
    lanes: Arc<Lanes>,
    tls: Arc<ClientConfig>,
    proxies: Arc<Proxies>,
}

impl Client {
    pub fn new(lanes: Arc<Lanes>, tls: Arc<ClientConfig>, proxies: Arc<Proxies>) -> Client {
        Client {
            lanes,
            tls,
            proxies,
        }
    }
}

#[async_trait::async_trait]
impl HttpService for Client {
    async fn call(&self, request: HttpRequest) -> Result<HttpResponse, HttpError> {
        let (mut parts, body) = request.into_parts();
        let unusable = |m: String| HttpError::new(HttpErrorKind::Unknown, io::Error::other(m));
        let origin = Origin::of(&parts.uri).map_err(unusable)?;
        // HTTP/1.1 wants a Host header and, without a proxy, the origin form; the connection
        // API leaves both to its caller.
        if !parts.headers.contains_key(HOST) {
            let authority = parts
                .uri
                .authority()
                .map(|a| a.as_str())
                .unwrap_or_default();
            let host = HeaderValue::from_str(authority)
                .map_err(|e| unusable(format!("host {authority:?}: {e}")))?;
            parts.headers.insert(HOST, host);
        }
        parts
            .headers
            .entry(USER_AGENT)
            .or_insert(HeaderValue::from_static(AGENT));
        let proxy = self.proxies.for_uri(&parts.uri);
        match proxy {
            // A plain-http request through a proxy names its target in absolute form.
            Some(proxy) if !origin.https => {
                if let Some(auth) = proxy.authorization() {
                    parts.headers.insert(PROXY_AUTHORIZATION, auth.clone());
                }
            }
            _ => {
                parts.uri = parts
                    .uri
                    .path_and_query()
                    .map(|p| Uri::from(p.clone()))
                    .unwrap_or_else(|| Uri::from_static("/"));
            }
        }

        enter(Step::Lane(origin.to_string()));
        let mut lease = self.lanes.lease(&origin, &self.tls).await;
        let sender = lease.connect(&origin, proxy, &self.tls).await?;
        enter(Step::FirstByte(origin.to_string()));
        let response = sender
            .send_request(Request::from_parts(parts, body))
            .await
            .map_err(|e| HttpError::new(HttpErrorKind::Request, e))?;
        enter(Step::Body(origin.to_string()));
        let (parts, body) = response.into_parts();
        let body = LeasedBody {
            body,
            lease: Some(lease),
        };
        Ok(HttpResponse::from_parts(parts, HttpResponseBody::new(body)))
    }
}

/// A response body that frees its lane when it ends or is dropped.
struct LeasedBody {
    body: Incoming,
    lease: Option<Lease>,
}

impl Body for LeasedBody {
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, HttpError>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.body).poll_frame(cx);
        match &polled {
            Poll::Ready(None) => {
                if let Some(mut lease) = this.lease.take() {
                    lease.finished();
                }
            }
            Poll::Ready(Some(Err(_))) => this.lease = None,
            _ => {}
        }
        polled.map_err(|e| HttpError::new(HttpErrorKind::Decode, e))
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl Drop for LeasedBody {
    fn drop(&mut self) {
        // A body read to its end without the final poll (a HEAD, an empty 204) leaves the
        // connection ready all the same.
        if self.body.is_end_stream()
            && let Some(lease) = &mut self.lease
        {
            lease.finished();
        }
    }
}

/// The TLS settings of a location: the platform's roots plus `ca` (a PEM bundle), or no
/// certificate checks at all when `insecure` (aws insecureSkipTLSVerify).
pub fn tls_config(ca: Option<&[u8]>, insecure: bool) -> Result<Arc<ClientConfig>, String> {
    let provider = crate::tls::provider();
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS settings: {e}"))?
        .dangerous();
    let builder = if insecure {
        builder.with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
    } else {
        let extra = match ca {
            Some(pem) => {
                let certs = CertificateDer::pem_slice_iter(pem)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| format!("the CA certificate is not a valid PEM bundle: {e}"))?;
                if certs.is_empty() {
                    return Err("the CA certificate bundle holds no certificate".to_string());
                }
                certs
            }
            None => Vec::new(),
        };
        let verifier = rustls_platform_verifier::Verifier::new_with_extra_roots(extra, provider)
            .map_err(|e| format!("the trusted roots: {e}"))?;
        builder.with_custom_certificate_verifier(Arc::new(verifier))
    };
    let mut config = builder.with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Accepts any server certificate, still checking the handshake signatures.
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origin_of_urls() {
        let origin = |u: &str| Origin::of(&u.parse().unwrap_or_else(|e| panic!("{u}: {e}")));
        assert_eq!(
            origin("https://b.s3.us-east-1.amazonaws.com/?list-type=2"),
            Ok(Origin {
                https: true,
                host: "b.s3.us-east-1.amazonaws.com".into(),
                port: 443
            })
        );
        assert_eq!(
            origin("http://[::1]:8333/bucket"),
            Ok(Origin {
                https: false,
                host: "::1".into(),
                port: 8333
            })
        );
        assert!(origin("ftp://example.com/").is_err());
        assert!(origin("/relative").is_err());
    }

    #[test]
    fn tls_settings_are_checked() {
        assert!(tls_config(None, false).is_ok());
        assert!(tls_config(None, true).is_ok());
        assert_eq!(
            tls_config(Some(b"not pem"), false).err().as_deref(),
            Some("the CA certificate bundle holds no certificate")
        );
    }
}
