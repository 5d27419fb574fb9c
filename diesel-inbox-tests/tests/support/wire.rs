//! A TCP relay between a test's connection and its server, on 127.0.0.1, that the test can
//! cut or make deaf: what a network failure or a server that stopped answering looks like
//! from the client, without touching the server itself.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;

/// A relay of one connection to the server at a URL's host and port.
pub(crate) struct Wire {
    url: String,
    deaf: Arc<AtomicBool>,
    sockets: Arc<Mutex<Vec<TcpStream>>>,
}

impl Wire {
    /// A relay to the server of `url` (`scheme://user@host:port/database`); connect through
    /// [`Wire::url`].
    pub(crate) fn to(url: &str) -> Self {
        let (scheme, rest) = url.split_once("://").expect("a server URL");
        let (user, rest) = rest.split_once('@').expect("a URL with a user");
        let (server, database) = rest.split_once('/').expect("a URL with a database");
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let relay = format!(
            "{scheme}://{user}@{}/{database}",
            listener.local_addr().unwrap()
        );
        let wire = Self {
            url: relay,
            deaf: Arc::default(),
            sockets: Arc::default(),
        };
        let (server, deaf, sockets) = (server.to_owned(), wire.deaf.clone(), wire.sockets.clone());
        thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(upstream) = TcpStream::connect(&server) else {
                    return;
                };
                sockets
                    .lock()
                    .unwrap()
                    .extend([client.try_clone().unwrap(), upstream.try_clone().unwrap()]);
                pump(
                    client.try_clone().unwrap(),
                    upstream.try_clone().unwrap(),
                    Some(deaf.clone()),
                );
                pump(upstream, client, None);
            }
        });
        wire
    }

    /// The URL that connects through the relay.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// Cuts every connection through the relay, both ways: the client reads an end of stream
    /// mid-conversation (under TLS, libpq's `SSL SYSCALL error: EOF detected`).
    pub(crate) fn cut(&self) {
        for socket in self.sockets.lock().unwrap().iter() {
            let _ = socket.shutdown(Shutdown::Both);
        }
    }

    /// From now on, what the client sends is dropped on the floor: the server never hears
    /// it, and the client waits for a reply that only the server's own timers can end
    /// (their end of stream still travels back).
    pub(crate) fn go_deaf(&self) {
        self.deaf.store(true, Ordering::SeqCst);
    }
}

/// Copies `from` to `to` until either ends; while `deaf` is set, reads and drops.
fn pump(mut from: TcpStream, mut to: TcpStream, deaf: Option<Arc<AtomicBool>>) {
    thread::spawn(move || {
        let mut buffer = [0; 16 * 1024];
        loop {
            let read = match from.read(&mut buffer) {
                Ok(0) | Err(_) => break,
                Ok(read) => read,
            };
            if deaf
                .as_ref()
                .is_some_and(|deaf| deaf.load(Ordering::SeqCst))
            {
                continue;
            }
            if to.write_all(&buffer[..read]).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
}
