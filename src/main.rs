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
    /// Run the admission webhook.
    Serve(ServeArgs),
}

#[derive(Args)]
struct ServeArgs {
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
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    cert_reload_interval: Duration,
    /// How often the served BSL CRD is re-read to learn what it allows.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    crd_refresh_interval: Duration,
    /// Namespace of bsl-sentinel and of the BSLs' Secrets.
    #[arg(long, env = "POD_NAMESPACE", default_value = "velero")]
    namespace: String,
    /// Worker threads serving the webhook.
    #[arg(long, default_value_t = 2)]
    webhook_workers: usize,
}

/// Flags take Kubernetes durations ("10s", "1m30s"), like Velero's.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let d = GoDuration::parse(text).map_err(|e| e.to_string())?;
    d.to_std().ok_or_else(|| format!("{text:?} is negative"))
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
        Command::Serve(args) => serve(args),
    }
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

fn serve(args: ServeArgs) -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        let client = kube::Client::try_default().await?;
        let config = bsl_sentinel::serve::WebhookConfig {
            addr: args.webhook_addr,
            cert: args.tls_cert,
            key: args.tls_key,
            cert_reload_interval: args.cert_reload_interval,
            crd_refresh_interval: args.crd_refresh_interval,
            namespace: args.namespace,
            workers: args.webhook_workers,
        };
        let running = bsl_sentinel::serve::start_webhook(&config, client)?;
        tokio::select! {
            result = running.server => result?,
            _ = tokio::signal::ctrl_c() => tracing::info!("interrupted; stopping"),
        }
        anyhow::Ok(())
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "bsl-sentinel stopped");
            ExitCode::FAILURE
        }
    }
}
