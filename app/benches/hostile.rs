//! Memory under a hostile provider: the peak resident memory of `steward run`
//! while an OpenAI-compatible server on loopback streams 400 MB without a single
//! newline, beside the peak of the same run against a server that answers normally,
//! measured in the same run. The stream limits (protocol §4.15) stop the step at
//! `[provider] max_event_bytes` (1 MiB by default): the peak must stay under 64 MiB.
//! `cargo bench -p steward --bench hostile`.

#![allow(clippy::print_stdout, clippy::print_stderr)]

#[path = "../../engine/benches/support/table.rs"]
mod table;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What the hostile server offers: 400 MB after `data: `, no newline.
const HOSTILE_BYTES: usize = 400 << 20;
/// The peak the hostile run must stay under, in MiB.
const LIMIT_MB: f64 = 64.0;

/// Reads one HTTP request (headers and body) from `socket`.
fn read_request(socket: &mut TcpStream) {
    let mut data = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let Ok(n) = socket.read(&mut buf) else { return };
        if n == 0 {
            return;
        }
        data.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&data);
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .and_then(|v| v.trim().parse::<usize>().ok())
                })
                .unwrap_or(0);
            if data.len() >= end + 4 + length {
                return;
            }
        }
    }
}

/// A server on loopback that answers every request with `answer`; returns its URL.
fn serve(answer: fn(&mut TcpStream)) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for socket in listener.incoming() {
            let Ok(mut socket) = socket else { return };
            std::thread::spawn(move || {
                read_request(&mut socket);
                let _ = socket.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n",
                );
                answer(&mut socket);
            });
        }
    });
    url
}

fn hostile(socket: &mut TcpStream) {
    let _ = socket.write_all(b"data: ");
    let chunk = vec![b'x'; 64 << 10];
    let mut sent = 0;
    while sent < HOSTILE_BYTES {
        if socket.write_all(&chunk).is_err() {
            return;
        }
        sent += chunk.len();
    }
}

fn normal(socket: &mut TcpStream) {
    for event in [
        r#"{"choices":[{"index":0,"delta":{"content":"A short "}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":"answer."}}]}"#,
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
        "[DONE]",
    ] {
        let _ = socket.write_all(format!("data: {event}\n\n").as_bytes());
    }
}

/// `steward run` against `url`; returns its peak resident memory in MiB (polled
/// from `/proc/<pid>/status` until it exits) and whether it failed the step.
fn peak_of_run(root: &Path, url: &str) -> (f64, bool) {
    let data = root.join("data");
    let work = root.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let config = root.join("config.toml");
    std::fs::write(
        &config,
        format!("[provider]\nname = \"openai\"\nbase_url = \"{url}\"\nmax_attempts = 1\n"),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_steward"))
        .arg("--data-dir")
        .arg(&data)
        .arg("--config")
        .arg(&config)
        .args(["run", "--dir"])
        .arg(&work)
        .arg("hello")
        .env_remove("STEWARD_DATA_DIR")
        .env_remove("STEWARD_CONFIG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status_path = format!("/proc/{}/status", child.id());
    let mut peak_kb = 0u64;
    let started = Instant::now();
    let status = loop {
        if let Ok(text) = std::fs::read_to_string(&status_path)
            && let Some(kb) = text
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse::<u64>().ok())
        {
            peak_kb = peak_kb.max(kb);
        }
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "steward run did not end"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    if !stderr.is_empty() {
        eprintln!("{}", stderr.trim_end());
    }
    (peak_kb as f64 / 1024.0, !status.success())
}

fn main() {
    let root = tempfile::tempdir().unwrap();
    let (normal_peak, normal_failed) = peak_of_run(&root.path().join("normal"), &serve(normal));
    assert!(!normal_failed, "the normal run failed");
    let (hostile_peak, hostile_failed) = peak_of_run(&root.path().join("hostile"), &serve(hostile));
    assert!(hostile_failed, "the hostile stream did not stop the step");
    println!(
        "peak RSS: {hostile_peak:.1} MiB while a provider streams 400 MB without a newline; \
         {normal_peak:.1} MiB on a normal answer (limit {LIMIT_MB} MiB)"
    );
    table::row(
        "hostile provider",
        "peak RSS, 400 MB streamed without a newline",
        hostile_peak,
        "MiB",
        Some(("normal answer", normal_peak)),
        table::Limit::Below {
            target: LIMIT_MB,
            bar: LIMIT_MB,
        },
    );
    if hostile_peak > LIMIT_MB {
        std::process::exit(1);
    }
}
