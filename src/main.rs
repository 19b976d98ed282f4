//! The command line: parses the flags (validated at parse time) and dispatches.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use bsl_sentinel::listing;
use bsl_sentinel::serve::{self, ServeArgs};

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
    /// Say why a BackupStorageLocation is unavailable, step by step, with the fix. Reads the
    /// BSL and its Secrets from the cluster, or with -f a manifest and files, with no cluster.
    /// Exits 0 when every step passes, 1 when one does not, 2 when the input cannot be read.
    Diagnose(DiagnoseArgs),
    /// Print the server status the reconciler publishes. Exits 0 Ready, 1 Degraded,
    /// 2 NotReady, 3 when no status can be read.
    Status {
        #[arg(short = 'n', long, env = "POD_NAMESPACE", default_value = "velero")]
        namespace: String,
        #[arg(short = 'o', long, value_enum)]
        output: Option<Format>,
    },
}

#[derive(clap::Args)]
struct DiagnoseArgs {
    /// The BSL to read from the cluster (the kubeconfig's).
    #[arg(required_unless_present = "file", conflicts_with = "file")]
    name: Option<String>,
    #[arg(short = 'n', long, env = "POD_NAMESPACE", default_value = "velero")]
    namespace: String,
    /// A BSL manifest (YAML or JSON; its first BackupStorageLocation), read with no cluster.
    #[arg(short = 'f', long = "filename")]
    file: Option<String>,
    /// With -f: the contents of the Secret key spec.credential names.
    #[arg(long, requires = "file")]
    credentials_file: Option<String>,
    /// With -f: the contents of the Secret key spec.objectStorage.caCertRef names.
    #[arg(long, requires = "file")]
    ca_file: Option<String>,
    /// Each network step, and the check, gives up after this long (as `serve --check-timeout`).
    #[arg(long, default_value = "10s", value_parser = serve::positive_duration)]
    check_timeout: std::time::Duration,
    #[arg(short = 'o', long, value_enum)]
    output: Option<Format>,
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
        Command::Serve(args) => serve::main(*args),
        Command::Get {
            name,
            namespace,
            all_namespaces,
            output,
        } => client_command(get(name, (!all_namespaces).then_some(namespace), output)),
        Command::Status { namespace, output } => client_command(status(namespace, output)),
        Command::Diagnose(args) => {
            let result = tokio::runtime::Runtime::new()
                .map_err(|e| e.to_string())
                .and_then(|rt| rt.block_on(diagnose(args)));
            result.unwrap_or_else(|e| {
                eprintln!("error: {e}");
                ExitCode::from(2)
            })
        }
    }
}

/// Err: the input cannot be read (exit 2).
async fn diagnose(args: DiagnoseArgs) -> Result<ExitCode, String> {
    use bsl_sentinel::diagnose::run::{self, Input, Secrets};
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (proxies, _) = bsl_sentinel::proxy::Proxies::from_env();
    let read = |path: &Option<String>| {
        path.as_ref()
            .map(|p| std::fs::read(p).map_err(|e| format!("{p}: {e}")))
            .transpose()
    };
    let input = match &args.file {
        Some(file) => {
            let text = std::fs::read_to_string(file).map_err(|e| format!("{file}: {e}"))?;
            let document = run::document_from_text(file, &text)?;
            let name = document["metadata"]["name"].as_str().unwrap_or("<unnamed>");
            Input {
                location: format!("{name} (from {file})"),
                secrets: Secrets::Files {
                    credential: read(&args.credentials_file)?,
                    ca: read(&args.ca_file)?,
                },
                document,
            }
        }
        None => {
            let name = args.name.clone().unwrap_or_default();
            let client = bsl_sentinel::kube_client::connect(&proxies)
                .await
                .map_err(|e| format!("{e:#}"))?;
            let document =
                run::document_from_cluster(client.clone(), &args.namespace, &name).await?;
            Input {
                location: format!("{}/{name}", args.namespace),
                secrets: Secrets::Cluster {
                    client,
                    namespace: args.namespace.clone(),
                },
                document,
            }
        }
    };
    // The reconciler's probe: one check at a time per endpoint is all diagnose makes.
    let probe = bsl_sentinel::storage::Probe::new(1, args.check_timeout).with_proxies(proxies);
    let report = run::diagnose(input, &probe, args.check_timeout).await;
    let text = match args.output {
        Some(format) => render(&report, format)?,
        None => report.table(),
    };
    print!("{text}");
    Ok(ExitCode::from(report.exit_code()))
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
    let client = cluster_client().await?;
    let values = listing::fetch(client, name.as_deref(), namespace.as_deref()).await?;
    let text = match output {
        Some(format) => render(&values, format)?,
        None => listing::table(&values),
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
