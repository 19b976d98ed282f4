//! A rules verdict: every problem with one BSL, as errors in Kubernetes' field.Error style
//! (so the webhook's denial reads like the API server's own) and one-line warnings.

use std::fmt;

/// Everything wrong with one BSL: errors reject it, warnings are shown to the user.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub errors: Vec<FieldError>,
    /// One line each, under about 120 characters, prefixed with the field path.
    pub warnings: Vec<String>,
}

/// One bad field, rendered like Kubernetes' `field.Error`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// The JSON path, e.g. `spec.objectStorage.bucket`.
    pub path: String,
    pub kind: ErrorKind,
    /// What is wrong and how to fix it. For NotSupported it starts with the supported values,
    /// as Kubernetes words it.
    pub detail: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    Required,
    Invalid { value: String },
    NotSupported { value: String, allowed: Vec<String> },
    Forbidden,
}

impl FieldError {
    /// The StatusCause reason Kubernetes gives this kind of error.
    pub fn reason(&self) -> &'static str {
        match self.kind {
            ErrorKind::Required => "FieldValueRequired",
            ErrorKind::Invalid { .. } => "FieldValueInvalid",
            ErrorKind::NotSupported { .. } => "FieldValueNotSupported",
            ErrorKind::Forbidden => "FieldValueForbidden",
        }
    }

    /// The error without its path, as a StatusCause message (Kubernetes' ErrorBody).
    pub fn message(&self) -> String {
        let detail = &self.detail;
        match &self.kind {
            ErrorKind::Required => format!("Required value: {detail}"),
            ErrorKind::Invalid { value } => format!("Invalid value: {value:?}: {detail}"),
            ErrorKind::NotSupported { value, .. } => {
                format!("Unsupported value: {value:?}: {detail}")
            }
            ErrorKind::Forbidden => format!("Forbidden: {detail}"),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message())
    }
}

impl std::error::Error for FieldError {}

impl Report {
    pub(crate) fn error(
        &mut self,
        path: impl Into<String>,
        kind: ErrorKind,
        detail: impl Into<String>,
    ) {
        self.errors.push(FieldError {
            path: path.into(),
            kind,
            detail: detail.into(),
        });
    }

    pub(crate) fn invalid(
        &mut self,
        path: impl Into<String>,
        value: &str,
        detail: impl Into<String>,
    ) {
        let value = short(value);
        self.error(path, ErrorKind::Invalid { value }, detail);
    }

    pub(crate) fn not_supported(
        &mut self,
        path: impl Into<String>,
        value: &str,
        allowed: &[&str],
        hint: &str,
    ) {
        let list: Vec<String> = allowed.iter().map(|a| format!("{a:?}")).collect();
        let mut detail = format!("supported values: {}", list.join(", "));
        if !hint.is_empty() {
            detail = format!("{detail}; {hint}");
        }
        let kind = ErrorKind::NotSupported {
            value: short(value),
            allowed: allowed.iter().map(|a| a.to_string()).collect(),
        };
        self.error(path, kind, detail);
    }

    pub(crate) fn warn(&mut self, path: &str, message: impl fmt::Display) {
        self.warnings.push(format!("{path}: {message}"));
    }
}

/// Echoed values are cut so that a message stays readable.
pub(crate) fn short(s: &str) -> String {
    short_n(s, 64)
}

pub(crate) fn short_n(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_like_kubernetes() {
        let e = |kind, detail: &str| FieldError {
            path: "spec.x".into(),
            kind,
            detail: detail.into(),
        };
        assert_eq!(
            e(ErrorKind::Required, "d").to_string(),
            "spec.x: Required value: d"
        );
        assert_eq!(
            e(
                ErrorKind::Invalid {
                    value: "a/b".into()
                },
                "d"
            )
            .to_string(),
            r#"spec.x: Invalid value: "a/b": d"#
        );
        assert_eq!(
            e(ErrorKind::Forbidden, "d").to_string(),
            "spec.x: Forbidden: d"
        );
        let not_supported = ErrorKind::NotSupported {
            value: "v".into(),
            allowed: vec!["a".into()],
        };
        let err = e(not_supported, r#"supported values: "a""#);
        assert_eq!(
            err.message(),
            r#"Unsupported value: "v": supported values: "a""#
        );
        assert_eq!(err.reason(), "FieldValueNotSupported");
        assert_eq!(e(ErrorKind::Required, "d").reason(), "FieldValueRequired");
    }
}
