//! The webhook's serving certificate, reloaded from its files when they change, without a
//! restart: new TLS handshakes get the new certificate, connections already open keep theirs.
//! Kubernetes updates a mounted Secret by swapping a `..data` symlink, so the files are compared
//! by content, never by mtime or inode.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: no PEM certificate found")]
    NoCertificate { path: PathBuf },
    #[error("{path}: no usable PEM private key: {reason}")]
    BadKey { path: PathBuf, reason: String },
    #[error("certificate and key do not belong together: {0}")]
    Mismatch(rustls::Error),
}

pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

#[derive(Debug)]
pub struct ReloadingCert {
    cert_path: PathBuf,
    key_path: PathBuf,
    provider: Arc<CryptoProvider>,
    current: ArcSwap<CertifiedKey>,
    /// The bytes behind `current`, to tell a real change from a re-read.
    loaded: Mutex<(Vec<u8>, Vec<u8>)>,
}

impl ReloadingCert {
    pub fn load(cert_path: &Path, key_path: &Path) -> Result<Arc<Self>, TlsError> {
        let provider = provider();
        let (cert, key) = (read(cert_path)?, read(key_path)?);
        let certified = parse(cert_path, &cert, key_path, &key, &provider)?;
        Ok(Arc::new(ReloadingCert {
            cert_path: cert_path.to_path_buf(),
            key_path: key_path.to_path_buf(),
            provider,
            current: ArcSwap::from_pointee(certified),
            loaded: Mutex::new((cert, key)),
        }))
    }

    /// Re-reads the files; swaps in the new pair when it changed and is valid. Ok(true) when
    /// swapped. A pair caught halfway through an update fails and is retried on the next call.
    pub fn reload(&self) -> Result<bool, TlsError> {
        let (cert, key) = (read(&self.cert_path)?, read(&self.key_path)?);
        let mut loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        if loaded.0 == cert && loaded.1 == key {
            return Ok(false);
        }
        let certified = parse(&self.cert_path, &cert, &self.key_path, &key, &self.provider)?;
        self.current.store(Arc::new(certified));
        *loaded = (cert, key);
        Ok(true)
    }

    pub fn server_config(self: &Arc<Self>) -> Result<rustls::ServerConfig, rustls::Error> {
        let mut config = rustls::ServerConfig::builder_with_provider(self.provider.clone())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_cert_resolver(self.clone());
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(config)
    }

    /// Polls the files until the process ends.
    pub async fn watch(self: Arc<Self>, every: Duration) {
        let mut tick = tokio::time::interval(every);
        let mut last_error = None;
        loop {
            tick.tick().await;
            match self.reload() {
                Ok(true) => {
                    tracing::info!(cert = %self.cert_path.display(), "serving certificate reloaded");
                    last_error = None;
                }
                Ok(false) => last_error = None,
                Err(e) => {
                    // A pair read mid-rotation heals on the next tick; say so only if it stays.
                    let message = e.to_string();
                    if last_error.as_ref() == Some(&message) {
                        tracing::warn!(error = %message, "keeping the current serving certificate");
                    }
                    last_error = Some(message);
                }
            }
        }
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_path_buf(),
        source,
    })
}

fn parse(
    cert_path: &Path,
    cert: &[u8],
    key_path: &Path,
    key: &[u8],
    provider: &CryptoProvider,
) -> Result<CertifiedKey, TlsError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert)
        .filter_map(Result::ok)
        .collect();
    if chain.is_empty() {
        return Err(TlsError::NoCertificate {
            path: cert_path.to_path_buf(),
        });
    }
    let bad_key = |reason: String| TlsError::BadKey {
        path: key_path.to_path_buf(),
        reason,
    };
    let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| bad_key(e.to_string()))?;
    CertifiedKey::from_der(chain, key, provider).map_err(|e| match e {
        rustls::Error::InconsistentKeys(_) => TlsError::Mismatch(e),
        other => bad_key(other.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A self-signed pair for localhost; each call has a new key.
    fn pair() -> Result<(String, String), rcgen::Error> {
        let c = rcgen::generate_simple_self_signed(vec!["localhost".to_string()])?;
        Ok((c.cert.pem(), c.signing_key.serialize_pem()))
    }

    fn write_pair(dir: &Path, cert: &str, key: &str) {
        std::fs::write(dir.join("tls.crt"), cert).unwrap_or_default();
        std::fs::write(dir.join("tls.key"), key).unwrap_or_default();
    }

    fn serial(cert: &ReloadingCert) -> Vec<u8> {
        cert.current.load().cert[0].to_vec()
    }

    #[test]
    fn reloads_only_on_change_and_keeps_serving_on_bad_files()
    -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let (first_cert, first_key) = pair()?;
        write_pair(dir.path(), &first_cert, &first_key);
        let cert = ReloadingCert::load(&dir.path().join("tls.crt"), &dir.path().join("tls.key"))?;
        let before = serial(&cert);
        assert!(!cert.reload()?, "unchanged files are not a reload");

        // Half-written: new cert, old key. Refused; the old pair keeps serving.
        let (second_cert, second_key) = pair()?;
        std::fs::write(dir.path().join("tls.crt"), &second_cert)?;
        assert!(matches!(cert.reload(), Err(TlsError::Mismatch(_))));
        assert_eq!(serial(&cert), before);

        std::fs::write(dir.path().join("tls.key"), &second_key)?;
        assert!(cert.reload()?);
        assert_ne!(serial(&cert), before);

        std::fs::write(dir.path().join("tls.crt"), "not pem")?;
        assert!(matches!(cert.reload(), Err(TlsError::NoCertificate { .. })));
        Ok(())
    }
}
