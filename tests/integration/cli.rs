//! The binary's offline commands, run as a CI pipeline would run them.

use std::io::Write;
use std::process::{Command, Stdio};

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn bsl_sentinel(args: &[&str], stdin: &str) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_bsl-sentinel"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("bsl-sentinel: {e}"));
    if let Some(mut input) = child.stdin.take() {
        let _ = input.write_all(stdin.as_bytes());
    }
    let out = child.wait_with_output().unwrap_or_else(|e| panic!("{e}"));
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

const VALID: &str = "apiVersion: velero.io/v1
kind: BackupStorageLocation
metadata:
  name: primary
spec:
  provider: aws
  objectStorage:
    bucket: velero
  config:
    region: eu-west-1
    insecureSkipTLSVerify: \"true\"
";

const INVALID: &str = "apiVersion: velero.io/v1
kind: BackupStorageLocation
metadata:
  name: broken
spec:
  provider: gcp
  objectStorage:
    bucket: a/b
  config:
    region: us-east1
";

#[test]
fn validate_exits_0_for_valid_manifests_and_prints_warnings() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let file = dir.path().join("bsl.yaml");
    std::fs::write(&file, VALID).unwrap_or_else(|e| panic!("{e}"));
    let run = bsl_sentinel(&["validate", "-f", &file.display().to_string()], "");
    assert_eq!(run.code, Some(0), "{}{}", run.stdout, run.stderr);
    assert_eq!(
        run.stdout,
        "backupstoragelocation.velero.io/primary valid\n"
    );
    assert!(
        run.stderr
            .contains("Warning: primary: spec.config.insecureSkipTLSVerify"),
        "{}",
        run.stderr
    );
}

#[test]
fn validate_exits_1_and_lists_every_error_from_stdin() {
    let run = bsl_sentinel(&["validate", "-f", "-"], &format!("{VALID}---\n{INVALID}"));
    assert_eq!(run.code, Some(1));
    assert!(
        run.stdout
            .contains("backupstoragelocation.velero.io/primary valid"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout
            .contains("The BackupStorageLocation \"broken\" is invalid: \n* "),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout
            .contains("* spec.objectStorage.bucket: Invalid value: \"a/b\""),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout
            .contains("* spec.config.region: Unsupported value: \"region\""),
        "{}",
        run.stdout
    );
}

#[test]
fn validate_reports_unreadable_input_and_exits_1() {
    let run = bsl_sentinel(&["validate", "-f", "/nonexistent/bsl.yaml"], "");
    assert_eq!(run.code, Some(1));
    assert!(
        run.stderr.starts_with("error: /nonexistent/bsl.yaml:"),
        "{}",
        run.stderr
    );
    let run = bsl_sentinel(&["validate", "-f", "-"], "spec: [");
    assert_eq!(run.code, Some(1));
    assert!(
        run.stdout.starts_with("error: -: cannot parse:"),
        "{}",
        run.stdout
    );
}

#[test]
fn crd_command_prints_the_project_crd() {
    let run = bsl_sentinel(&["crd"], "");
    assert_eq!(run.code, Some(0));
    let crd: serde_json::Value = serde_saphyr::from_str(&run.stdout).unwrap_or_default();
    assert_eq!(crd["metadata"]["name"], "backupstoragelocations.velero.io");
}

/// Flag values that would spin a loop, never lead or fail every check are refused at parse
/// time, with one line naming the flag, and exit 2 (before any cluster is contacted).
#[test]
fn serve_refuses_bad_flag_values_at_once() {
    for (flag, value) in [
        ("--crd-refresh-interval", "0s"),
        ("--cert-reload-interval", "0s"),
        ("--check-timeout", "0s"),
        ("--health-log-interval", "0"),
        ("--webhook-workers", "0"),
        ("--max-connections-per-endpoint", "0"),
        ("--lease-duration", "500ms"),
        ("--lease-duration", "1.5s"),
        ("--validation-frequency", "-1m"),
        ("--check-timeout", "soon"),
    ] {
        let run = bsl_sentinel(&["serve", &format!("{flag}={value}")], "");
        assert_eq!(run.code, Some(2), "{flag} {value}: {}", run.stderr);
        let first = run.stderr.lines().next().unwrap_or_default();
        assert!(
            first.starts_with("error: invalid value") && first.contains(flag),
            "{flag} {value}: {}",
            run.stderr
        );
    }
}
