//! A fake external service for the claims scenarios: an HTTP server on 127.0.0.1 that counts
//! the calls it gets and the effects it applies, per idempotency key. It runs in the test's
//! own process, so a child process the test kills cannot take the counts with it.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Whether the service honours the idempotency key a call carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Keys {
    /// Like a payment API: a repeated key gets the first call's result and applies nothing.
    Honoured,
    /// Like most mailers: every call applies, whatever key it carries.
    Ignored,
}

#[derive(Debug, Default)]
struct Ledger {
    calls: HashMap<String, usize>,
    applied: HashMap<String, usize>,
    results: HashMap<String, String>,
    next: usize,
}

/// The running service; it stops when dropped.
#[derive(Debug)]
pub(crate) struct FakeService {
    addr: String,
    ledger: Arc<Mutex<Ledger>>,
    stop: Arc<AtomicBool>,
    server: Option<JoinHandle<()>>,
}

impl FakeService {
    /// Starts it on a free port of 127.0.0.1.
    pub(crate) fn start(keys: Keys) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let ledger = Arc::new(Mutex::new(Ledger::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let server = {
            let (ledger, stop) = (ledger.clone(), stop.clone());
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    if let Ok(stream) = stream {
                        let _ = serve(stream, keys, &ledger);
                    }
                }
            })
        };
        Self {
            addr,
            ledger,
            stop,
            server: Some(server),
        }
    }

    /// Where it listens, `127.0.0.1:port`.
    pub(crate) fn addr(&self) -> &str {
        &self.addr
    }

    /// Calls received with `key`.
    pub(crate) fn calls(&self, key: &str) -> usize {
        self.ledger
            .lock()
            .unwrap()
            .calls
            .get(key)
            .copied()
            .unwrap_or(0)
    }

    /// Effects applied for `key`: emails sent, charges made.
    pub(crate) fn applied(&self, key: &str) -> usize {
        self.ledger
            .lock()
            .unwrap()
            .applied
            .get(key)
            .copied()
            .unwrap_or(0)
    }

    /// The result of the first call with `key`, as the service's own log shows it to ops.
    pub(crate) fn result_of(&self, key: &str) -> Option<String> {
        self.ledger.lock().unwrap().results.get(key).cloned()
    }
}

impl Drop for FakeService {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop so that it sees the flag.
        let _ = TcpStream::connect(&self.addr);
        if let Some(server) = self.server.take() {
            let _ = server.join();
        }
    }
}

/// Answers one request: `POST /effects` with an `Idempotency-Key` header.
fn serve(stream: TcpStream, keys: Keys, ledger: &Mutex<Ledger>) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut key = None;
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 || line == "\r\n" {
            break;
        }
        if let Some(value) = line.strip_prefix("Idempotency-Key: ") {
            key = Some(value.trim().to_owned());
        }
    }
    let Some(key) = key else {
        return respond(stream, "400 Bad Request", "an Idempotency-Key is required");
    };
    let result = {
        let mut ledger = ledger.lock().unwrap();
        *ledger.calls.entry(key.clone()).or_default() += 1;
        match ledger.results.get(&key) {
            Some(first) if keys == Keys::Honoured => first.clone(),
            _ => {
                ledger.next += 1;
                let result = format!("fx-{}", ledger.next);
                *ledger.applied.entry(key.clone()).or_default() += 1;
                ledger.results.entry(key).or_insert_with(|| result.clone());
                result
            }
        }
    };
    respond(stream, "200 OK", &result)
}

fn respond(mut stream: TcpStream, status: &str, body: &str) -> std::io::Result<()> {
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// Calls the service at `addr` with `key`, as a side effect would: the result it returns.
pub(crate) fn call(addr: &str, key: &str) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        stream,
        "POST /effects HTTP/1.1\r\nHost: {addr}\r\nIdempotency-Key: {key}\r\nContent-Length: 0\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP response: {response:?}")))?;
    if head.starts_with("HTTP/1.1 200") {
        Ok(body.to_owned())
    } else {
        Err(std::io::Error::other(format!(
            "the service refused: {head}"
        )))
    }
}
