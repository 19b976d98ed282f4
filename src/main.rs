use std::process::ExitCode;

use clap::{Parser, Subcommand};

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
    }
}
