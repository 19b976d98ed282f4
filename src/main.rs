use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use bsl_sentinel::duration::GoDuration;

/// Guards Velero BackupStorageLocations: rejects malformed ones at admission and keeps
/// checking that each can reach its object storage.
#[derive(Parser)]
#[command(name = "bsl-sentinel", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the project's BackupStorageLocation CRD as YAML (a superset of Velero's).
    Crd,
    /// Check BackupStorageLocation manifests offline with the webhook's rules. Exits 1 if any
    /// is invalid.
    Validate {
        /// Files to read (YAML or JSON, one or many documents); `-` reads stdin.
        #[arg(short = 'f', long = "filename", required = true)]
        files: Vec<String>,
    },
    /// Run the admission webhook, the reconciler and the admin port.
    Serve(Box<ServeArgs>),
    /// List BackupStorageLocations with the columns of `velero backup-location get`.
    Get {
        /// Only this BSL.
        name: Option<String>,
        #[arg(short = 'n', long, env = "POD_NAMESPACE", default_value = "velero")]
        namespace: String,
        /// List BSLs in every namespace.
        #[arg(short = 'A', long)]
        all_namespaces: bool,
        #[arg(short = 'o', long, value_enum)]
        output: Option<Format>,
    },
    /// Print the server status the reconciler publishes. Exits 0 Ready, 1 Degraded,
    /// 2 NotReady, 3 when no status can be read.
    Status {
        #[arg(short = 'n', long, env = "POD_NAMESPACE", default_value = "velero")]
        namespace: String,
        #[arg(short = 'o', long, value_enum)]
        output: Option<Format>,
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Format {
    Json,
    Yaml,
}

fn render<T: serde::Serialize>(value: &T, format: Format) -> Result<String, String> {
    match format {
        Format::Json => serde_json::to_string_pretty(value)
            .map(|s| s + "\n")
            .map_err(|e| e.to_string()),
        Format::Yaml => serde_saphyr::to_string(value).map_err(|e| e.to_string()),
    }
}

#[derive(Args)]
struct ServeArgs {
    /// Run the admission webhook. Turn off to run only the reconciler.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    webhook: bool,
    /// Run the reconciler (status writer). Turn off beside a Velero server that validates its
    /// BSLs itself, so the two never fight over status (webhook-only mode).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    reconciler: bool,
    /// Address the webhook listens on (HTTPS).
    #[arg(long, default_value = "0.0.0.0:8443")]
    webhook_addr: SocketAddr,
    /// PEM certificate (chain) the webhook serves; reloaded when it changes.
    #[arg(long, default_value = "/etc/bsl-sentinel/tls/tls.crt")]
    tls_cert: PathBuf,
    /// PEM private key of the certificate.
    #[arg(long, default_value = "/etc/bsl-sentinel/tls/tls.key")]
    tls_key: PathBuf,
    /// How often the certificate files are checked for changes.
    #[arg(long, default_value = "10s", value_parser = positive_duration)]
    cert_reload_interval: Duration,
    /// Worker threads serving the webhook.
    #[arg(long, default_value_t = 2, value_parser = positive_count)]
    webhook_workers: usize,
    /// Address of the admin port (HTTP): /livez, /readyz, /metrics, /status.
    #[arg(long, default_value = "0.0.0.0:8080")]
    admin_addr: SocketAddr,
    /// How often the served BSL CRD is re-read to learn what it allows.
    #[arg(long, default_value = "30s", value_parser = positive_duration)]
    crd_refresh_interval: Duration,
    /// Namespace of bsl-sentinel and of the BSLs' Secrets.
    #[arg(long, env = "POD_NAMESPACE", default_value = "velero")]
    namespace: String,
    /// Reconcile BSLs in every namespace, not only in --namespace.
    #[arg(long)]
    all_namespaces: bool,
    /// How often a BSL is checked when its spec sets no validationFrequency (Velero's
    /// --store-validation-frequency); 0 checks each BSL once and on spec changes.
    #[arg(long, default_value = "1m", value_parser = parse_duration)]
    validation_frequency: Duration,
    /// Each storage check gives up after this long, counted from its endpoint's turn.
    #[arg(long, default_value = "10s", value_parser = positive_duration)]
    check_timeout: Duration,
    /// Most sockets ever open to one storage endpoint, and most checks of it at once.
    #[arg(long, default_value_t = 4, value_parser = positive_count)]
    max_connections_per_endpoint: usize,
    /// How long a credential Secret read is reused by further checks.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    secret_cache_ttl: Duration,
    /// Elect one status writer among the replicas with a Lease; off runs the reconciler
    /// unconditionally (one replica only).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    leader_election: bool,
    /// Name of the Lease in --namespace.
    #[arg(long, default_value = "bsl-sentinel")]
    lease_name: String,
    /// How long a leader's claim lasts without renewal; another replica takes over after it.
    /// The leader steps down when it could not renew for 2/3 of it, and retries every fifth.
    #[arg(long, default_value = "15s", value_parser = lease_duration)]
    lease_duration: Duration,
    /// This replica's identity in the Lease and the status (default: POD_NAME, else hostname).
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
    /// The BSLs' health is logged when it changes and at least this often.
    #[arg(long, default_value = "5m", value_parser = positive_duration)]
    health_log_interval: Duration,
    /// On SIGTERM: how long readiness is false while the webhook still serves (so the
    /// Service stops sending reviews), and then the most time in-flight checks, status
    /// writes and reviews get to finish before the Lease is released.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    shutdown_grace: Duration,
}

/// Flags take Kubernetes durations ("10s", "1m30s"), like Velero's.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let d = GoDuration::parse(text).map_err(|e| e.to_string())?;
    d.to_std().ok_or_else(|| format!("{text:?} is negative"))
}

/// An interval or timeout: zero would spin a loop or fail every check.
fn positive_duration(text: &str) -> Result<Duration, String> {
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Crd => match bsl_sentinel::crd::crd_yaml() {
            Ok(yaml) => {
                print!("{yaml}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: cannot render the CRD: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Validate { files } => validate(&files),
        Command::Serve(args) => serve(*args),
        Command::Get {
            name,
            namespace,
            all_namespaces,
            output,
        } => client_command(get(name, (!all_namespaces).then_some(namespace), output)),
        Command::Status { namespace, output } => client_command(status(namespace, output)),
    }
}

/// Runs a command that reads the cluster (kubeconfig or in-cluster config).
fn client_command(
    command: impl std::future::Future<Output = Result<ExitCode, String>>,
) -> ExitCode {
    let result = tokio::runtime::Runtime::new()
        .map_err(|e| e.to_string())
        .and_then(|rt| rt.block_on(command));
    result.unwrap_or_else(|e| {
        eprintln!("error: {e}");
        ExitCode::from(3)
    })
}

async fn get(
    name: Option<String>,
    namespace: Option<String>,
    output: Option<Format>,
) -> Result<ExitCode, String> {
    use kube::api::{Api, DynamicObject, ListParams};
    let client = cluster_client().await?;
    let resource = bsl_sentinel::bsl::bsl_resource();
    let api: Api<DynamicObject> = match &namespace {
        Some(ns) => Api::namespaced_with(client, ns, &resource),
        None => Api::all_with(client, &resource),
    };
    let mut items = match &name {
        Some(name) => vec![api.get(name).await.map_err(|e| e.to_string())?],
        None => {
            api.list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?
                .items
        }
    };
    items.sort_by(|a, b| {
        (&a.metadata.namespace, &a.metadata.name).cmp(&(&b.metadata.namespace, &b.metadata.name))
    });
    let values: Vec<serde_json::Value> = items
        .iter()
        .filter_map(|o| serde_json::to_value(o).ok())
        .collect();
    let text = match output {
        Some(format) => render(&values, format)?,
        None => bsl_sentinel::listing::table(&values),
    };
    print!("{text}");
    Ok(ExitCode::SUCCESS)
}

async fn status(namespace: String, output: Option<Format>) -> Result<ExitCode, String> {
    let client = cluster_client().await?;
    let status = bsl_sentinel::status::fetch(client, &namespace)
        .await
        .map_err(|e| e.to_string())?;
    let text = match output {
        Some(format) => render(&status, format)?,
        None => status.table(),
    };
    print!("{text}");
    Ok(ExitCode::from(status.state.exit_code()))
}

/// The cluster client of `get` and `status`, with the proxies of the environment.
async fn cluster_client() -> Result<kube::Client, String> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (proxies, _) = bsl_sentinel::proxy::Proxies::from_env();
    bsl_sentinel::kube_client::connect(&proxies)
        .await
        .map_err(|e| format!("{e:#}"))
}

fn validate(files: &[String]) -> ExitCode {
    let mut invalid = false;
    for file in files {
        let text = if file == "-" {
            std::io::read_to_string(std::io::stdin())
        } else {
            std::fs::read_to_string(file)
        };
        let outcome = match text {
            Ok(text) => bsl_sentinel::lint::lint(file, &text),
            Err(e) => {
                eprintln!("error: {file}: {e}");
                invalid = true;
                continue;
            }
        };
        for line in &outcome.warnings {
            eprintln!("{line}");
        }
        for line in &outcome.out {
            println!("{line}");
        }
        invalid |= outcome.invalid;
    }
    if invalid {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
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

/// Runs until interrupted. BSL state never ends it: only a failure to start or to serve does.
async fn run(args: ServeArgs) -> anyhow::Result<()> {
    use bsl_sentinel::serve;
    let _ = rustls::crypto::ring::default_provider().install_default();
    // As Velero's plugins do, the storage checks (and the apiserver connection) honour
    // HTTPS_PROXY, HTTP_PROXY and NO_PROXY.
    let (proxies, problems) = bsl_sentinel::proxy::Proxies::from_env();
    for problem in problems {
        tracing::warn!("{problem}");
    }
    if let Some(proxies) = proxies.describe() {
        tracing::info!("proxies from the environment: {proxies}");
    }
    let client = bsl_sentinel::kube_client::connect(&proxies).await?;
    let served = serve::watch_served_crd(client.clone(), args.crd_refresh_interval);
    let metrics = std::sync::Arc::new(bsl_sentinel::metrics::Metrics::default());
    let readiness = bsl_sentinel::readiness::Readiness::new(served.clone());
    let mut servers = Vec::new();
    if args.webhook {
        let config = serve::WebhookConfig {
            addr: args.webhook_addr,
            cert: args.tls_cert,
            key: args.tls_key,
            cert_reload_interval: args.cert_reload_interval,
            namespace: args.namespace.clone(),
            workers: args.webhook_workers,
        };
        servers.push(serve::start_webhook(
            &config,
            client.clone(),
            served.clone(),
            readiness.clone(),
        )?);
    }
    let identity = args.identity.clone().unwrap_or_else(hostname);
    let mut reconciler = None;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut reconciler_task = None;
    if args.reconciler {
        let config = bsl_sentinel::reconciler::ReconcilerConfig {
            namespace: (!args.all_namespaces).then(|| args.namespace.clone()),
            status_namespace: args.namespace.clone(),
            identity: identity.clone(),
            check_timeout: args.check_timeout,
            default_frequency: args.validation_frequency,
            per_endpoint: args.max_connections_per_endpoint,
            proxies,
            secret_ttl: args.secret_cache_ttl,
            health_reminder: args.health_log_interval,
        };
        let ctx = bsl_sentinel::reconciler::Context::new(
            client.clone(),
            served.clone(),
            metrics.clone(),
            config,
        );
        if args.leader_election {
            let election = bsl_sentinel::leader::Election::with_duration(
                &args.namespace,
                &args.lease_name,
                &identity,
                args.lease_duration,
            );
            let lead = ctx.clone();
            reconciler_task = Some(tokio::spawn(bsl_sentinel::leader::run(
                client.clone(),
                election,
                stop_rx.clone(),
                args.shutdown_grace,
                move |stopping| bsl_sentinel::reconciler::run(lead.clone(), stopping),
            )));
        } else {
            reconciler_task = Some(tokio::spawn(bsl_sentinel::reconciler::run(
                ctx.clone(),
                stop_rx.clone(),
            )));
        }
        reconciler = Some(ctx.status());
    }
    let admin = bsl_sentinel::admin::Admin {
        metrics,
        readiness: readiness.clone(),
        client: client.clone(),
        namespace: args.namespace.clone(),
        status: reconciler,
    };
    servers.push(serve::start_admin(args.admin_addr, admin)?);
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

fn serve(args: ServeArgs) -> ExitCode {
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
    let runtime = match tokio::runtime::Runtime::new() {
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
