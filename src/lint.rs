//! `bsl-sentinel validate`: the webhook's rules, offline, for CI pipelines. Reads YAML or JSON
//! with one or many documents (and `kind: List`), checks every BackupStorageLocation, and
//! prints what `kubectl apply` would print.

use serde_json::Value;

use crate::rules::{self, FieldError};

/// What one input produced: lines for stdout, warnings for stderr, and whether anything was
/// invalid (or unreadable).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    pub out: Vec<String>,
    pub warnings: Vec<String>,
    pub invalid: bool,
}

pub fn lint(source: &str, text: &str) -> Outcome {
    let mut outcome = Outcome::default();
    let documents: Vec<Value> = match serde_saphyr::from_multiple(text) {
        Ok(docs) => docs,
        Err(e) => {
            outcome.invalid = true;
            outcome.out.push(format!(
                "error: {source}: cannot parse: {}",
                first_line(&e.to_string())
            ));
            return outcome;
        }
    };
    for document in documents.iter().flat_map(expand_list) {
        if document["kind"] != "BackupStorageLocation" {
            continue;
        }
        let name = document["metadata"]["name"].as_str().unwrap_or("<unnamed>");
        let report = rules::validate_document(document);
        outcome.warnings.extend(
            report
                .warnings
                .iter()
                .map(|w| format!("Warning: {name}: {w}")),
        );
        if report.errors.is_empty() {
            outcome
                .out
                .push(format!("backupstoragelocation.velero.io/{name} valid"));
        } else {
            outcome.invalid = true;
            outcome.out.push(kubectl_invalid(name, &report.errors));
        }
    }
    outcome
}

/// `kind: List` (what `kubectl get -o yaml` prints) holds its documents in items.
fn expand_list(document: &Value) -> Vec<&Value> {
    match (document["kind"].as_str(), document["items"].as_array()) {
        (Some("List"), Some(items)) => items.iter().collect(),
        _ if document.is_null() => Vec::new(),
        _ => vec![document],
    }
}

/// kubectl's rendering of an Invalid status: one error inline, several as a bullet list.
fn kubectl_invalid(name: &str, errors: &[FieldError]) -> String {
    match errors {
        [one] => format!("The BackupStorageLocation {name:?} is invalid: {one}"),
        many => {
            let mut text = format!("The BackupStorageLocation {name:?} is invalid: ");
            for error in many {
                text.push_str(&format!("\n* {error}"));
            }
            text
        }
    }
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "apiVersion: velero.io/v1\nkind: BackupStorageLocation\nmetadata:\n  name: good\nspec:\n  provider: aws\n  objectStorage:\n    bucket: b\n";
    const BAD: &str = "apiVersion: velero.io/v1\nkind: BackupStorageLocation\nmetadata:\n  name: bad\nspec:\n  provider: ''\n  objectStorage:\n    bucket: a/b\n";

    #[test]
    fn valid_document_passes() {
        let outcome = lint("f", GOOD);
        assert!(!outcome.invalid);
        assert_eq!(outcome.out, ["backupstoragelocation.velero.io/good valid"]);
    }

    #[test]
    fn every_document_is_checked_and_errors_listed() {
        let outcome = lint(
            "f",
            &format!("{GOOD}---\n{BAD}---\nkind: Secret\nmetadata:\n  name: s\n"),
        );
        assert!(outcome.invalid);
        assert_eq!(outcome.out.len(), 2, "{:?}", outcome.out);
        let bad = &outcome.out[1];
        assert!(
            bad.starts_with(
                "The BackupStorageLocation \"bad\" is invalid: \n* spec.provider: Required value"
            ),
            "{bad}"
        );
        assert!(
            bad.contains("\n* spec.objectStorage.bucket: Invalid value: \"a/b\""),
            "{bad}"
        );
    }

    #[test]
    fn json_and_lists_are_read() {
        let list = r#"{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"velero.io/v1","kind":"BackupStorageLocation","metadata":{"name":"j"},"spec":{"provider":"gcp","objectStorage":{"bucket":"b"}}}]}"#;
        let outcome = lint("f", list);
        assert_eq!(outcome.out, ["backupstoragelocation.velero.io/j valid"]);
    }

    #[test]
    fn unparsable_input_is_invalid_with_a_clear_error() {
        let outcome = lint("manifest.yaml", "kind: [unclosed");
        assert!(outcome.invalid);
        assert!(
            outcome.out[0].starts_with("error: manifest.yaml: cannot parse:"),
            "{:?}",
            outcome.out
        );
    }
}
