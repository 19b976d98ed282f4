//! Failures of a check, as a BSL's status shows them: the kind ([`FailureReason`], for metrics
//! and the endpoint's outage rule), a message naming the endpoint and bucket, and sanitizing
//! that keeps credentials, SAS tokens and response bodies out of the status (as Velero does).

use object_store::client::{HttpError, HttpErrorKind};

use super::plan::Plan;

/// Why a location is unavailable, for metrics and logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FailureReason {
    Timeout,
    Unreachable,
    Auth,
    NotFound,
    Layout,
    Config,
    Other,
}

impl FailureReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureReason::Timeout => "timeout",
            FailureReason::Unreachable => "unreachable",
            FailureReason::Auth => "auth",
            FailureReason::NotFound => "not_found",
            FailureReason::Layout => "layout",
            FailureReason::Config => "config",
            FailureReason::Other => "other",
        }
    }
}

/// Longest message a check returns; Velero's own messages are short, and the status is shown by
/// `kubectl get -o wide`.
pub const MAX_MESSAGE: usize = 512;

/// The kind of failure a listing error is.
pub(super) fn classify(
    transport: Option<HttpErrorKind>,
    status: Option<u16>,
    code: Option<&str>,
) -> FailureReason {
    match transport {
        Some(HttpErrorKind::Connect) => return FailureReason::Unreachable,
        Some(HttpErrorKind::Timeout) => return FailureReason::Timeout,
        _ => {}
    }
    const AUTH_CODES: [&str; 7] = [
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "AuthorizationFailure",
        "AuthenticationFailed",
        "AccessDenied",
        "InvalidToken",
        "ExpiredToken",
    ];
    const NOT_FOUND_CODES: [&str; 3] = ["NoSuchBucket", "ContainerNotFound", "notFound"];
    if code.is_some_and(|c| AUTH_CODES.contains(&c)) || matches!(status, Some(401 | 403)) {
        FailureReason::Auth
    } else if code.is_some_and(|c| NOT_FOUND_CODES.contains(&c)) || status == Some(404) {
        FailureReason::NotFound
    } else {
        FailureReason::Other
    }
}

/// The HTTP status in object_store's error text ("... status code: 403 Forbidden: ...").
fn status_in(text: &str) -> Option<u16> {
    let rest = &text[text.find("status code: ")? + "status code: ".len()..];
    rest.get(..3)?.parse().ok()
}

/// The text of an XML element in an error body, e.g. `<Code>NoSuchBucket</Code>`.
fn xml_element<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    let open = format!("<{name}>");
    let start = text.find(&open)? + open.len();
    let len = text[start..].find('<')?;
    Some(text[start..start + len].trim()).filter(|s| !s.is_empty())
}

/// Every message in an error's source chain, joined as anyhow prints them, without repeats.
pub(super) fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut current = Some(err);
    while let Some(e) = current {
        let text = e.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        current = e.source();
    }
    parts.join(": ")
}

/// The innermost cause of an error, e.g. "Connection refused (os error 111)".
pub(super) fn root_cause(err: &(dyn std::error::Error + 'static)) -> String {
    let mut current = err;
    while let Some(next) = current.source() {
        current = next;
    }
    current.to_string()
}

/// Reason and message for a failed listing.
pub(super) fn describe_failure(plan: &Plan, err: &object_store::Error) -> (FailureReason, String) {
    let mut transport = None;
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = current {
        if let Some(http) = e.downcast_ref::<HttpError>() {
            transport = Some(http.kind());
            break;
        }
        current = e.source();
    }
    let text = error_chain(err);
    let status = status_in(&text);
    // fake and real servers alike put the bare status in <Code> at times; that says nothing new.
    let code = xml_element(&text, "Code").filter(|c| !c.bytes().all(|b| b.is_ascii_digit()));
    let reason = classify(transport, status, code);
    let endpoint = &plan.endpoint;
    let what = plan.provider.container_word();
    let bucket = &plan.bucket;
    let detail = match (status, code) {
        (Some(s), Some(c)) => format!("HTTP {s}, {c}"),
        (Some(s), None) => format!("HTTP {s}"),
        (None, Some(c)) => c.to_string(),
        (None, None) => String::new(),
    };
    let message = match reason {
        FailureReason::Unreachable => format!("cannot connect to {endpoint}: {}", root_cause(err)),
        FailureReason::Timeout => format!("timed out talking to {endpoint}: {}", root_cause(err)),
        FailureReason::Auth => format!(
            "authentication failed: {endpoint} rejected the credentials for {what} {bucket:?} \
             ({detail})"
        ),
        FailureReason::NotFound => {
            format!("{what} {bucket:?} does not exist at {endpoint} ({detail})")
        }
        _ if status.is_some() => {
            let said = xml_element(&text, "Message")
                .map(|m| format!(": {m}"))
                .unwrap_or_default();
            format!(
                "listing {} at {endpoint} failed ({detail}){said}",
                plan.location()
            )
        }
        _ => format!("listing {} at {endpoint} failed: {text}", plan.location()),
    };
    (reason, message)
}

/// Azure SAS query parameters that grant access (Velero redacts the same).
const SAS_PARAMS: [&str; 10] = [
    "sig", "se", "st", "sp", "spr", "sv", "sr", "sip", "srt", "ss",
];

/// A message fit for a BSL's status: known secrets and SAS parameters redacted, only the first
/// line, no response body, whitespace collapsed, at most [`MAX_MESSAGE`] characters.
pub fn sanitize(message: &str, secrets: &[String]) -> String {
    let mut text = message.lines().next().unwrap_or_default().to_string();
    redact(&mut text, secrets);
    // A response body (XML, HTML or JSON) starts with '<' or '{"'; what precedes it says enough.
    if let Some(at) = [text.find('<'), text.find("{\"")]
        .into_iter()
        .flatten()
        .min()
    {
        text.truncate(at);
    }
    let text = redact_sas(&text);
    let mut out = text
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .trim_end_matches([':', ' ', '-'])
        .to_string();
    // Collapsing whitespace can join the pieces of a secret: redact what it made, too.
    redact(&mut out, secrets);
    if out.chars().count() > MAX_MESSAGE {
        out = out.chars().take(MAX_MESSAGE - 3).collect::<String>() + "...";
    }
    // The placeholder beside what followed a secret can spell it again ("REDACTED" then
    // "xxxxxxx" for the secret "Dxxxxxxx"): such a message is withheld, not shown.
    if secrets
        .iter()
        .flat_map(|s| secret_forms(s))
        .any(|form| out.contains(form.as_str()))
    {
        return WITHHELD.to_string();
    }
    out
}

const WITHHELD: &str = "(message withheld: it still spelled a credential after redaction)";

fn redact(text: &mut String, secrets: &[String]) {
    for form in secrets.iter().flat_map(|s| secret_forms(s)) {
        *text = text.replace(form.as_str(), "REDACTED");
    }
}

/// A secret as given and with its whitespace collapsed; none for a short value, which would
/// redact ordinary words (real secrets are long).
fn secret_forms(secret: &str) -> Vec<String> {
    if secret.len() < 8 {
        return vec![];
    }
    let collapsed = secret.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut forms = vec![secret.to_string()];
    if collapsed.len() >= 8 && collapsed != secret {
        forms.push(collapsed);
    }
    forms
}

/// Replaces the value of every SAS parameter in query strings (`?sig=...&se=...`).
fn redact_sas(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(['?', '&']) {
        out.push_str(&rest[..=at]);
        rest = &rest[at + 1..];
        let name_len = rest
            .find(|c: char| !c.is_ascii_alphanumeric() && c != '_')
            .unwrap_or(rest.len());
        let name = &rest[..name_len];
        if rest[name_len..].starts_with('=')
            && SAS_PARAMS.contains(&name.to_ascii_lowercase().as_str())
        {
            let value_len = rest[name_len + 1..]
                .find(|c: char| c == '&' || c == '#' || c.is_whitespace() || c == '"' || c == '\'')
                .unwrap_or(rest.len() - name_len - 1);
            out.push_str(name);
            out.push_str("=REDACTED");
            rest = &rest[name_len + 1 + value_len..];
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_failures() {
        use FailureReason::*;
        assert_eq!(
            classify(Some(HttpErrorKind::Connect), None, None),
            Unreachable
        );
        assert_eq!(classify(Some(HttpErrorKind::Timeout), None, None), Timeout);
        assert_eq!(
            classify(None, Some(403), Some("SignatureDoesNotMatch")),
            Auth
        );
        assert_eq!(classify(None, Some(400), Some("InvalidAccessKeyId")), Auth);
        assert_eq!(
            classify(None, Some(403), Some("AuthorizationFailure")),
            Auth
        );
        assert_eq!(classify(None, Some(401), None), Auth);
        assert_eq!(classify(None, Some(404), Some("NoSuchBucket")), NotFound);
        assert_eq!(
            classify(None, Some(404), Some("ContainerNotFound")),
            NotFound
        );
        assert_eq!(classify(None, Some(500), Some("InternalError")), Other);
        assert_eq!(classify(None, None, None), Other);
    }

    #[test]
    fn finds_status_and_code() {
        let text = "Generic S3 error: Error performing GET http://h/b?list-type=2 in 2ms - Server \
            returned non-2xx status code: 404 Not Found: <?xml version=\"1.0\"?><Error><Code>NoSuchBucket</Code>\
            <Message>The specified bucket does not exist</Message></Error>";
        assert_eq!(status_in(text), Some(404));
        assert_eq!(xml_element(text, "Code"), Some("NoSuchBucket"));
        assert_eq!(
            xml_element(text, "Message"),
            Some("The specified bucket does not exist")
        );
        assert_eq!(status_in("no status here"), None);
    }

    #[test]
    fn sanitize_redacts_sas_and_secrets() {
        let m = "GET https://a.blob.core.windows.net/c?restype=container&sv=2021&sig=abc%2Bdef&se=2030 \
                 failed with key s3cr3t-value";
        assert_eq!(
            sanitize(m, &["s3cr3t-value".to_string()]),
            "GET https://a.blob.core.windows.net/c?restype=container&sv=REDACTED&sig=REDACTED&se=REDACTED \
             failed with key REDACTED"
        );
        assert_eq!(redact_sas("?SIG=x&comp=list"), "?SIG=REDACTED&comp=list");
    }

    /// Found by the sanitize fuzz target: the placeholder's last letter and what followed
    /// the secret spelled the secret again.
    #[test]
    fn sanitize_never_lets_the_placeholder_spell_a_secret() {
        let secret = "D\0\0\0\0\0\0\0".to_string();
        let message = format!("ll`DDDDD{}", "\0".repeat(25));
        let out = sanitize(&message, std::slice::from_ref(&secret));
        assert!(!out.contains(&secret), "{out:?}");
        // Each pass of redaction leaves the next spelling: "REDACTE" "REDACTED" "xxxxxxx".
        let message = format!("key D{}", "x".repeat(21));
        assert_eq!(sanitize(&message, &["Dxxxxxxx".to_string()]), WITHHELD);
        // Where the placeholder spells nothing, the message stays.
        assert_eq!(
            sanitize("key Dxxxxxxx denied", &["Dxxxxxxx".to_string()]),
            "key REDACTED denied"
        );
    }

    #[test]
    fn sanitize_strips_dumps_and_bounds() {
        let m = "status code: 403 Forbidden: <?xml version=\"1.0\"?><Error><Code>X</Code></Error>\nHTTP/1.1 403\nServer: s";
        assert_eq!(sanitize(m, &[]), "status code: 403 Forbidden");
        assert_eq!(
            sanitize("failed: {\"error\":{\"code\":500}}", &[]),
            "failed"
        );
        let long = "é".repeat(2000);
        let out = sanitize(&long, &[]);
        assert_eq!(out.chars().count(), MAX_MESSAGE);
        assert!(out.ends_with("..."));
        // A short "secret" does not blank out ordinary words.
        assert_eq!(sanitize("a bucket", &["a".to_string()]), "a bucket");
    }

    #[test]
    fn reasons_have_stable_names() {
        assert_eq!(FailureReason::NotFound.as_str(), "not_found");
        assert_eq!(FailureReason::Timeout.as_str(), "timeout");
    }
}
