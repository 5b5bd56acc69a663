//! What every HTTP provider shares: sending a request (a refused connection is worth
//! another try), and reading a refusal — its kind (protocol §4.18), whether to try
//! again (`x-should-retry` decides when the server says), and how long the server
//! asked to wait (`retry-after-ms`, `retry-after`).

use std::time::Duration;

use reqwest::header::HeaderMap;
use serde_json::Value;

use crate::provider::limits;
use crate::provider::{ErrorKind, ProviderError, ProviderEvent, StreamSender};

/// Sends `request`; a connection that cannot be made (or times out) is retryable.
pub async fn send(request: reqwest::RequestBuilder) -> Result<reqwest::Response, ProviderError> {
    request.send().await.map_err(|e| {
        if e.is_connect() || e.is_timeout() {
            ProviderError::retryable(format!("cannot reach the provider: {e}"))
        } else {
            ProviderError::fatal(format!("the provider request failed: {e}"))
        }
    })
}

/// The error for an answer whose status is not a success: its body read up to
/// `limit` bytes, with `secret` scrubbed from it.
pub async fn refusal(
    response: reqwest::Response,
    limit: usize,
    secret: Option<&str>,
) -> ProviderError {
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = limits::error_body(response, limit).await;
    let body = match secret {
        Some(secret) if !secret.is_empty() => body.replace(secret, "<redacted>"),
        _ => body,
    };
    refused(status, &headers, &body)
}

/// What every HTTP provider starts from: the API key `config` names (an error when
/// its variable is not set) and a client whose connect and read timeouts follow
/// `request_timeout_ms` (protocol §4.15).
pub fn key_and_client(
    config: &crate::config::ProviderConfig,
) -> Result<(Option<String>, reqwest::Client), String> {
    // One process-wide TLS crypto provider; a second install is a no-op.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let api_key = match &config.api_key_env {
        Some(var) => Some(
            std::env::var(var)
                .map_err(|_| format!("provider.api_key_env names {var}, which is not set"))?,
        ),
        None => None,
    };
    let timeout = Duration::from_millis(config.request_timeout_ms);
    let client = reqwest::Client::builder()
        .connect_timeout(timeout.min(Duration::from_secs(30)))
        .read_timeout(timeout)
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
    Ok((api_key, client))
}

/// [`refusal`] from its parts.
pub fn refused(status: u16, headers: &HeaderMap, body: &str) -> ProviderError {
    let (error_type, message) = error_of(body);
    let kind = classify(Some(status), error_type.as_deref(), &message);
    let snippet: String = message.chars().take(300).collect();
    let mut error = ProviderError::fatal(format!(
        "{}the provider answered HTTP {status}: {}",
        describe(kind),
        snippet.trim()
    ))
    .of_kind(kind);
    error.retryable = match should_retry(headers) {
        Some(said) => said,
        None => matches!(kind, ErrorKind::RateLimited | ErrorKind::Overloaded) || status >= 500,
    };
    error.retry_after = retry_after(headers);
    error
}

/// An error a stream reported mid-answer (`{"type": "overloaded_error", …}`).
pub fn streamed(error_type: Option<&str>, message: &str) -> ProviderError {
    let kind = classify(None, error_type, message);
    let mut error = ProviderError::fatal(format!(
        "{}the provider reported an error: {}",
        describe(kind),
        message
    ))
    .of_kind(kind);
    error.retryable = matches!(kind, ErrorKind::RateLimited | ErrorKind::Overloaded)
        || error_type == Some("api_error");
    error
}

/// What an error reads as to the user, before the provider's own words.
fn describe(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::RateLimited => "rate-limited: ",
        ErrorKind::Overloaded => "the provider is overloaded: ",
        ErrorKind::ContextTooLong => "the conversation is too long for the model: ",
        ErrorKind::Authentication => "the API key was refused: ",
        ErrorKind::Other => "",
    }
}

/// The error's type and message from a JSON error body (`{"error": {"type",
/// "message"}}`, `{"type": "error", "error": {…}}`, `{"error": "…"}`), else the
/// body itself.
fn error_of(body: &str) -> (Option<String>, String) {
    let Ok(value) = serde_json::from_str::<Value>(body) else {
        return (None, body.to_string());
    };
    let error = value.get("error").unwrap_or(&value);
    match error {
        Value::String(message) => (None, message.clone()),
        Value::Object(_) => {
            let error_type = error
                .get("type")
                .or_else(|| error.get("code"))
                .and_then(Value::as_str)
                .map(str::to_string);
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| body.to_string());
            (error_type, message)
        }
        _ => (None, body.to_string()),
    }
}

/// The kind of a failure, from the status, the error's type and its words.
pub fn classify(status: Option<u16>, error_type: Option<&str>, message: &str) -> ErrorKind {
    let lower = message.to_ascii_lowercase();
    let too_long = [
        "prompt is too long",
        "context length",
        "context_length_exceeded",
        "context window",
        "maximum context",
        "too many tokens",
        "exceeds the context",
    ]
    .iter()
    .any(|p| lower.contains(p))
        || error_type == Some("context_length_exceeded");
    // Ollama's "server busy, please try again" (a 503, or an error line mid-stream).
    let busy = ["server busy", "overloaded"]
        .iter()
        .any(|p| lower.contains(p));
    match (status, error_type) {
        (Some(429), _) | (_, Some("rate_limit_error" | "rate_limit_exceeded")) => {
            ErrorKind::RateLimited
        }
        (Some(529 | 503), _) | (_, Some("overloaded_error")) => ErrorKind::Overloaded,
        (Some(401 | 403), _) | (_, Some("authentication_error" | "permission_error")) => {
            ErrorKind::Authentication
        }
        _ if too_long => ErrorKind::ContextTooLong,
        (Some(413), _) => ErrorKind::ContextTooLong,
        (None | Some(500..), _) if busy => ErrorKind::Overloaded,
        _ => ErrorKind::Other,
    }
}

/// `x-should-retry: true|false`, when the server says.
pub fn should_retry(headers: &HeaderMap) -> Option<bool> {
    match headers.get("x-should-retry")?.to_str().ok()?.trim() {
        "true" => Some(true),
        "false" => Some(false),
        _ => None,
    }
}

/// How long the server asked to wait: `retry-after-ms` (milliseconds), else
/// `retry-after` (seconds; a date is not read).
pub fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let header = |name: &str| headers.get(name)?.to_str().ok().map(str::trim);
    if let Some(ms) = header("retry-after-ms").and_then(|v| v.parse::<f64>().ok())
        && ms.is_finite()
        && ms >= 0.0
    {
        return Some(Duration::from_millis(ms as u64));
    }
    let seconds = header("retry-after")?.parse::<f64>().ok()?;
    (seconds.is_finite() && seconds >= 0.0)
        .then(|| Duration::from_millis((seconds * 1000.0) as u64))
}

/// Streamed text with an API key kept out of it: all of the text, but a tail that
/// could still turn out to be the key's beginning — the longest end of the text that
/// is a proper prefix of the key, usually nothing — held back until more arrives.
#[derive(Debug, Default)]
pub struct Scrubber {
    secret: Option<String>,
    held: String,
}

/// A tail held back at the end of a stream is passed on as it is when shorter than
/// this; from this length on, it is the key's own beginning more likely than the
/// text's, and is replaced by `<redacted>`.
const HELD_REDACTED_FROM: usize = 8;

impl Scrubber {
    pub fn new(secret: Option<&str>) -> Scrubber {
        Scrubber {
            secret: secret.filter(|s| !s.is_empty()).map(str::to_string),
            held: String::new(),
        }
    }

    /// The key kept out.
    pub fn secret(&self) -> Option<&str> {
        self.secret.as_deref()
    }

    /// `text` with the key replaced.
    pub fn scrub(&self, text: &str) -> String {
        match &self.secret {
            Some(secret) => text.replace(secret.as_str(), "<redacted>"),
            None => text.to_string(),
        }
    }

    /// `value` with the key replaced in every string of it.
    pub fn scrub_value(&self, value: Value) -> Value {
        match value {
            Value::String(s) => Value::String(self.scrub(&s)),
            Value::Array(items) => items.into_iter().map(|v| self.scrub_value(v)).collect(),
            Value::Object(map) => Value::Object(
                map.into_iter()
                    .map(|(k, v)| (self.scrub(&k), self.scrub_value(v)))
                    .collect(),
            ),
            other => other,
        }
    }

    /// What of `text` (after what was held) may be streamed now.
    pub fn pass(&mut self, text: &str) -> Option<String> {
        let Some(secret) = &self.secret else {
            return (!text.is_empty()).then(|| text.to_string());
        };
        self.held.push_str(text);
        if self.held.contains(secret.as_str()) {
            self.held = self.held.replace(secret.as_str(), "<redacted>");
        }
        // The key's first byte starts a character, so the held tail does too.
        let hold = (1..secret.len())
            .rev()
            .find(|&n| self.held.as_bytes().ends_with(&secret.as_bytes()[..n]))
            .unwrap_or(0);
        let now: String = self.held.drain(..self.held.len() - hold).collect();
        (!now.is_empty()).then_some(now)
    }

    /// What is still held, at the end of the text (or when the stream stops short):
    /// a short tail as it is, a long one — most of the key — as `<redacted>`.
    pub fn rest(&mut self) -> Option<String> {
        let rest = std::mem::take(&mut self.held);
        let long = self
            .secret
            .as_ref()
            .is_some_and(|s| rest.len() >= HELD_REDACTED_FROM.min(s.len() - 1));
        match rest.is_empty() {
            true => None,
            false if long => Some("<redacted>".into()),
            false => Some(rest),
        }
    }
}

/// Ends a stream with `error`: the text still held back goes first (it was streamed,
/// and the step must not lose it), then the error, scrubbed of the key.
pub async fn fail(tx: &StreamSender, scrubber: &mut Scrubber, mut error: ProviderError) {
    if let Some(rest) = scrubber.rest() {
        tx.send(Ok(ProviderEvent::TextDelta(rest))).await;
    }
    error.message = scrubber.scrub(&error.message);
    tx.send(Err(error)).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.insert(*k, v.parse().unwrap());
        }
        map
    }

    #[test]
    fn r4_18_a_refusal_names_its_kind_and_when_to_try_again() {
        let rate = refused(
            429,
            &headers(&[("retry-after", "7")]),
            r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#,
        );
        assert_eq!(rate.kind, ErrorKind::RateLimited);
        assert!(rate.retryable);
        assert_eq!(rate.retry_after, Some(Duration::from_secs(7)));
        assert_eq!(
            rate.message,
            "rate-limited: the provider answered HTTP 429: slow down"
        );
        let ms = refused(
            529,
            &headers(&[("retry-after-ms", "1500"), ("retry-after", "9")]),
            "{}",
        );
        assert_eq!(ms.kind, ErrorKind::Overloaded);
        assert_eq!(ms.retry_after, Some(Duration::from_millis(1500)));
        let auth = refused(401, &HeaderMap::new(), r#"{"error":{"message":"bad key"}}"#);
        assert_eq!(auth.kind, ErrorKind::Authentication);
        assert!(!auth.retryable);
        let long = refused(
            400,
            &HeaderMap::new(),
            r#"{"error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#,
        );
        assert_eq!(long.kind, ErrorKind::ContextTooLong);
        assert!(!long.retryable);
        // The server decides when it says.
        let no = refused(500, &headers(&[("x-should-retry", "false")]), "boom");
        assert!(!no.retryable);
        let yes = refused(409, &headers(&[("x-should-retry", "true")]), "conflict");
        assert!(yes.retryable);
        // Ollama's shape.
        let ollama = refused(404, &HeaderMap::new(), r#"{"error":"model 'x' not found"}"#);
        assert_eq!(
            ollama.message,
            "the provider answered HTTP 404: model 'x' not found"
        );
    }

    #[test]
    fn r4_18_an_error_mid_stream_is_retryable_only_when_it_is_the_servers_load() {
        let overloaded = streamed(Some("overloaded_error"), "Overloaded");
        assert_eq!(overloaded.kind, ErrorKind::Overloaded);
        assert!(overloaded.retryable);
        let invalid = streamed(Some("invalid_request_error"), "bad");
        assert!(!invalid.retryable);
        // Ollama says it in words.
        let busy = streamed(
            None,
            "server busy, please try again.  maximum pending requests exceeded",
        );
        assert_eq!(busy.kind, ErrorKind::Overloaded);
        assert!(busy.retryable);
        let other = streamed(None, "an error was encountered while running the model");
        assert!(!other.retryable);
    }

    #[test]
    fn streamed_text_is_held_back_only_where_it_could_begin_the_key() {
        let mut scrubber = Scrubber::new(Some("sk-secret-1234"));
        // Text that cannot begin the key passes at once, however short.
        assert_eq!(scrubber.pass("Hi"), Some("Hi".into()));
        assert_eq!(scrubber.pass(" there"), Some(" there".into()));
        // A tail that could: held until the next piece settles it.
        assert_eq!(scrubber.pass(", sk-se"), Some(", ".into()));
        assert_eq!(scrubber.pass("a"), Some("sk-sea".into()));
        assert_eq!(scrubber.pass(" sk-sec"), Some(" ".into()));
        assert_eq!(
            scrubber.pass("ret-1234 done"),
            Some("<redacted> done".into())
        );
        assert_eq!(scrubber.rest(), None);
        // Multi-byte text next to a held tail.
        assert_eq!(scrubber.pass("é—s"), Some("é—".into()));
        // At the end, a short tail is passed on as it is...
        assert_eq!(scrubber.rest(), Some("s".into()));
        // ...a long one, most of the key, is not.
        assert_eq!(scrubber.pass("key: sk-secret-123"), Some("key: ".into()));
        assert_eq!(scrubber.rest(), Some("<redacted>".into()));
        // Without a key nothing is held.
        let mut plain = Scrubber::new(None);
        assert_eq!(plain.pass("sk-"), Some("sk-".into()));
        assert_eq!(plain.rest(), None);
    }
}
