//! HTTP proxies for the storage checks and the apiserver, from the environment as Velero's
//! plugins (Go's net/http, golang.org/x/net/http/httpproxy) read it: HTTPS_PROXY for https URLs,
//! HTTP_PROXY for http ones (upper case first, then lower case; an empty value counts as unset),
//! NO_PROXY for exceptions. hyper-util's `Matcher` parses the proxy URLs (a bare `host:port` is
//! http, credentials become Basic auth) and judges NO_PROXY's plain domains (with their
//! subdomains), IP addresses and CIDR ranges, as Go does; https URLs go through a CONNECT
//! tunnel, http ones as absolute-form requests. Kept here, where Go and hyper-util differ:
//! - localhost and loopback addresses are never proxied (Matcher proxies them);
//! - `*` excepts IP addresses too (Matcher's `*` matches names only);
//! - `.example.com` and `*.example.com` except subdomains only (Matcher's `.example.com` also
//!   excepts example.com, and it reads `*.example.com` literally);
//! - an entry with a port (`minio:9000`, `[fd00::1]:443`) excepts that port only (Matcher never
//!   matches such an entry);
//! - ALL_PROXY is not read, and an empty HTTPS_PROXY falls back to https_proxy, as in Go
//!   (`Matcher::from_env` reads ALL_PROXY and takes an empty HTTPS_PROXY);
//! - only http:// proxies: Matcher takes https:// and socks ones too, which the checks cannot
//!   use, so they are reported and the checks go direct;
//! - the CONNECT handshake: hyper-util's `Tunnel` drops the proxy's status line ("407 Proxy
//!   Authentication Required"), which Go reports and the BSL's status shows.

use std::fmt;
use std::io;
use std::net::IpAddr;
use std::sync::Arc;

use http::{HeaderValue, Uri};
use hyper_util::client::proxy::matcher::Matcher;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[derive(Clone, Debug)]
pub struct Proxies {
    /// Decides, for a URL, its scheme's proxy and NO_PROXY's entries that it judges as Go does.
    matcher: Arc<Matcher>,
    http: Option<Proxy>,
    https: Option<Proxy>,
    /// NO_PROXY's entries that `matcher` does not judge as Go does.
    exceptions: Vec<Exception>,
    /// NO_PROXY's entries, for the start-up log.
    entries: usize,
}

impl Default for Proxies {
    fn default() -> Proxies {
        Proxies {
            matcher: Arc::new(Matcher::builder().build()),
            http: None,
            https: None,
            exceptions: Vec::new(),
            entries: 0,
        }
    }
}

/// One proxy server.
#[derive(Clone)]
pub struct Proxy {
    /// `http://host:port/`, without credentials, as `Matcher` parsed it.
    uri: Uri,
    /// The Proxy-Authorization value, from the URL's user and password.
    authorization: Option<HeaderValue>,
    /// The URL's `user:password`, as written (percent-encoded), for clients that take a URL.
    userinfo: Option<String>,
}

impl fmt::Debug for Proxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl fmt::Display for Proxy {
    /// Without credentials: it goes to logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "http://{}", authority(self.host(), self.port()))
    }
}

/// A NO_PROXY entry that `Matcher` does not judge as Go's httpproxy does.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Exception {
    All,
    Ip {
        ip: IpAddr,
        port: u16,
    },
    /// `suffix` starts with a dot; `exact`: the domain itself matches too ("example.com:9000"
    /// rather than ".example.com").
    Domain {
        suffix: String,
        exact: bool,
        port: Option<u16>,
    },
}

impl Exception {
    fn excepts(&self, host: &str, ip: Option<IpAddr>, port: u16) -> bool {
        match self {
            Exception::All => true,
            Exception::Ip { ip: at, port: p } => ip == Some(*at) && *p == port,
            Exception::Domain {
                suffix,
                exact,
                port: p,
            } => {
                (host.ends_with(suffix.as_str()) || (*exact && host == &suffix[1..]))
                    && p.is_none_or(|p| p == port)
            }
        }
    }
}

impl Proxies {
    /// The proxies this process's environment names, and what in it cannot be used.
    pub fn from_env() -> (Proxies, Vec<String>) {
        Proxies::from_vars(|name| std::env::var(name).ok())
    }

    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> (Proxies, Vec<String>) {
        let get = |name: &'static str| {
            [name.to_string(), name.to_ascii_lowercase()]
                .iter()
                .find_map(|n| var(n).filter(|v| !v.trim().is_empty()))
                .map(|v| (name, v.trim().to_string()))
        };
        let mut problems = Vec::new();
        let mut proxy = |name: &'static str| {
            let (name, value) = get(name)?;
            match parse_proxy(&value) {
                Ok(proxy) => Some((value, proxy)),
                Err(e) => {
                    problems.push(format!("{name}: {e}; checks go direct"));
                    None
                }
            }
        };
        let http = proxy("HTTP_PROXY");
        let https = proxy("HTTPS_PROXY");
        let no_proxy = get("NO_PROXY").map(|(_, v)| v).unwrap_or_default();
        let (plain, exceptions) = split_no_proxy(&no_proxy);
        let entries = if exceptions.contains(&Exception::All) {
            1
        } else {
            plain.len() + exceptions.len()
        };
        let value = |p: &Option<(String, Proxy)>| p.as_ref().map(|(v, _)| v.clone());
        let matcher = Matcher::builder()
            .http(value(&http).unwrap_or_default())
            .https(value(&https).unwrap_or_default())
            .no(plain.join(","))
            .build();
        let proxies = Proxies {
            matcher: Arc::new(matcher),
            http: http.map(|(_, p)| p),
            https: https.map(|(_, p)| p),
            exceptions,
            entries,
        };
        (proxies, problems)
    }

    /// The proxy a request to `uri` goes through, if any.
    pub fn for_uri(&self, uri: &Uri) -> Option<&Proxy> {
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return None,
        };
        let host = uri.host()?.trim_start_matches('[').trim_end_matches(']');
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let ip = host.parse::<IpAddr>().ok();
        if host == "localhost" || ip.is_some_and(|ip| ip.is_loopback()) {
            return None;
        }
        if self.exceptions.iter().any(|e| e.excepts(&host, ip, port)) {
            return None;
        }
        self.matcher.intercept(uri)?;
        if https { &self.https } else { &self.http }.as_ref()
    }

    /// For the start-up log.
    pub fn describe(&self) -> Option<String> {
        if self.http.is_none() && self.https.is_none() {
            return None;
        }
        let show = |p: &Option<Proxy>| p.as_ref().map_or("direct".to_string(), Proxy::to_string);
        Some(format!(
            "https via {}, http via {}, {} NO_PROXY entries",
            show(&self.https),
            show(&self.http),
            self.entries
        ))
    }
}

impl Proxy {
    /// Without the brackets of an IPv6 address.
    pub fn host(&self) -> &str {
        let host = self.uri.host().unwrap_or_default();
        host.trim_start_matches('[').trim_end_matches(']')
    }

    pub fn port(&self) -> u16 {
        self.uri.port_u16().unwrap_or(80)
    }

    pub fn authorization(&self) -> Option<&HeaderValue> {
        self.authorization.as_ref()
    }

    /// The proxy's URL with its credentials, for the apiserver client (never to be logged).
    pub fn url_with_credentials(&self) -> String {
        let userinfo = self
            .userinfo
            .as_ref()
            .map(|u| format!("{u}@"))
            .unwrap_or_default();
        format!("http://{userinfo}{}", authority(self.host(), self.port()))
    }

    /// Opens a CONNECT tunnel to host:port through the proxy `stream` is connected to.
    pub async fn tunnel(&self, stream: &mut TcpStream, host: &str, port: u16) -> io::Result<()> {
        let target = authority(host, port);
        let mut head = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n").into_bytes();
        if let Some(auth) = &self.authorization {
            head.extend_from_slice(b"Proxy-Authorization: ");
            head.extend_from_slice(auth.as_bytes());
            head.extend_from_slice(b"\r\n");
        }
        head.extend_from_slice(b"\r\n");
        stream.write_all(&head).await?;
        // Byte by byte up to the blank line: what follows is the tunnel's, not the proxy's.
        let mut answer = Vec::with_capacity(128);
        while !answer.ends_with(b"\r\n\r\n") {
            if answer.len() >= 8192 {
                return Err(io::Error::other(format!(
                    "proxy {self} sent an endless answer to CONNECT"
                )));
            }
            let byte = stream.read_u8().await.map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("proxy {self} closed the connection before answering CONNECT"),
                )
            })?;
            answer.push(byte);
        }
        let text = String::from_utf8_lossy(&answer);
        let status = text.lines().next().unwrap_or_default();
        match status.split_whitespace().nth(1) {
            Some(code) if code.starts_with('2') => Ok(()),
            _ => Err(io::Error::new(
                io::ErrorKind::ConnectionRefused,
                format!("proxy {self} refused a tunnel to {target}: {status}"),
            )),
        }
    }
}

/// host:port, with brackets around an IPv6 address.
pub fn authority(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// A proxy URL as Go takes it: with or without "http://". `Matcher` parses it; only the
/// scheme check and the credentials as written are ours.
fn parse_proxy(value: &str) -> Result<Proxy, String> {
    let uri: Uri = value
        .parse()
        .map_err(|e| format!("{value:?} is not a proxy URL: {e}"))?;
    if let Some(scheme) = uri.scheme_str().filter(|s| *s != "http") {
        return Err(format!(
            "{scheme}:// proxies are not supported, only http://"
        ));
    }
    // Any URL would do: with no NO_PROXY, the matcher proxies it if it could parse the value.
    let intercept = Matcher::builder()
        .http(value)
        .build()
        .intercept(&Uri::from_static("http://velero.invalid/"))
        .filter(|i| i.uri().host().is_some_and(|h| !h.is_empty()))
        .ok_or_else(|| format!("{value:?} names no proxy host"))?;
    let userinfo = uri
        .authority()
        .and_then(|a| a.as_str().split_once('@'))
        .map(|(userinfo, _)| userinfo.to_string());
    Ok(Proxy {
        uri: intercept.uri().clone(),
        authorization: intercept.basic_auth().cloned(),
        userinfo,
    })
}

/// NO_PROXY's entries: those `Matcher` judges as Go does (plain domains, IP addresses, CIDR
/// ranges), and the others.
fn split_no_proxy(value: &str) -> (Vec<String>, Vec<Exception>) {
    let mut plain = Vec::new();
    let mut exceptions = Vec::new();
    for entry in value.split(',') {
        let entry = entry.trim().to_ascii_lowercase();
        if entry.is_empty() {
            continue;
        }
        if entry == "*" {
            return (Vec::new(), vec![Exception::All]);
        }
        let (host, port) = split_port(&entry);
        let subdomains_only = host.starts_with('.') || host.starts_with("*.");
        if port.is_none() && !subdomains_only {
            plain.push(host.to_string());
            continue;
        }
        if let (Ok(ip), Some(port)) = (host.parse::<IpAddr>(), port) {
            exceptions.push(Exception::Ip { ip, port });
            continue;
        }
        let host = host
            .strip_prefix('*')
            .filter(|h| h.starts_with('.'))
            .unwrap_or(host);
        if host.is_empty() || host == "." {
            continue;
        }
        exceptions.push(Exception::Domain {
            suffix: if subdomains_only {
                host.to_string()
            } else {
                format!(".{host}")
            },
            exact: !subdomains_only,
            port,
        });
    }
    (plain, exceptions)
}

/// "host:port", "[v6]:port" or a bare host (an IPv6 address without brackets stays whole).
fn split_port(entry: &str) -> (&str, Option<u16>) {
    if let Some(rest) = entry.strip_prefix('[')
        && let Some((host, tail)) = rest.split_once(']')
    {
        return (host, tail.strip_prefix(':').and_then(|p| p.parse().ok()));
    }
    match entry.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') => match port.parse() {
            Ok(port) => (host, Some(port)),
            Err(_) => (entry, None),
        },
        _ => (entry, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proxies(vars: &[(&str, &str)]) -> (Proxies, Vec<String>) {
        Proxies::from_vars(|name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        })
    }

    fn via(p: &Proxies, https: bool, host: &str, port: u16) -> Option<String> {
        let scheme = if https { "https" } else { "http" };
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let uri: Uri = format!("{scheme}://{}/", authority(bare, port))
            .parse()
            .unwrap_or_else(|e| panic!("{host}: {e}"));
        p.for_uri(&uri).map(Proxy::to_string)
    }

    #[test]
    fn nothing_set_means_direct() {
        let (p, problems) = proxies(&[]);
        assert!(problems.is_empty());
        assert_eq!(p.describe(), None);
        assert_eq!(via(&p, true, "s3.amazonaws.com", 443), None);
    }

    #[test]
    fn scheme_picks_the_proxy_upper_case_first() {
        let (p, problems) = proxies(&[
            ("HTTPS_PROXY", "http://secure.corp:3128"),
            ("https_proxy", "http://ignored.corp:1"),
            ("http_proxy", "plain.corp:8080"),
        ]);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(
            via(&p, true, "s3.amazonaws.com", 443).as_deref(),
            Some("http://secure.corp:3128")
        );
        assert_eq!(
            via(&p, false, "minio.example", 9000).as_deref(),
            Some("http://plain.corp:8080")
        );
        assert_eq!(
            p.describe().as_deref(),
            Some(
                "https via http://secure.corp:3128, http via http://plain.corp:8080, 0 NO_PROXY entries"
            )
        );
    }

    #[test]
    fn loopback_is_never_proxied() {
        let (p, _) = proxies(&[("HTTPS_PROXY", "proxy:3128"), ("HTTP_PROXY", "proxy:3128")]);
        for host in [
            "localhost",
            "127.0.0.1",
            "127.1.2.3",
            "[::1]",
            "::1",
            "LOCALHOST.",
        ] {
            assert_eq!(via(&p, true, host, 443), None, "{host}");
        }
        assert!(via(&p, true, "10.0.0.1", 443).is_some());
    }

    #[test]
    fn no_proxy_follows_go() {
        let (p, _) = proxies(&[
            ("HTTPS_PROXY", "proxy:3128"),
            (
                "NO_PROXY",
                " example.com, .internal ,*.svc, 10.0.0.0/8, 192.168.1.5, fd00::/8, minio:9000, [fd00::1]:443",
            ),
        ]);
        let direct = |host: &str, port: u16| via(&p, true, host, port).is_none();
        assert!(direct("example.com", 443));
        assert!(direct("bucket.example.com", 443));
        assert!(!direct("notexample.com", 443));
        assert!(direct("a.internal", 443));
        assert!(
            !direct("internal", 443),
            "a leading dot matches subdomains only"
        );
        assert!(direct("minio.velero.svc", 443));
        assert!(direct("10.1.2.3", 443));
        assert!(!direct("11.1.2.3", 443));
        assert!(direct("192.168.1.5", 443));
        assert!(!direct("192.168.1.6", 443));
        assert!(direct("fd00::7", 443));
        assert!(direct("minio", 9000));
        assert!(
            !direct("minio", 9001),
            "a port in NO_PROXY limits the exception"
        );
        assert!(!direct("fc00::1", 443));
        assert!(direct("EXAMPLE.COM", 443), "hosts compare without case");

        let (all, _) = proxies(&[("HTTPS_PROXY", "proxy:3128"), ("no_proxy", "foo, *")]);
        assert_eq!(via(&all, true, "s3.amazonaws.com", 443), None);
    }

    /// The rules Go has and hyper-util's Matcher has not (the module's list).
    #[test]
    fn go_rules_beyond_the_matcher() {
        let (p, _) = proxies(&[
            ("HTTPS_PROXY", ""),
            ("https_proxy", "proxy:3128"),
            ("ALL_PROXY", "http://all.corp:3128"),
            ("NO_PROXY", "*.svc, .internal, [fd00::1]:443"),
        ]);
        let direct = |host: &str, port: u16| via(&p, true, host, port).is_none();
        assert!(
            !direct("s3.amazonaws.com", 443),
            "an empty HTTPS_PROXY is unset"
        );
        assert_eq!(via(&p, false, "minio", 9000), None, "ALL_PROXY is not read");
        assert!(!direct("svc", 443), "*.svc excepts subdomains only");
        assert!(!direct("internal", 443));
        assert!(direct("fd00::1", 443));
        assert!(!direct("fd00::1", 8443));
        let (all, _) = proxies(&[("HTTPS_PROXY", "proxy:3128"), ("NO_PROXY", "*")]);
        assert_eq!(via(&all, true, "10.0.0.1", 443), None, "* excepts IPs too");
    }

    #[test]
    fn proxy_urls_as_go_takes_them() {
        let one = parse_proxy;
        let bare = one("10.0.0.1:3128").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((bare.host(), bare.port()), ("10.0.0.1", 3128));
        assert!(bare.authorization().is_none());
        assert_eq!(bare.url_with_credentials(), "http://10.0.0.1:3128");
        assert_eq!(one("http://proxy.corp").map(|p| p.port()), Ok(80));
        assert_eq!(
            one("http://[fd00::1]:3128").map(|p| p.host().to_string()),
            Ok("fd00::1".into())
        );
        let with_user =
            one("http://svc%40corp:p%3Ass@proxy:3128").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            with_user.authorization().and_then(|a| a.to_str().ok()),
            // base64("svc@corp:p:ss")
            Some("Basic c3ZjQGNvcnA6cDpzcw==")
        );
        assert_eq!(
            with_user.to_string(),
            "http://proxy:3128",
            "no credentials in logs"
        );
        assert_eq!(format!("{with_user:?}"), "http://proxy:3128");
        assert_eq!(
            with_user.url_with_credentials(),
            "http://svc%40corp:p%3Ass@proxy:3128",
            "as written, for a client that decodes it"
        );
        assert_eq!(
            one("https://proxy:3128").err().as_deref(),
            Some("https:// proxies are not supported, only http://")
        );
        let (p, problems) = proxies(&[("HTTPS_PROXY", "socks5://proxy:1080")]);
        assert!(p.https.is_none());
        assert_eq!(p.describe(), None);
        assert_eq!(
            problems,
            ["HTTPS_PROXY: socks5:// proxies are not supported, only http://; checks go direct"]
        );
    }
}
