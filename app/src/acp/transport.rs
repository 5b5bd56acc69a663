//! JSON-RPC 2.0 over newline-delimited stdio, as ACP speaks it: one reader of
//! stdin, one writer of stdout (which carries protocol messages and nothing else),
//! request ids, and the routing of responses to the agent's own requests.
//!
//! A line that is not JSON, not UTF-8, or not a JSON-RPC message is answered with
//! the JSON-RPC error for it (-32700 parse error, -32600 invalid request), never a
//! crash; a response to no request of ours is logged and dropped.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

/// JSON-RPC error codes.
pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL_ERROR: i64 = -32603;
/// ACP: the resource (a session) does not exist.
pub const RESOURCE_NOT_FOUND: i64 = -32002;

/// The longest line read (a prompt with a large file pasted in fits many times).
pub const MAX_LINE: usize = 8 * 1024 * 1024;

/// Messages read and not yet taken: past this, stdin is not read until some are.
pub const INCOMING: usize = 32;

/// Messages written to stdout may wait this many deep before producers of updates
/// wait for the client to read ([`Outbox::ready`]).
pub const OUTGOING: usize = 1024;

/// One message from the client.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    Notification {
        method: String,
        params: Value,
    },
    /// The answer to one of our requests.
    Response {
        id: Value,
        outcome: Result<Value, Value>,
    },
    /// A line that cannot be handled; `reply` is the error response to send.
    Invalid {
        reply: Value,
    },
}

/// Reads one line as a message.
pub fn parse(line: &[u8]) -> Incoming {
    let Ok(text) = std::str::from_utf8(line) else {
        return Incoming::Invalid {
            reply: error_response(Value::Null, PARSE_ERROR, "the line is not valid UTF-8"),
        };
    };
    let value: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            return Incoming::Invalid {
                reply: error_response(Value::Null, PARSE_ERROR, &format!("parse error: {e}")),
            };
        }
    };
    let Value::Object(map) = &value else {
        return Incoming::Invalid {
            reply: error_response(
                Value::Null,
                INVALID_REQUEST,
                "a message must be a JSON object",
            ),
        };
    };
    let id = map.get("id").cloned();
    let valid_id = matches!(
        id,
        None | Some(Value::Number(_) | Value::String(_) | Value::Null)
    );
    if map.get("jsonrpc") != Some(&json!("2.0")) || !valid_id {
        return Incoming::Invalid {
            reply: error_response(
                id.filter(|_| valid_id).unwrap_or(Value::Null),
                INVALID_REQUEST,
                "not a JSON-RPC 2.0 message",
            ),
        };
    }
    match (map.get("method"), id) {
        (Some(Value::String(method)), Some(id)) => Incoming::Request {
            id,
            method: method.clone(),
            params: map.get("params").cloned().unwrap_or(Value::Null),
        },
        (Some(Value::String(method)), None) => Incoming::Notification {
            method: method.clone(),
            params: map.get("params").cloned().unwrap_or(Value::Null),
        },
        (None, Some(id)) => match (map.get("result"), map.get("error")) {
            (Some(result), None) => Incoming::Response {
                id,
                outcome: Ok(result.clone()),
            },
            (None, Some(error)) => Incoming::Response {
                id,
                outcome: Err(error.clone()),
            },
            _ => Incoming::Invalid {
                reply: error_response(id, INVALID_REQUEST, "a response needs a result or an error"),
            },
        },
        _ => Incoming::Invalid {
            reply: error_response(Value::Null, INVALID_REQUEST, "a request needs a method"),
        },
    }
}

pub fn response(id: Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

pub fn error_response(id: Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

/// Reads lines from `input` until EOF, sending each parsed message. A line longer
/// than [`MAX_LINE`] is answered with a parse error and skipped (the rest of it is
/// read and dropped, never held). The channel is bounded: while it is full, stdin
/// is not read.
pub async fn read_messages(
    mut input: impl AsyncBufRead + Unpin,
    messages: mpsc::Sender<Incoming>,
) -> std::io::Result<()> {
    let mut line = Vec::new();
    loop {
        line.clear();
        let mut too_long = false;
        // Read up to the newline, keeping at most MAX_LINE bytes.
        loop {
            let buf = input.fill_buf().await?;
            if buf.is_empty() {
                break;
            }
            let (chunk, done) = match buf.iter().position(|b| *b == b'\n') {
                Some(at) => (&buf[..=at], true),
                None => (buf, false),
            };
            let n = chunk.len();
            if line.len() + n > MAX_LINE {
                too_long = true;
            } else {
                line.extend_from_slice(chunk);
            }
            input.consume(n);
            if done {
                break;
            }
        }
        if line.is_empty() && !too_long {
            return Ok(()); // EOF
        }
        let incoming = if too_long {
            Incoming::Invalid {
                reply: error_response(Value::Null, PARSE_ERROR, "the line is too long"),
            }
        } else {
            let trimmed = line.strip_suffix(b"\n").unwrap_or(&line);
            let trimmed = trimmed.strip_suffix(b"\r").unwrap_or(trimmed);
            if trimmed.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            parse(trimmed)
        };
        if messages.send(incoming).await.is_err() {
            return Ok(());
        }
    }
}

/// How many messages wait to be written, shared by the [`Outbox`] and the writer:
/// what producers of updates wait on when the client does not read.
#[derive(Debug, Default)]
pub struct Backlog {
    queued: std::sync::atomic::AtomicUsize,
    room: tokio::sync::Notify,
}

impl Backlog {
    fn sent(&self) {
        self.queued.fetch_add(1, Ordering::SeqCst);
    }

    fn written(&self, n: usize) {
        self.queued.fetch_sub(n, Ordering::SeqCst);
        self.room.notify_waiters();
    }

    /// Messages waiting to be written.
    pub fn len(&self) -> usize {
        self.queued.load(Ordering::SeqCst)
    }
}

/// Writes every message it is given, one line each, until the channel closes. What
/// is waiting is written in one go and flushed once: a burst (a transcript replayed)
/// costs a few large writes, and a lone update still goes out at once.
pub async fn write_messages(
    output: impl AsyncWrite + Unpin,
    mut messages: mpsc::UnboundedReceiver<Outgoing>,
    backlog: Arc<Backlog>,
) -> std::io::Result<()> {
    let mut output = tokio::io::BufWriter::with_capacity(256 * 1024, output);
    let mut line = Vec::new();
    while let Some(message) = messages.recv().await {
        let mut written = 0;
        let mut next = Some(message);
        while let Some(message) = next.take() {
            line.clear();
            match message {
                Outgoing::Value(value) => {
                    serde_json::to_writer(&mut line, &value).map_err(std::io::Error::other)?;
                }
                Outgoing::Line(text) => line.extend_from_slice(text.as_bytes()),
            }
            line.push(b'\n');
            output.write_all(&line).await?;
            written += 1;
            if written < OUTGOING {
                next = messages.try_recv().ok();
            }
        }
        output.flush().await?;
        backlog.written(written);
    }
    Ok(())
}

/// A message for the client: a JSON value, or one serialized already — a
/// notification built straight from its typed parameters, with no `Value` tree in
/// between (a replayed transcript is thousands of them).
#[derive(Debug)]
pub enum Outgoing {
    Value(Value),
    Line(String),
}

impl Outgoing {
    /// The message as a JSON value.
    #[cfg(test)]
    pub fn into_value(self) -> Value {
        match self {
            Outgoing::Value(value) => value,
            Outgoing::Line(text) => serde_json::from_str(&text).unwrap_or(Value::Null),
        }
    }
}

/// The client's answer to one of our requests: its result, or its error object.
type Answer = oneshot::Sender<Result<Value, Value>>;

/// The sending side of the connection: responses, notifications, and the agent's
/// own requests with their pending answers.
#[derive(Debug, Clone)]
pub struct Outbox {
    out: mpsc::UnboundedSender<Outgoing>,
    backlog: Arc<Backlog>,
    next_id: Arc<AtomicI64>,
    /// Requests sent and not yet answered; `None` once nobody waits any more (the
    /// turn was cancelled), so that the late answer is known as ours.
    pending: Arc<Mutex<HashMap<i64, Option<Answer>>>>,
}

/// Marks a request as no longer waited for when its waiter goes away unanswered.
struct Waiting<'a> {
    pending: &'a Mutex<HashMap<i64, Option<Answer>>>,
    id: i64,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(waiter) = pending.get_mut(&self.id) {
            *waiter = None;
        }
    }
}

impl Outbox {
    /// An outbox whose messages the writer takes from `out`, accounting in `backlog`.
    pub fn new(out: mpsc::UnboundedSender<Outgoing>, backlog: Arc<Backlog>) -> Outbox {
        Outbox {
            out,
            backlog,
            next_id: Arc::new(AtomicI64::new(0)),
            pending: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// Queues a message for the writer. Never waits: producers of many messages
    /// wait for room first ([`Outbox::ready`]).
    pub fn send(&self, message: Value) {
        if self.out.send(Outgoing::Value(message)).is_ok() {
            self.backlog.sent();
        }
    }

    /// Queues the notification `method` with `params` serialized straight into its
    /// line.
    pub fn notify_with(
        &self,
        method: &str,
        params: &impl serde::Serialize,
    ) -> serde_json::Result<()> {
        let mut line = Vec::with_capacity(256);
        line.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"method\":");
        serde_json::to_writer(&mut line, method)?;
        line.extend_from_slice(b",\"params\":");
        serde_json::to_writer(&mut line, params)?;
        line.push(b'}');
        // Serde writes UTF-8.
        let line = String::from_utf8(line).map_err(serde::ser::Error::custom)?;
        if self.out.send(Outgoing::Line(line)).is_ok() {
            self.backlog.sent();
        }
        Ok(())
    }

    /// Waits until fewer than [`OUTGOING`] messages wait to be written: a client
    /// that stops reading slows the producers of updates down instead of growing
    /// the queue. Returns at once when the writer is gone.
    pub async fn ready(&self) {
        loop {
            let room = self.backlog.room.notified();
            if self.backlog.len() < OUTGOING || self.out.is_closed() {
                return;
            }
            room.await;
        }
    }

    /// Sends a request to the client and waits for its answer (`Err` holds the
    /// JSON-RPC error object); `None` when the connection closed first.
    pub async fn request(&self, method: &str, params: Value) -> Option<Result<Value, Value>> {
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let (answer, answered) = oneshot::channel();
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, Some(answer));
        let _waiting = Waiting {
            pending: &self.pending,
            id,
        };
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        answered.await.ok()
    }

    /// Routes a response to the request that waits for it (an answer nobody waits
    /// for any more is dropped). False when no request of ours has that id.
    pub fn answer(&self, id: &Value, outcome: Result<Value, Value>) -> bool {
        let Some(id) = id.as_i64() else {
            return false;
        };
        let waiting = self
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
        match waiting {
            Some(Some(answer)) => {
                let _ = answer.send(outcome);
                true
            }
            Some(None) => {
                tracing::debug!(id, "an answer to a request nobody waits for any more");
                true
            }
            None => false,
        }
    }

    /// Drops every pending request (the connection closed): their waiters see `None`.
    pub fn close_pending(&self) {
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use tokio::io::AsyncReadExt;

    async fn read_all(bytes: &[u8]) -> Vec<Incoming> {
        let (tx, mut rx) = mpsc::channel(1024);
        read_messages(bytes, tx).await.unwrap();
        let mut out = Vec::new();
        while let Ok(m) = rx.try_recv() {
            out.push(m);
        }
        out
    }

    fn outbox() -> (Outbox, mpsc::UnboundedReceiver<Outgoing>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Outbox::new(tx, Arc::default()), rx)
    }

    fn request(id: i64, method: &str) -> Incoming {
        Incoming::Request {
            id: json!(id),
            method: method.into(),
            params: json!({}),
        }
    }

    /// A reader that hands out its bytes in pieces, as a pipe may.
    struct Pieces(Vec<Vec<u8>>, usize);

    impl tokio::io::AsyncRead for Pieces {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            let i = self.1;
            if let Some(piece) = self.0.get(i) {
                buf.put_slice(piece);
                self.1 += 1;
            }
            std::task::Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn two_messages_in_one_read_and_one_split_across_reads() {
        let both = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\",\"params\":{}}\n{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"b\",\"params\":{}}\n";
        assert_eq!(read_all(both).await, vec![request(1, "a"), request(2, "b")]);
        let pieces = Pieces(
            vec![
                b"{\"jsonrpc\":\"2.0\",\"id\":3,".to_vec(),
                b"\"method\":\"c\",\"params\":{}}".to_vec(),
                b"\n".to_vec(),
            ],
            0,
        );
        let (tx, mut rx) = mpsc::channel(8);
        read_messages(tokio::io::BufReader::new(pieces), tx)
            .await
            .unwrap();
        assert_eq!(rx.try_recv().unwrap(), request(3, "c"));
    }

    #[tokio::test]
    async fn a_one_mebibyte_line_is_one_message() {
        let text = "x".repeat(1024 * 1024);
        let line = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"session/prompt\",\"params\":{{\"text\":\"{text}\"}}}}\n"
        );
        let messages = read_all(line.as_bytes()).await;
        assert_eq!(messages.len(), 1);
        let Incoming::Request { params, .. } = &messages[0] else {
            panic!("{:?}", messages[0])
        };
        assert_eq!(params["text"].as_str().unwrap().len(), 1024 * 1024);
    }

    #[tokio::test]
    async fn bad_lines_get_the_json_rpc_error_for_them() {
        let messages =
            read_all(b"not json\n\xff\xfe\n[1,2]\n{\"id\":1,\"method\":\"x\"}\n\n").await;
        let codes: Vec<i64> = messages
            .iter()
            .map(|m| match m {
                Incoming::Invalid { reply } => reply["error"]["code"].as_i64().unwrap(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            codes,
            vec![PARSE_ERROR, PARSE_ERROR, INVALID_REQUEST, INVALID_REQUEST]
        );
    }

    #[test]
    fn responses_and_notifications_are_told_apart() {
        assert_eq!(
            parse(br#"{"jsonrpc":"2.0","id":7,"result":{"outcome":{"outcome":"cancelled"}}}"#),
            Incoming::Response {
                id: json!(7),
                outcome: Ok(json!({"outcome": {"outcome": "cancelled"}})),
            }
        );
        assert_eq!(
            parse(br#"{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s"}}"#),
            Incoming::Notification {
                method: "session/cancel".into(),
                params: json!({"sessionId": "s"}),
            }
        );
    }

    #[tokio::test]
    async fn a_response_is_routed_to_its_request_and_a_stray_one_is_dropped() {
        let (outbox, mut rx) = outbox();
        let asking = {
            let outbox = outbox.clone();
            tokio::spawn(async move {
                outbox
                    .request("session/request_permission", json!({}))
                    .await
            })
        };
        let sent = rx.recv().await.unwrap().into_value();
        assert_eq!(sent["method"], "session/request_permission");
        assert!(
            !outbox.answer(&json!(999), Ok(json!({}))),
            "a stray response was routed"
        );
        assert!(outbox.answer(&sent["id"], Ok(json!({"ok": true}))));
        assert_eq!(asking.await.unwrap(), Some(Ok(json!({"ok": true}))));
    }

    #[tokio::test]
    async fn an_answer_to_a_request_nobody_waits_for_is_known_as_ours_once() {
        let (outbox, mut rx) = outbox();
        {
            let asking = outbox.request("session/request_permission", json!({}));
            tokio::pin!(asking);
            // Polled once (sent), then dropped: the turn was cancelled.
            assert!(futures_poll_once(asking.as_mut()).await.is_none());
        }
        let sent = rx.recv().await.unwrap().into_value();
        assert!(outbox.answer(&sent["id"], Ok(json!({}))), "our late answer");
        assert!(
            !outbox.answer(&sent["id"], Ok(json!({}))),
            "answered twice: the second is stray"
        );
    }

    /// Polls `future` once; `Some` with its output when it was ready.
    async fn futures_poll_once<F: std::future::Future + Unpin>(future: F) -> Option<F::Output> {
        let mut future = future;
        std::future::poll_fn(|cx| {
            std::task::Poll::Ready(match std::pin::Pin::new(&mut future).poll(cx) {
                std::task::Poll::Ready(out) => Some(out),
                std::task::Poll::Pending => None,
            })
        })
        .await
    }

    #[tokio::test]
    async fn producers_wait_while_the_client_does_not_read_and_go_on_when_it_does() {
        let (tx, rx) = mpsc::unbounded_channel();
        let backlog = Arc::new(Backlog::default());
        let outbox = Outbox::new(tx, backlog.clone());
        for i in 0..OUTGOING {
            outbox.send(json!({"n": i}));
        }
        // Nobody writes: a producer waits.
        let waiting = tokio::time::timeout(std::time::Duration::from_millis(200), outbox.ready());
        assert!(waiting.await.is_err(), "the backlog grew without bound");
        // A pipe the client reads: everything goes out, and producers carry on.
        let (client, mut pipe) = tokio::io::duplex(64 * 1024);
        let writer = tokio::spawn(write_messages(client, rx, backlog.clone()));
        let mut read = Vec::new();
        let reading = tokio::spawn(async move {
            let _ = pipe.read_to_end(&mut read).await;
            read
        });
        tokio::time::timeout(std::time::Duration::from_secs(5), outbox.ready())
            .await
            .expect("room once the client reads");
        drop(outbox);
        writer.await.unwrap().unwrap();
        let read = reading.await.unwrap();
        assert_eq!(read.iter().filter(|b| **b == b'\n').count(), OUTGOING);
        assert_eq!(backlog.len(), 0);
    }

    #[tokio::test]
    async fn the_writer_writes_one_line_per_message() {
        let (tx, rx) = mpsc::unbounded_channel();
        tx.send(Outgoing::Value(json!({"a": 1}))).unwrap();
        tx.send(Outgoing::Value(json!({"b": "two\nlines"})))
            .unwrap();
        tx.send(Outgoing::Line("{\"c\":3}".into())).unwrap();
        drop(tx);
        let mut out = Vec::new();
        write_messages(&mut out, rx, Arc::default()).await.unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "{\"a\":1}\n{\"b\":\"two\\nlines\"}\n{\"c\":3}\n"
        );
    }
}
