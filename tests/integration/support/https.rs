//! A minimal HTTPS/1.1 client over one keep-alive connection (hyper + tokio-rustls), trusting
//! one CA: enough to drive the webhook like the apiserver does, and to see which certificate
//! the server presents.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};

pub struct Conn {
    sender: SendRequest<Full<Bytes>>,
    /// The leaf certificate the server presented in this connection's handshake.
    pub peer_cert: Vec<u8>,
}

pub fn client_config(ca_pem: &str) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()).flatten() {
        roots.add(cert).unwrap_or_else(|e| panic!("CA: {e}"));
    }
    let mut config = rustls::ClientConfig::builder_with_provider(bsl_sentinel::tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap_or_else(|e| panic!("tls: {e}"))
        .with_root_certificates(roots)
        .with_no_client_auth();
    // A resumed TLS 1.3 session reports the certificate of the session it resumes, not the one
    // the server holds now; every handshake is a full one so that a rotation is seen.
    config.resumption = rustls::client::Resumption::disabled();
    Arc::new(config)
}

pub async fn connect(addr: SocketAddr, tls: Arc<rustls::ClientConfig>) -> std::io::Result<Conn> {
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let name = ServerName::IpAddress(addr.ip().into());
    let stream = tokio_rustls::TlsConnector::from(tls)
        .connect(name, tcp)
        .await?;
    let peer_cert = stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.to_vec())
        .unwrap_or_default();
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(std::io::Error::other)?;
    tokio::spawn(connection);
    Ok(Conn { sender, peer_cert })
}

impl Conn {
    pub async fn request(
        &mut self,
        method: &str,
        path: &str,
        body: Bytes,
    ) -> hyper::Result<(u16, Bytes)> {
        let request = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header("host", "127.0.0.1")
            .header("content-type", "application/json")
            .body(Full::new(body))
            .unwrap_or_else(|e| panic!("request: {e}"));
        self.sender.ready().await?;
        let response = self.sender.send_request(request).await?;
        let status = response.status().as_u16();
        let body = response.into_body().collect().await?.to_bytes();
        Ok((status, body))
    }

    pub async fn post(&mut self, path: &str, body: impl Into<Bytes>) -> (u16, Bytes) {
        self.request("POST", path, body.into())
            .await
            .unwrap_or_else(|e| panic!("POST {path}: {e}"))
    }

    pub async fn get(&mut self, path: &str) -> (u16, Bytes) {
        self.request("GET", path, Bytes::new())
            .await
            .unwrap_or_else(|e| panic!("GET {path}: {e}"))
    }
}
