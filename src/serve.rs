//! `bsl-sentinel serve`: wires the webhook (and, later, the reconciler) to a cluster. Every
//! piece keeps running whatever the BSLs' state: nothing here exits on BSL content.

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;

use crate::bsl::CRD_NAME;
use crate::cluster_view::Caches;
use crate::served_crd::ServedCrd;
use crate::tls::ReloadingCert;
use crate::webhook::{self, State};

#[derive(Clone, Debug)]
pub struct WebhookConfig {
    pub addr: SocketAddr,
    pub cert: PathBuf,
    pub key: PathBuf,
    /// How often the certificate files are compared with what is served.
    pub cert_reload_interval: Duration,
    /// How often the served CRD is re-read (Velero's or the project's may be installed later).
    pub crd_refresh_interval: Duration,
    /// The namespace whose Secrets the webhook may look up for its warnings.
    pub namespace: String,
    pub workers: usize,
}

pub struct Running {
    pub webhook_addr: SocketAddr,
    pub server: actix_web::dev::Server,
}

/// Starts the webhook and its background tasks on the current runtime.
pub fn start_webhook(config: &WebhookConfig, client: kube::Client) -> anyhow::Result<Running> {
    let cert = ReloadingCert::load(&config.cert, &config.key)?;
    tokio::spawn(cert.clone().watch(config.cert_reload_interval));
    let state = State::new(Caches::start(client.clone(), &config.namespace));
    tokio::spawn(refresh_served_crd(
        client,
        state.clone(),
        config.crd_refresh_interval,
    ));
    let listener = TcpListener::bind(config.addr)?;
    let (server, webhook_addr) = webhook::serve(listener, &cert, state, config.workers)?;
    tracing::info!(%webhook_addr, "admission webhook serving");
    Ok(Running {
        webhook_addr,
        server,
    })
}

async fn refresh_served_crd(client: kube::Client, state: Arc<State>, every: Duration) {
    let api: Api<CustomResourceDefinition> = Api::all(client);
    let mut tick = tokio::time::interval(every);
    loop {
        tick.tick().await;
        match api.get(CRD_NAME).await {
            Ok(crd) => {
                let served = ServedCrd::from_crd(&crd);
                if **state.served.load() != Some(served) {
                    tracing::info!(
                        unknown_phase_allowed = served.unknown_phase_allowed,
                        status_subresource = served.status_subresource,
                        "read the served BackupStorageLocation CRD"
                    );
                    state.served.store(Arc::new(Some(served)));
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, crd = CRD_NAME, "cannot read the CRD; keeping what was known")
            }
        }
    }
}
