//! HTTP proxies for the storage checks, from the environment as Velero's plugins (Go's
//! net/http) read it: HTTPS_PROXY for https URLs, HTTP_PROXY for http ones (upper case first,
//! then lower case), NO_PROXY for exceptions; localhost and loopback addresses are never
//! proxied. https URLs go through a CONNECT tunnel, http ones as absolute-form requests. Only
//! http:// proxies: a TLS connection to the proxy itself is not supported.

use std::fmt;
use std::io;
use std::net::IpAddr;

use base64::Engine;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use url::Url;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Proxies {
    http: Option<Proxy>,
    https: Option<Proxy>,
    exceptions: Vec<Exception>,
}

/// One proxy server.
#[derive(Clone, PartialEq, Eq)]
pub struct Proxy {
    pub host: String,
    pub port: u16,
    /// The Proxy-Authorization value, from the URL's user and password.
    pub authorization: Option<String>,
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
        write!(f, "http://{}", authority(&self.host, self.port))
    }
}

/// A NO_PROXY entry, as Go's golang.org/x/net/http/httpproxy parses it.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Exception {
    All,
    Net {
        ip: IpAddr,
        bits: u8,
    },
    Ip {
        ip: IpAddr,
        port: Option<u16>,
    },
    /// `suffix` starts with a dot; `exact`: the domain itself matches too ("example.com"
    /// rather than ".example.com").
    Domain {
        suffix: String,
        exact: bool,
        port: Option<u16>,
    },
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
                .map(|v| (name, v))
        };
        let mut problems = Vec::new();
        let mut proxy = |name: &'static str| {
            let (name, value) = get(name)?;
            parse_proxy(&value)
                .map_err(|e| problems.push(format!("{name}: {e}; checks go direct")))
                .ok()
        };
        let http = proxy("HTTP_PROXY");
        let https = proxy("HTTPS_PROXY");
        let exceptions = get("NO_PROXY")
            .map(|(_, v)| parse_exceptions(&v))
            .unwrap_or_default();
        (
            Proxies {
                http,
                https,
                exceptions,
            },
            problems,
        )
    }

    /// The proxy a request to this origin goes through, if any.
    pub fn for_origin(&self, https: bool, host: &str, port: u16) -> Option<&Proxy> {
        let proxy = if https { &self.https } else { &self.http }.as_ref()?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        let ip = host.parse::<IpAddr>().ok();
        if host == "localhost" || ip.is_some_and(|ip| ip.is_loopback()) {
            return None;
        }
        let excepted = self.exceptions.iter().any(|e| match e {
            Exception::All => true,
            Exception::Net { ip: net, bits } => ip.is_some_and(|ip| in_net(ip, *net, *bits)),
            Exception::Ip { ip: at, port: p } => ip == Some(*at) && p.is_none_or(|p| p == port),
            Exception::Domain {
                suffix,
                exact,
                port: p,
            } => {
                (host.ends_with(suffix.as_str()) || (*exact && host == suffix[1..]))
                    && p.is_none_or(|p| p == port)
            }
        });
        (!excepted).then_some(proxy)
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
            self.exceptions.len()
        ))
    }
}

impl Proxy {
    /// The proxy's URL with its credentials, for the apiserver client (never to be logged).
    pub fn url_with_credentials(&self) -> String {
        let userinfo = self
            .userinfo
            .as_ref()
            .map(|u| format!("{u}@"))
            .unwrap_or_default();
        format!("http://{userinfo}{}", authority(&self.host, self.port))
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

/// A proxy URL as Go takes it: with or without "http://".
fn parse_proxy(value: &str) -> Result<Proxy, String> {
    let value = value.trim();
    let url = match Url::parse(value) {
        Ok(url) if url.has_host() => url,
        _ => Url::parse(&format!("http://{value}"))
            .map_err(|e| format!("{value:?} is not a proxy URL: {e}"))?,
    };
    if url.scheme() != "http" {
        return Err(format!(
            "{}:// proxies are not supported, only http://",
            url.scheme()
        ));
    }
    let host = match url.host_str() {
        Some(h) if !h.is_empty() => h.trim_start_matches('[').trim_end_matches(']'),
        _ => return Err(format!("{value:?} names no proxy host")),
    };
    let authorization = (!url.username().is_empty()).then(|| {
        let decode = |s: &str| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8_lossy()
                .into_owned()
        };
        let pair = format!(
            "{}:{}",
            decode(url.username()),
            decode(url.password().unwrap_or_default())
        );
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(pair)
        )
    });
    let userinfo = (!url.username().is_empty()).then(|| match url.password() {
        Some(password) => format!("{}:{password}", url.username()),
        None => url.username().to_string(),
    });
    Ok(Proxy {
        host: host.to_string(),
        port: url.port_or_known_default().unwrap_or(80),
        authorization,
        userinfo,
    })
}

fn parse_exceptions(value: &str) -> Vec<Exception> {
    let mut out = Vec::new();
    for entry in value.split(',') {
        let entry = entry.trim().to_ascii_lowercase();
        if entry.is_empty() {
            continue;
        }
        if entry == "*" {
            return vec![Exception::All];
        }
        if let Some((ip, bits)) = entry.split_once('/')
            && let (Ok(ip), Ok(bits)) = (ip.parse::<IpAddr>(), bits.parse::<u8>())
            && bits <= if ip.is_ipv4() { 32 } else { 128 }
        {
            out.push(Exception::Net { ip, bits });
            continue;
        }
        let (host, port) = split_port(&entry);
        if let Ok(ip) = host.parse::<IpAddr>() {
            out.push(Exception::Ip { ip, port });
            continue;
        }
        let host = host.strip_prefix('*').unwrap_or(host);
        if host.is_empty() || host == "." {
            continue;
        }
        let exact = !host.starts_with('.');
        out.push(Exception::Domain {
            suffix: if exact {
                format!(".{host}")
            } else {
                host.to_string()
            },
            exact,
            port,
        });
    }
    out
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

fn in_net(ip: IpAddr, net: IpAddr, bits: u8) -> bool {
    let (ip, net, len) = match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(b)) => (a.to_bits() as u128, b.to_bits() as u128, 32),
        (IpAddr::V6(a), IpAddr::V6(b)) => (a.to_bits(), b.to_bits(), 128),
        _ => return false,
    };
    let shift = len - u32::from(bits);
    shift >= len || (ip >> shift) == (net >> shift)
}

/// Opens a CONNECT tunnel to host:port through the proxy `stream` is connected to.
pub async fn tunnel(
    stream: &mut TcpStream,
    proxy: &Proxy,
    host: &str,
    port: u16,
) -> io::Result<()> {
    let target = authority(host, port);
    let mut head = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n");
    if let Some(auth) = &proxy.authorization {
        head.push_str(&format!("Proxy-Authorization: {auth}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await?;
    // Byte by byte up to the blank line: what follows is the tunnel's, not the proxy's.
    let mut answer = Vec::with_capacity(128);
    while !answer.ends_with(b"\r\n\r\n") {
        if answer.len() >= 8192 {
            return Err(io::Error::other(format!(
                "proxy {proxy} sent an endless answer to CONNECT"
            )));
        }
        let byte = stream.read_u8().await.map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("proxy {proxy} closed the connection before answering CONNECT"),
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
            format!("proxy {proxy} refused a tunnel to {target}: {status}"),
        )),
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
        p.for_origin(https, host, port).map(Proxy::to_string)
    }

    #[test]
    fn nothing_set_means_direct() {
        let (p, problems) = proxies(&[]);
        assert_eq!(p, Proxies::default());
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

    #[test]
    fn proxy_urls_as_go_takes_them() {
        let one = |v: &str| parse_proxy(v);
        assert_eq!(
            one("10.0.0.1:3128"),
            Ok(Proxy {
                host: "10.0.0.1".into(),
                port: 3128,
                authorization: None,
                userinfo: None,
            })
        );
        assert_eq!(one("http://proxy.corp").map(|p| p.port), Ok(80));
        assert_eq!(
            one("http://[fd00::1]:3128").map(|p| p.host),
            Ok("fd00::1".into())
        );
        let with_user =
            one("http://svc%40corp:p%3Ass@proxy:3128").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            with_user.authorization.as_deref(),
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
            one("https://proxy:3128"),
            Err("https:// proxies are not supported, only http://".into())
        );
        let (p, problems) = proxies(&[("HTTPS_PROXY", "socks5://proxy:1080")]);
        assert_eq!(p.https, None);
        assert_eq!(
            problems,
            ["HTTPS_PROXY: socks5:// proxies are not supported, only http://; checks go direct"]
        );
    }
}
