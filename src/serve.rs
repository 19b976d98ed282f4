//! `bsl-sentinel serve`: wires the webhook, the reconciler and the admin port to a cluster.
//! Every piece keeps running whatever the BSLs' state: nothing here exits on BSL content.

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;

use crate::admin::{self, Admin};
use crate::bsl::CRD_NAME;
use crate::cluster_view::Caches;
use crate::readiness::Readiness;
use crate::served_crd::{ServedCrd, SharedServedCrd};
use crate::tls::ReloadingCert;
use crate::webhook::{self, State};

#[derive(Clone, Debug)]
pub struct WebhookConfig {
    pub addr: SocketAddr,
    pub cert: PathBuf,
    pub key: PathBuf,
    /// How often the certificate files are compared with what is served.
    pub cert_reload_interval: Duration,
    /// The namespace whose Secrets the webhook may look up for its warnings.
    pub namespace: String,
    pub workers: usize,
}

pub struct Running {
    pub addr: SocketAddr,
    pub server: actix_web::dev::Server,
}

/// Reads the served BSL CRD now and every `every` (Velero's or the project's may be installed
/// or replaced later); the webhook and the reconciler adapt to what it allows.
pub fn watch_served_crd(client: kube::Client, every: Duration) -> SharedServedCrd {
    let served = SharedServedCrd::default();
    tokio::spawn(refresh_served_crd(client, served.clone(), every));
    served
}

async fn refresh_served_crd(client: kube::Client, served: SharedServedCrd, every: Duration) {
    let api: Api<CustomResourceDefinition> = Api::all(client);
    let mut tick = tokio::time::interval(every);
    // Failures are logged when they start and when they end, not on every tick.
    let mut failing = 0u64;
    loop {
        tick.tick().await;
        match api.get(CRD_NAME).await {
            Ok(crd) => {
                if failing > 0 {
                    tracing::info!(
                        failures = failing,
                        crd = CRD_NAME,
                        "the CRD can be read again"
                    );
                    failing = 0;
                }
                let now = ServedCrd::from_crd(&crd);
                if **served.load() != Some(now) {
                    tracing::info!(
                        unknown_phase_allowed = now.unknown_phase_allowed,
                        status_subresource = now.status_subresource,
                        "read the served BackupStorageLocation CRD"
                    );
                    served.store(Arc::new(Some(now)));
                }
            }
            Err(e) => {
                failing += 1;
                if failing == 1 {
                    tracing::warn!(error = %e, crd = CRD_NAME, "cannot read the CRD; keeping what was known");
                }
            }
        }
    }
}

/// Starts the webhook and its background tasks on the current runtime.
pub fn start_webhook(
    config: &WebhookConfig,
    client: kube::Client,
    served: SharedServedCrd,
    readiness: Readiness,
) -> anyhow::Result<Running> {
    let cert = ReloadingCert::load(&config.cert, &config.key)?;
    tokio::spawn(cert.clone().watch(config.cert_reload_interval));
    let state = Arc::new(State {
        served,
        readiness,
        cluster: Box::new(Caches::start(client, &config.namespace)),
    });
    let listener = TcpListener::bind(config.addr)?;
    let (server, addr) = webhook::serve(listener, &cert, state, config.workers)?;
    tracing::info!(%addr, "admission webhook serving");
    Ok(Running { addr, server })
}

/// Starts the admin port: /livez, /readyz, /metrics.
pub fn start_admin(addr: SocketAddr, admin: Admin) -> anyhow::Result<Running> {
    let (server, addr) = admin::serve(TcpListener::bind(addr)?, admin)?;
    tracing::info!(%addr, "admin port serving");
    Ok(Running { addr, server })
}
