//! A forward HTTP proxy on 127.0.0.1, as a corporate network puts between a cluster and its
//! object storage: CONNECT tunnels for https and absolute-form requests for http, Basic
//! credentials required. It sends every target host to 127.0.0.1, so a host name only it
//! knows shows that a request went through it. It records the first request line of each
//! connection.

use std::sync::{Arc, Mutex};

use base64::Engine;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub struct ForwardProxy {
    pub port: u16,
    seen: Arc<Mutex<Vec<String>>>,
}

impl ForwardProxy {
    pub async fn start(user: &str, password: &str) -> ForwardProxy {
        // In-process: it keeps the port it binds, so no other test can take it first.
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap_or_else(|e| panic!("proxy listen: {e}"));
        let port = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("proxy address: {e}"))
            .port();
        let credentials = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
        );
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (credentials, log) = (credentials.clone(), log.clone());
                tokio::spawn(async move {
                    if let Err(e) = serve(client, &credentials, &log).await {
                        eprintln!("forward proxy: {e}");
                    }
                });
            }
        });
        ForwardProxy { port, seen }
    }

    /// The first request line of every connection so far.
    pub fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

async fn serve(
    mut client: TcpStream,
    credentials: &str,
    log: &Mutex<Vec<String>>,
) -> std::io::Result<()> {
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        head.push(client.read_u8().await?);
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    let line = text.lines().next().unwrap_or_default().to_string();
    log.lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(line.clone());
    let authorized = text.lines().any(|l| {
        l.split_once(':').is_some_and(|(name, value)| {
            name.eq_ignore_ascii_case("proxy-authorization") && value.trim() == credentials
        })
    });
    if !authorized {
        client
            .write_all(
                b"HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic\r\n\
                  Content-Length: 0\r\nConnection: close\r\n\r\n",
            )
            .await?;
        return Ok(());
    }
    let mut words = line.split_whitespace();
    let (method, target) = (
        words.next().unwrap_or_default(),
        words.next().unwrap_or_default(),
    );
    // CONNECT host:port, or GET http://host:port/path: only the port matters here.
    let authority = target
        .strip_prefix("http://")
        .map_or(target, |rest| rest.split('/').next().unwrap_or_default());
    let port: u16 = authority
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("no port in {line:?}")))?;
    let mut upstream = TcpStream::connect(("127.0.0.1", port)).await?;
    if method == "CONNECT" {
        client
            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .await?;
    } else {
        // The server takes the absolute form as it is.
        upstream.write_all(&head).await?;
    }
    tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
    Ok(())
}
