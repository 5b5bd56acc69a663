//! A fake provider server for the providers' tests: canned HTTP answers served in
//! order on a fresh loopback port, each a status, headers and body pieces sent with
//! a pause before each, and what the server saw.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// One canned HTTP response.
#[derive(Clone, Debug)]
pub(crate) struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub pieces: Vec<String>,
    pub pause: Duration,
}

impl Reply {
    /// Server-sent events, each `data: …`.
    pub fn sse(events: &[&str]) -> Reply {
        Reply {
            status: 200,
            headers: vec![("Content-Type".into(), "text/event-stream".into())],
            pieces: events.iter().map(|e| format!("data: {e}\n\n")).collect(),
            pause: Duration::ZERO,
        }
    }

    /// Named server-sent events, each `event: <name>` and `data: …`.
    pub fn named_sse(events: &[(&str, &str)]) -> Reply {
        Reply {
            status: 200,
            headers: vec![("Content-Type".into(), "text/event-stream".into())],
            pieces: events
                .iter()
                .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"))
                .collect(),
            pause: Duration::ZERO,
        }
    }

    /// Newline-delimited JSON, one line per record.
    pub fn ndjson(lines: &[&str]) -> Reply {
        Reply {
            status: 200,
            headers: vec![("Content-Type".into(), "application/x-ndjson".into())],
            pieces: lines.iter().map(|l| format!("{l}\n")).collect(),
            pause: Duration::ZERO,
        }
    }

    /// A whole body with a status.
    pub fn status(status: u16, body: &str) -> Reply {
        Reply {
            status,
            headers: vec![("Content-Type".into(), "application/json".into())],
            pieces: vec![body.to_string()],
            pause: Duration::ZERO,
        }
    }

    /// The same reply with a header added.
    pub fn header(mut self, name: &str, value: &str) -> Reply {
        self.headers.push((name.into(), value.into()));
        self
    }
}

/// What the server saw.
#[derive(Default, Debug)]
pub(crate) struct Seen {
    pub requests: Vec<String>,
    /// Connections the client closed while the server was still writing.
    pub hangups: usize,
}

impl Seen {
    /// The JSON body of request `i`.
    pub fn body(&self, i: usize) -> serde_json::Value {
        let request = &self.requests[i];
        let body = &request[request.find("\r\n\r\n").unwrap() + 4..];
        serde_json::from_str(body).unwrap()
    }
}

/// Serves `replies` in order (the last repeats) on a fresh port; returns its root
/// URL (`http://127.0.0.1:<port>`).
pub(crate) async fn serve(replies: Vec<Reply>) -> (String, Arc<Mutex<Seen>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Seen::default()));
    let seen2 = seen.clone();
    tokio::spawn(async move {
        let mut n = 0;
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let reply = replies[n.min(replies.len() - 1)].clone();
            n += 1;
            let seen = seen2.clone();
            tokio::spawn(async move {
                let request = read_request(&mut socket).await;
                seen.lock().unwrap().requests.push(request);
                let reason = if reply.status == 200 { "OK" } else { "Error" };
                let mut head = format!("HTTP/1.1 {} {reason}\r\n", reply.status);
                for (name, value) in &reply.headers {
                    head.push_str(&format!("{name}: {value}\r\n"));
                }
                head.push_str("Connection: close\r\n\r\n");
                if socket.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                for piece in reply.pieces {
                    tokio::time::sleep(reply.pause).await;
                    if socket.write_all(piece.as_bytes()).await.is_err()
                        || socket.flush().await.is_err()
                    {
                        seen.lock().unwrap().hangups += 1;
                        return;
                    }
                }
            });
        }
    });
    (url, seen)
}

async fn read_request(socket: &mut tokio::net::TcpStream) -> String {
    let mut data = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = socket.read(&mut buf).await.unwrap_or(0);
        if n == 0 {
            break;
        }
        data.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&data);
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse::<usize>().unwrap())
                })
                .unwrap_or(0);
            if data.len() >= end + 4 + length {
                break;
            }
        }
    }
    String::from_utf8_lossy(&data).into_owned()
}
