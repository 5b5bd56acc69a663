//! What a provider may send for one step, and the byte stream that holds it to that
//! (protocol §4.15). A server that never ends a line or an event, trickles bytes,
//! or sends an endless answer, tool call or error body ends the step with a clear
//! error — and the claim is released — instead of growing the process without bound
//! or holding the claim for ever.

use std::time::Duration;

use futures_util::{Stream, StreamExt};

use crate::config::ProviderConfig;
use crate::provider::ProviderError;

/// The bounds of one step's stream (`[provider]` settings).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// One server-sent event (or one line of a line-delimited stream), in bytes.
    pub event_bytes: usize,
    /// The answer's text, in bytes.
    pub answer_bytes: usize,
    /// One tool call's arguments, in bytes.
    pub tool_arguments_bytes: usize,
    /// The body of an error answer that is kept (the rest is never read).
    pub error_body_bytes: usize,
    /// The longest wait for the next complete event (bytes that form no event do
    /// not count as progress).
    pub idle: Duration,
}

impl Limits {
    pub fn of(config: &ProviderConfig) -> Limits {
        Limits {
            event_bytes: config.max_event_bytes,
            answer_bytes: config.max_answer_bytes,
            tool_arguments_bytes: config.max_tool_arguments_bytes,
            error_body_bytes: config.max_error_body_bytes,
            idle: Duration::from_millis(config.request_timeout_ms),
        }
    }

    /// The error for a stream that exceeded `what`.
    pub fn exceeded(what: &str, limit: usize, setting: &str) -> ProviderError {
        ProviderError::fatal(format!(
            "the provider sent {what} larger than {limit} bytes: the step was stopped (`[provider] {setting}` sets the limit)"
        ))
    }
}

/// Passes `bytes` through while no event grows past `limit` bytes: an event ends at
/// an empty line (`\n\n`, `\r\n\r\n`), a line-delimited stream's record at each line
/// (`per_line`). The bytes of an event that grows past the limit are never passed
/// on, so whatever parses them never holds more than about `limit` bytes.
pub fn capped<S, B, E>(
    bytes: S,
    limit: usize,
    per_line: bool,
) -> impl Stream<Item = Result<B, ProviderError>>
where
    S: Stream<Item = Result<B, E>>,
    B: AsRef<[u8]>,
    E: std::fmt::Display,
{
    let mut event = 0usize;
    let mut line = 0usize;
    let mut over = false;
    bytes.map(move |chunk| {
        if over {
            return Err(Limits::exceeded("an event", limit, "max_event_bytes"));
        }
        let chunk = chunk
            .map_err(|e| ProviderError::fatal(format!("the provider stream broke off: {e}")))?;
        for &b in chunk.as_ref() {
            match b {
                b'\n' => {
                    if line == 0 || per_line {
                        event = 0;
                    }
                    line = 0;
                }
                b'\r' => {}
                _ => {
                    line += 1;
                    event += 1;
                }
            }
            if event > limit {
                over = true;
                return Err(Limits::exceeded("an event", limit, "max_event_bytes"));
            }
        }
        Ok(chunk)
    })
}

/// Reads at most `limit` bytes of an error answer's body (the rest is never read),
/// as text.
pub async fn error_body(response: reqwest::Response, limit: usize) -> String {
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(Ok(chunk)) = stream.next().await {
        let room = limit.saturating_sub(body.len());
        body.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if body.len() >= limit {
            break;
        }
    }
    String::from_utf8_lossy(&body).into_owned()
}

/// The wait for a stream's next complete record (protocol §4.15): an item that
/// carries something counts as progress ([`Idle::progress`]); one that carries
/// nothing (Anthropic's `ping`, an event without data) does not, so a stream of
/// them alone ends at the same bound as silence.
#[derive(Debug)]
pub struct Idle {
    limit: Duration,
    deadline: tokio::time::Instant,
}

impl Idle {
    /// The clock starts now (the answer's headers arrived).
    pub fn new(limit: Duration) -> Idle {
        Idle {
            limit,
            deadline: tokio::time::Instant::now() + limit,
        }
    }

    /// The last item carried something: the wait starts again.
    pub fn progress(&mut self) {
        self.deadline = tokio::time::Instant::now() + self.limit;
    }

    /// The next item of `stream`, or an error when the time since the last progress
    /// runs out first.
    pub async fn next<S: Stream + Unpin>(
        &self,
        stream: &mut S,
    ) -> Result<Option<S::Item>, ProviderError> {
        tokio::time::timeout_at(self.deadline, stream.next())
            .await
            .map_err(|_| {
                let ms = self.limit.as_millis();
                let waited = match ms % 1000 {
                    0 => format!("{} s", ms / 1000),
                    _ => format!("{ms} ms"),
                };
                ProviderError::fatal(format!(
                    "the provider sent no complete event for {waited}: the step was stopped"
                ))
            })
    }
}

/// The records of a line-delimited stream: each line that holds more than blanks,
/// trimmed, and a last one the stream ends without a newline. Bytes that never
/// complete a record yield nothing, so they never count as progress.
pub fn records<S, B>(bytes: S) -> impl Stream<Item = Result<String, ProviderError>>
where
    S: Stream<Item = Result<B, ProviderError>> + Unpin,
    B: AsRef<[u8]>,
{
    struct Lines<S> {
        bytes: S,
        line: Vec<u8>,
        ready: std::collections::VecDeque<String>,
        ended: bool,
    }
    fn complete(line: &[u8]) -> Option<String> {
        let text = String::from_utf8_lossy(line);
        let text = text.trim();
        (!text.is_empty()).then(|| text.to_string())
    }
    let state = Lines {
        bytes,
        line: Vec::new(),
        ready: Default::default(),
        ended: false,
    };
    futures_util::stream::unfold(state, |mut state| async move {
        loop {
            if let Some(record) = state.ready.pop_front() {
                return Some((Ok(record), state));
            }
            if state.ended {
                return None;
            }
            match state.bytes.next().await {
                Some(Ok(chunk)) => {
                    for &b in chunk.as_ref() {
                        if b == b'\n' {
                            let line = std::mem::take(&mut state.line);
                            state.ready.extend(complete(&line));
                        } else {
                            state.line.push(b);
                        }
                    }
                }
                Some(Err(error)) => {
                    state.ended = true;
                    return Some((Err(error), state));
                }
                None => {
                    state.ended = true;
                    let line = std::mem::take(&mut state.line);
                    state.ready.extend(complete(&line));
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::stream;

    fn run(chunks: Vec<&'static [u8]>, limit: usize, per_line: bool) -> Result<usize, String> {
        let stream = stream::iter(chunks.into_iter().map(Ok::<_, std::io::Error>));
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(async {
                let mut capped = Box::pin(capped(stream, limit, per_line));
                let mut passed = 0;
                while let Some(chunk) = capped.next().await {
                    passed += chunk.map_err(|e| e.message)?.len();
                }
                Ok(passed)
            })
    }

    #[test]
    fn r4_15_events_within_the_limit_pass_whole() {
        let sse: Vec<&'static [u8]> = vec![b"data: 12345\n\n", b"data: 1234", b"5\n\ndata: x\n\n"];
        assert_eq!(run(sse, 16, false), Ok(35));
    }

    #[test]
    fn r4_15_an_endless_line_or_event_stops_at_the_limit() {
        let endless: Vec<&'static [u8]> = vec![b"data: 1234567890", b"1234567890", b"never"];
        let refused = run(endless, 16, false).unwrap_err();
        assert!(refused.contains("larger than 16 bytes"), "{refused}");
        // Many short lines that never close the event are one event.
        let lines: Vec<&'static [u8]> = vec![b"data: 1\ndata: 2\ndata: 3\ndata: 4\n"];
        assert!(run(lines.clone(), 16, false).is_err());
        // A line-delimited stream ends a record at every line.
        assert_eq!(run(lines, 16, true), Ok(32));
    }
}
