//! Storage endpoints that fail the way real ones do, on 127.0.0.1: one that accepts and never
//! answers (a hung server; over https, a TLS handshake that never completes), one that answers
//! late, and one whose connections never complete (a full accept queue, as behind a DROP
//! firewall). A faulty endpoint can be switched to forward to a real server, as when an outage
//! ends.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Accepts, reads what comes, never writes.
    Silent,
    /// Forwards to the upstream, each request held back this long first.
    Slow(Duration),
    /// Forwards to the upstream.
    Forward,
}

/// An endpoint in front of `upstream` ("host:port") whose behaviour the test sets; new
/// connections follow the current mode, open ones keep theirs.
pub struct Faulty {
    pub port: u16,
    mode: Arc<Mutex<Mode>>,
    connections: Arc<Connections>,
}

/// Connections open now, and the most ever open at once.
#[derive(Default)]
struct Connections {
    live: AtomicUsize,
    peak: AtomicUsize,
}

impl Faulty {
    pub fn start(upstream: &str, mode: Mode) -> Faulty {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("bind: {e}"));
        let port = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("addr: {e}"))
            .port();
        let mode = Arc::new(Mutex::new(mode));
        let connections = Arc::new(Connections::default());
        let (current, counted) = (mode.clone(), connections.clone());
        let upstream = upstream.to_string();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let mode = *current.lock().unwrap_or_else(|e| e.into_inner());
                let upstream = upstream.clone();
                let counted = counted.clone();
                let live = counted.live.fetch_add(1, Ordering::SeqCst) + 1;
                counted.peak.fetch_max(live, Ordering::SeqCst);
                std::thread::spawn(move || {
                    serve(client, &upstream, mode);
                    counted.live.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        Faulty {
            port,
            mode,
            connections,
        }
    }

    /// The most connections ever open to this endpoint at once.
    pub fn peak_connections(&self) -> usize {
        self.connections.peak.load(Ordering::SeqCst)
    }

    /// A silent endpoint with nothing behind it.
    pub fn silent() -> Faulty {
        Faulty::start("127.0.0.1:9", Mode::Silent)
    }

    pub fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap_or_else(|e| e.into_inner()) = mode;
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The same endpoint as an https URL: a client's TLS handshake never completes there.
    pub fn https_url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }
}

fn serve(mut client: TcpStream, upstream: &str, mode: Mode) {
    let delay = match mode {
        Mode::Silent => {
            // Read until the client gives up, so its socket closes cleanly.
            let mut sink = [0u8; 4096];
            while matches!(client.read(&mut sink), Ok(n) if n > 0) {}
            return;
        }
        Mode::Slow(delay) => delay,
        Mode::Forward => Duration::ZERO,
    };
    let Ok(server) = TcpStream::connect(upstream) else {
        return;
    };
    let (Ok(mut client_in), Ok(mut server_out)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    let up = std::thread::spawn(move || {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = match client_in.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            // An HTTP/1.1 request starts a write with its method: hold it back.
            let request = [&b"GET "[..], b"PUT ", b"POST ", b"HEAD ", b"DELETE "]
                .iter()
                .any(|m| buf[..n].starts_with(m));
            if request && !delay.is_zero() {
                std::thread::sleep(delay);
            }
            if server_out.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = server_out.shutdown(Shutdown::Write);
    });
    let mut server_in = server;
    let _ = std::io::copy(&mut server_in, &mut client);
    let _ = client.shutdown(Shutdown::Write);
    let _ = up.join();
}

/// A port whose connections never complete: its accept queue is full and nobody accepts, so
/// the kernel drops further SYNs, as a DROP firewall does.
pub struct Unconnectable {
    pub port: u16,
    _listener: TcpListener,
    _fillers: Vec<TcpStream>,
}

impl Unconnectable {
    pub fn start() -> Unconnectable {
        use std::os::fd::AsRawFd;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("bind: {e}"));
        // SAFETY: listen(2) on a socket this listener owns, to shrink its queue to one.
        #[allow(unsafe_code)]
        let rc = unsafe { libc::listen(listener.as_raw_fd(), 0) };
        assert_eq!(rc, 0, "listen: {}", std::io::Error::last_os_error());
        let port = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("addr: {e}"))
            .port();
        // Fill the queue; connects past it hang.
        let mut fillers = Vec::new();
        for _ in 0..4 {
            match TcpStream::connect_timeout(
                &([127, 0, 0, 1], port).into(),
                Duration::from_millis(200),
            ) {
                Ok(stream) => fillers.push(stream),
                Err(_) => break,
            }
        }
        Unconnectable {
            port,
            _listener: listener,
            _fillers: fillers,
        }
    }
}

/// A TCP link to `upstream` that can be cut: while cut, every byte either way is dropped, on
/// open connections and on new ones, as in a network partition; healed, new connections go
/// through again (open ones stay dead, as after a real partition their peers time out).
pub struct Link {
    pub port: u16,
    cut: Arc<AtomicBool>,
    refusing: Arc<AtomicBool>,
    open: Arc<Mutex<Open>>,
}

/// The connections a link carries now, and the most it ever carried at once.
#[derive(Default)]
struct Open {
    streams: std::collections::HashMap<u64, TcpStream>,
    next: u64,
    peak: usize,
}

impl Link {
    pub fn start(upstream: &str) -> Link {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("bind: {e}"));
        let port = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("addr: {e}"))
            .port();
        let cut = Arc::new(AtomicBool::new(false));
        let refusing = Arc::new(AtomicBool::new(false));
        let open: Arc<Mutex<Open>> = Arc::default();
        let (flag, refuse, opened) = (cut.clone(), refusing.clone(), open.clone());
        let upstream = upstream.to_string();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let id = {
                    // Checked under the lock `refuse` takes, so that no connection accepted
                    // just before it slips past both the check and the drain.
                    let mut open = opened.lock().unwrap_or_else(|e| e.into_inner());
                    if refuse.load(Ordering::SeqCst) {
                        // Closed at once, as by a host whose server is down.
                        let _ = client.shutdown(Shutdown::Both);
                        continue;
                    }
                    let id = open.next;
                    open.next += 1;
                    if let Ok(clone) = client.try_clone() {
                        open.streams.insert(id, clone);
                    }
                    open.peak = open.peak.max(open.streams.len());
                    id
                };
                let (flag, upstream, opened) = (flag.clone(), upstream.clone(), opened.clone());
                std::thread::spawn(move || {
                    let _done = Done(opened, id);
                    let Ok(server) = TcpStream::connect(&upstream) else {
                        return;
                    };
                    // A connection made during the cut never carries anything.
                    let dead = Arc::new(AtomicBool::new(flag.load(Ordering::SeqCst)));
                    let pipe = |mut from: TcpStream, mut to: TcpStream| {
                        let (flag, dead) = (flag.clone(), dead.clone());
                        std::thread::spawn(move || {
                            let mut buf = vec![0u8; 16 * 1024];
                            loop {
                                let n = match from.read(&mut buf) {
                                    Ok(0) | Err(_) => break,
                                    Ok(n) => n,
                                };
                                if flag.load(Ordering::SeqCst) {
                                    dead.store(true, Ordering::SeqCst);
                                }
                                if dead.load(Ordering::SeqCst) {
                                    continue;
                                }
                                if to.write_all(&buf[..n]).is_err() {
                                    break;
                                }
                            }
                            let _ = to.shutdown(Shutdown::Write);
                        })
                    };
                    let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) else {
                        return;
                    };
                    let up = pipe(client, s2);
                    let down = pipe(server, c2);
                    let _ = up.join();
                    let _ = down.join();
                });
            }
        });
        Link {
            port,
            cut,
            refusing,
            open,
        }
    }

    /// The server goes away: open connections are closed and new ones refused.
    pub fn refuse(&self) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        self.refusing.store(true, Ordering::SeqCst);
        for (_, stream) in open.streams.drain() {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }

    /// The most connections it carried at once.
    pub fn peak_connections(&self) -> usize {
        self.open.lock().unwrap_or_else(|e| e.into_inner()).peak
    }

    /// The connections it ever accepted (refused ones aside).
    pub fn accepted_connections(&self) -> usize {
        let next = self.open.lock().unwrap_or_else(|e| e.into_inner()).next;
        usize::try_from(next).unwrap_or(usize::MAX)
    }

    /// Back again: new connections go through.
    pub fn accept(&self) {
        self.refusing.store(false, Ordering::SeqCst);
    }

    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
    }

    pub fn heal(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

/// Removes a link's connection from the count when its thread ends.
struct Done(Arc<Mutex<Open>>, u64);

impl Drop for Done {
    fn drop(&mut self) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .streams
            .remove(&self.1);
    }
}
