//! `bsl-sentinel serve`: the composition root. The flags come in one group per component; this
//! wires the webhook, the reconciler (under the Lease), and the admin port to a cluster and
//! runs the graceful stop. Every piece keeps running whatever the BSLs' state: nothing here
//! exits on BSL content.

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;

use crate::admin::{self, Admin};
use crate::bsl::CRD_NAME;
use crate::cluster_view::Caches;
use crate::duration::GoDuration;
use crate::leader::{self, Election};
use crate::metrics::Metrics;
use crate::proxy::Proxies;
use crate::readiness::Readiness;
use crate::reconciler::{self, Context, ReconcilerConfig};
use crate::served_crd::{ServedCrd, SharedServedCrd};
use crate::tls::ReloadingCert;
use crate::webhook::{self, State};

#[derive(Args)]
pub struct ServeArgs {
    /// Run the admission webhook. Turn off to run only the reconciler.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub webhook: bool,
    /// Run the reconciler (status writer). Turn off beside a Velero server that validates its
    /// BSLs itself, so the two never fight over status (webhook-only mode).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub reconciler: bool,
    /// Namespace of bsl-sentinel and of the BSLs' Secrets.
    #[arg(long, env = "POD_NAMESPACE", default_value = "velero")]
    pub namespace: String,
    /// This replica's identity in the Lease and the status (default: POD_NAME, else hostname).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// How often the served BSL CRD is re-read to learn what it allows.
    #[arg(long, default_value = "30s", value_parser = positive_duration)]
    pub crd_refresh_interval: Duration,
    /// On SIGTERM: how long readiness is false while the webhook still serves (so the
    /// Service stops sending reviews), and then the most time in-flight checks, status
    /// writes and reviews get to finish before the Lease is released.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub shutdown_grace: Duration,
    #[command(flatten)]
    pub webhook_args: WebhookArgs,
    #[command(flatten)]
    pub reconciler_args: ReconcilerArgs,
    #[command(flatten)]
    pub election: ElectionArgs,
    #[command(flatten)]
    pub admin: AdminArgs,
}

#[derive(Args, Clone, Debug)]
pub struct WebhookArgs {
    /// Address the webhook listens on (HTTPS).
    #[arg(
        id = "webhook_addr",
        value_name = "WEBHOOK_ADDR",
        long = "webhook-addr",
        default_value = "0.0.0.0:8443"
    )]
    pub addr: SocketAddr,
    /// PEM certificate (chain) the webhook serves; reloaded when it changes.
    #[arg(
        id = "tls_cert",
        value_name = "TLS_CERT",
        long = "tls-cert",
        default_value = "/etc/bsl-sentinel/tls/tls.crt"
    )]
    pub cert: PathBuf,
    /// PEM private key of the certificate.
    #[arg(
        id = "tls_key",
        value_name = "TLS_KEY",
        long = "tls-key",
        default_value = "/etc/bsl-sentinel/tls/tls.key"
    )]
    pub key: PathBuf,
    /// How often the certificate files are checked for changes.
    #[arg(long, default_value = "10s", value_parser = positive_duration)]
    pub cert_reload_interval: Duration,
    /// Worker threads serving the webhook.
    #[arg(id = "webhook_workers", value_name = "WEBHOOK_WORKERS", long = "webhook-workers", default_value_t = 2, value_parser = positive_count)]
    pub workers: usize,
}

#[derive(Args, Clone, Debug)]
pub struct ReconcilerArgs {
    /// Reconcile BSLs in every namespace, not only in --namespace.
    #[arg(long)]
    pub all_namespaces: bool,
    /// How often a BSL is checked when its spec sets no validationFrequency (Velero's
    /// --store-validation-frequency); 0 checks each BSL once and on spec changes.
    #[arg(long, default_value = "1m", value_parser = parse_duration)]
    pub validation_frequency: Duration,
    /// Each storage check gives up after this long, counted from its endpoint's turn.
    #[arg(long, default_value = "10s", value_parser = positive_duration)]
    pub check_timeout: Duration,
    /// Most sockets ever open to one storage endpoint, and most checks of it at once.
    #[arg(long, default_value_t = 4, value_parser = positive_count)]
    pub max_connections_per_endpoint: usize,
    /// How long a credential Secret read is reused by further checks.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub secret_cache_ttl: Duration,
    /// The BSLs' health is logged when it changes and at least this often.
    #[arg(long, default_value = "5m", value_parser = positive_duration)]
    pub health_log_interval: Duration,
}

impl ReconcilerArgs {
    /// What the reconciler runs with: these flags and what the process knows of itself.
    pub fn config(&self, namespace: &str, identity: &str, proxies: Proxies) -> ReconcilerConfig {
        ReconcilerConfig {
            namespace: (!self.all_namespaces).then(|| namespace.to_string()),
            status_namespace: namespace.to_string(),
            identity: identity.to_string(),
            check_timeout: self.check_timeout,
            default_frequency: self.validation_frequency,
            per_endpoint: self.max_connections_per_endpoint,
            proxies,
            secret_ttl: self.secret_cache_ttl,
            health_reminder: self.health_log_interval,
        }
    }
}

#[derive(Args, Clone, Debug)]
pub struct ElectionArgs {
    /// Elect one status writer among the replicas with a Lease; off runs the reconciler
    /// unconditionally (one replica only).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_election: bool,
    /// Name of the Lease in --namespace.
    #[arg(long, default_value = "bsl-sentinel")]
    pub lease_name: String,
    /// How long a leader's claim lasts without renewal; another replica takes over after it.
    /// The leader steps down when it could not renew for 2/3 of it, and retries every fifth.
    #[arg(long, default_value = "15s", value_parser = lease_duration)]
    pub lease_duration: Duration,
}

#[derive(Args, Clone, Debug)]
pub struct AdminArgs {
    /// Address of the admin port (HTTP): /livez, /readyz, /metrics, /status.
    #[arg(
        id = "admin_addr",
        value_name = "ADMIN_ADDR",
        long = "admin-addr",
        default_value = "0.0.0.0:8080"
    )]
    pub addr: SocketAddr,
}

/// Flags take Kubernetes durations ("10s", "1m30s"), like Velero's.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let d = GoDuration::parse(text).map_err(|e| e.to_string())?;
    d.to_std().ok_or_else(|| format!("{text:?} is negative"))
}

/// An interval or timeout: zero would spin a loop or fail every check.
pub fn positive_duration(text: &str) -> Result<Duration, String> {
    match parse_duration(text)? {
        d if d.is_zero() => Err(format!("{text:?}: must be more than 0")),
        d => Ok(d),
    }
}

/// The Lease records whole seconds.
fn lease_duration(text: &str) -> Result<Duration, String> {
    let d = parse_duration(text)?;
    if d < Duration::from_secs(1) || d.subsec_nanos() != 0 {
        return Err(format!(
            "{text:?}: must be a whole number of seconds, at least 1s"
        ));
    }
    Ok(d)
}

fn positive_count(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("{text:?}: {e}")),
    }
}

pub struct Running {
    pub addr: SocketAddr,
    pub server: actix_web::dev::Server,
}

/// Log targets kept quiet whatever RUST_LOG says about the rest (naming one of these targets
/// in RUST_LOG still wins): each logs per request or per check what bsl-sentinel itself
/// reports once per condition. kube-rs logs every failed apiserver request at ERROR (the
/// failure comes back to the caller, which logs the outage once); object_store logs each
/// retry (the check's verdict says it); rustls warns for a client sending an IP address as SNI
/// (the apiserver does, to a webhook addressed by IP); actix logs connections that clients
/// broke or sent malformed requests on.
const QUIET: &str = "kube_client::client::builder=off,object_store::client::retry=warn,\
                     rustls::msgs::handshake=error,actix_http::h1::dispatcher=off";

/// How long the servers get to finish the requests in flight once they stop accepting.
const SERVER_DRAIN: Duration = Duration::from_secs(5);

/// `bsl-sentinel serve`: logging, the runtime, and [`run`] until interrupted.
pub fn main(args: ServeArgs) -> ExitCode {
    tracing_subscriber::fmt()
        // Pod logs and files get plain text; a terminal gets colours.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_new(format!(
                "{QUIET},{}",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into())
            ))
            .unwrap_or_else(|e| {
                eprintln!("warning: RUST_LOG cannot be used ({e}); logging at info");
                tracing_subscriber::EnvFilter::new(format!("{QUIET},info"))
            }),
        )
        .init();
    // One thread for the reconciler, the Lease and the admin port; the webhook serves on actix's
    // own worker threads. A second worker moved tasks between threads and woke the other on
    // every spawn: 20% of the reconciler's CPU at 10,000 BSLs (BENCHMARKS.md, Reconciler).
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(run(args));
    // Nothing left to wait for, such as a DNS lookup on a blocking thread.
    runtime.shutdown_timeout(Duration::from_secs(1));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "bsl-sentinel stopped");
            ExitCode::FAILURE
        }
    }
}

/// Runs until interrupted. BSL state never ends it: only a failure to start or to serve does.
pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    // As Velero's plugins do, the storage checks (and the apiserver connection) honour
    // HTTPS_PROXY, HTTP_PROXY and NO_PROXY.
    let (proxies, problems) = Proxies::from_env();
    for problem in problems {
        tracing::warn!("{problem}");
    }
    if let Some(proxies) = proxies.describe() {
        tracing::info!("proxies from the environment: {proxies}");
    }
    let client = crate::kube_client::connect(&proxies).await?;
    let served = watch_served_crd(client.clone(), args.crd_refresh_interval);
    let metrics = Arc::new(Metrics::default());
    let readiness = Readiness::new(served.clone());
    let mut servers = Vec::new();
    if args.webhook {
        servers.push(start_webhook(
            &args.webhook_args,
            &args.namespace,
            client.clone(),
            served.clone(),
            readiness.clone(),
        )?);
    }
    let identity = args.identity.clone().unwrap_or_else(hostname);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut status = None;
    let mut reconciler_task = None;
    if args.reconciler {
        let config = args
            .reconciler_args
            .config(&args.namespace, &identity, proxies);
        let ctx = Context::new(client.clone(), served.clone(), metrics.clone(), config);
        status = Some(ctx.status());
        reconciler_task = Some(if args.election.leader_election {
            let election = Election::with_duration(
                &args.namespace,
                &args.election.lease_name,
                &identity,
                args.election.lease_duration,
            );
            tokio::spawn(leader::run(
                client.clone(),
                election,
                stop_rx,
                args.shutdown_grace,
                move |stopping| reconciler::run(ctx.clone(), stopping),
            ))
        } else {
            tokio::spawn(reconciler::run(ctx, stop_rx))
        });
    }
    let admin = Admin {
        metrics,
        readiness: readiness.clone(),
        client: client.clone(),
        namespace: args.namespace.clone(),
        status,
    };
    servers.push(start_admin(args.admin.addr, admin)?);
    let handles: Vec<_> = servers.iter().map(|s| s.server.handle()).collect();
    let running = futures::future::try_join_all(servers.into_iter().map(|s| s.server));
    futures::pin_mut!(running);
    tokio::select! {
        result = &mut running => {
            result?;
            return Ok(());
        }
        _ = shutdown_signal() => {}
    };
    // Readiness first, so the Service stops sending reviews while they are still served;
    // then the reconciler finishes what is in flight and releases the Lease.
    tracing::info!(grace = ?args.shutdown_grace, "stopping: readiness off, finishing work in flight");
    readiness.stop();
    let _ = stop_tx.send(true);
    let reconciler_done = async {
        if let Some(task) = reconciler_task {
            let _ = task.await;
        }
    };
    let drained = tokio::time::sleep(args.shutdown_grace);
    // The servers keep serving (they are polled) until they have stopped.
    let serving = async {
        futures::future::join(reconciler_done, drained).await;
        futures::future::join_all(handles.iter().map(|h| h.stop(true))).await;
    };
    let stopped = futures::future::select(Box::pin(serving), running);
    let _ = tokio::time::timeout(args.shutdown_grace + SERVER_DRAIN, stopped).await;
    tracing::info!("stopped");
    Ok(())
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "bsl-sentinel".into())
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
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
/// `namespace` is the one whose BSLs and Secrets the webhook's warnings look at.
pub fn start_webhook(
    config: &WebhookArgs,
    namespace: &str,
    client: kube::Client,
    served: SharedServedCrd,
    readiness: Readiness,
) -> anyhow::Result<Running> {
    let cert = ReloadingCert::load(&config.cert, &config.key)?;
    tokio::spawn(cert.clone().watch(config.cert_reload_interval));
    let state = Arc::new(State {
        served,
        readiness,
        cluster: Box::new(Caches::start(client, namespace)),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_groups_make_one_valid_command() {
        ServeArgs::augment_args(clap::Command::new("serve")).debug_assert();
    }
}
