//! Providers on the real binary against a fake server on loopback that speaks each
//! wire protocol (OpenAI chat completions, Anthropic Messages, Ollama's native chat):
//! the provider-step crashes of the fault campaign for each — SIGKILL mid-stream and
//! with a request in flight — and a session that keeps its provider and model
//! (protocol §4.17, §4.18).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use crate::campaign::Tally;
use crate::recovery::events_of;
use crate::run::{only_session, show, work_dir, write_script};
use crate::support::{Env, code, eventually, signal, stderr, stdout};

const PROVIDER_UNKNOWN: &str = "Provider Step outcome unknown after server restart";

/// The wire protocols, and how each streams an answer of text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wire {
    OpenAi,
    Anthropic,
    Ollama,
}

impl Wire {
    const ALL: [Wire; 3] = [Wire::OpenAi, Wire::Anthropic, Wire::Ollama];

    fn name(self) -> &'static str {
        match self {
            Wire::OpenAi => "openai",
            Wire::Anthropic => "anthropic",
            Wire::Ollama => "ollama",
        }
    }

    /// The config for a server at `root`.
    pub(crate) fn config(self, root: &str) -> String {
        let base = match self {
            Wire::OpenAi => format!("{root}/v1"),
            _ => root.to_string(),
        };
        format!(
            "[provider]\nname = \"{}\"\nbase_url = \"{base}\"\nmodel = \"m1\"\nmax_attempts = 1\nnum_ctx = 8192\n",
            self.name()
        )
    }

    fn content_type(self) -> &'static str {
        match self {
            Wire::Ollama => "application/x-ndjson",
            _ => "text/event-stream",
        }
    }

    /// The answer `texts`, streamed piece by piece.
    pub(crate) fn answer(self, texts: &[&str]) -> Vec<String> {
        let quote = |t: &str| serde_json::to_string(t).unwrap();
        match self {
            Wire::OpenAi => texts
                .iter()
                .map(|t| format!("data: {{\"choices\":[{{\"delta\":{{\"content\":{}}}}}]}}\n\n", quote(t)))
                .chain([
                    "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n".into(),
                    "data: [DONE]\n\n".into(),
                ])
                .collect(),
            Wire::Anthropic => std::iter::once(
                "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\nevent: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n".to_string(),
            )
            .chain(texts.iter().map(|t| {
                format!(
                    "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":{}}}}}\n\n",
                    quote(t)
                )
            }))
            .chain([
                "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":3}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n".into(),
            ])
            .collect(),
            Wire::Ollama => texts
                .iter()
                .map(|t| format!("{{\"message\":{{\"role\":\"assistant\",\"content\":{}}},\"done\":false}}\n", quote(t)))
                .chain([
                    "{\"message\":{\"role\":\"assistant\",\"content\":\"\"},\"done\":true,\"done_reason\":\"stop\",\"prompt_eval_count\":5,\"eval_count\":3}\n".into(),
                ])
                .collect(),
        }
    }
}

/// How the fake server answers one request.
#[derive(Clone)]
pub(crate) enum Answer {
    /// Streams these pieces with `pause` before each.
    Stream {
        pieces: Vec<String>,
        pause: Duration,
    },
    /// Reads the request and never answers (a request in flight).
    Stall,
}

/// A fake provider server on loopback: answers requests in order (the last
/// repeats) and keeps every request body.
pub(crate) struct Server {
    pub(crate) root: String,
    bodies: Arc<Mutex<Vec<String>>>,
}

impl Server {
    pub(crate) fn start(wire: Wire, answers: Vec<Answer>) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let root = format!("http://{}", listener.local_addr().unwrap());
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let kept = bodies.clone();
        std::thread::spawn(move || {
            let mut n = 0;
            for socket in listener.incoming() {
                let Ok(socket) = socket else { return };
                let answer = answers[n.min(answers.len() - 1)].clone();
                let kept = kept.clone();
                let taken = std::thread::spawn(move || serve_one(socket, wire, answer, kept));
                // `/api/show` is not a step: it does not take an answer.
                if taken.join().unwrap_or(true) {
                    n += 1;
                }
            }
        });
        Server { root, bodies }
    }

    pub(crate) fn bodies(&self) -> Vec<Value> {
        self.bodies
            .lock()
            .unwrap()
            .iter()
            .map(|b| serde_json::from_str(b).unwrap())
            .collect()
    }
}

/// Serves one connection; false when it was not a step's request.
fn serve_one(
    mut socket: TcpStream,
    wire: Wire,
    answer: Answer,
    bodies: Arc<Mutex<Vec<String>>>,
) -> bool {
    let mut reader = BufReader::new(socket.try_clone().unwrap());
    let mut head = String::new();
    let mut length = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return false;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
        if line == "\r\n" {
            break;
        }
        head.push_str(&line);
    }
    let mut body = vec![0u8; length];
    let _ = reader.read_exact(&mut body);
    if head.starts_with("POST /api/show") {
        let show = "{\"model_info\":{\"x.context_length\":8192}}";
        let _ = write!(
            socket,
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{show}",
            show.len()
        );
        return false;
    }
    bodies
        .lock()
        .unwrap()
        .push(String::from_utf8_lossy(&body).into_owned());
    match answer {
        Answer::Stall => {
            // Holds the connection until the client goes away.
            let mut sink = [0u8; 1];
            let _ = socket.set_read_timeout(Some(Duration::from_secs(120)));
            let _ = socket.read(&mut sink);
        }
        Answer::Stream { pieces, pause } => {
            let _ = write!(
                socket,
                "HTTP/1.1 200 OK\r\nContent-Type: {}\r\nConnection: close\r\n\r\n",
                wire.content_type()
            );
            for piece in pieces {
                std::thread::sleep(pause);
                if socket.write_all(piece.as_bytes()).is_err() || socket.flush().is_err() {
                    break;
                }
            }
        }
    }
    true
}

/// A data directory configured for `wire` against `server`.
struct Scene {
    env: Env,
    work: String,
    config: String,
}

impl Scene {
    fn new(wire: Wire, server: &Server) -> Scene {
        let env = Env::new();
        let work = work_dir(&env);
        let config = write_script(&env, "config.toml", &wire.config(&server.root));
        Scene { env, work, config }
    }

    fn spawn(&self, prompt: &str) -> Child {
        self.env
            .cmd()
            .args(["--config", &self.config, "run", "--dir", &self.work, prompt])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    }

    fn recover(&self) -> std::process::Output {
        self.env
            .cmd()
            .args(["--config", &self.config, "recover", "--json"])
            .output()
            .unwrap()
    }

    fn assistants(&self) -> Vec<Value> {
        let session = only_session(&self.env);
        show(&self.env, &session)["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["type"] == "assistant")
            .map(|m| m["data"].clone())
            .collect()
    }
}

fn text_of(assistant: &Value) -> String {
    assistant["parts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["type"] == "text" && !p["id"].as_str().unwrap().starts_with("recovery:"))
        .filter_map(|p| p["text"].as_str())
        .collect()
}

fn recovery_text(assistant: &Value) -> Option<String> {
    assistant["parts"]
        .as_array()?
        .iter()
        .find(|p| {
            p["id"]
                .as_str()
                .is_some_and(|id| id.starts_with("recovery:"))
        })
        .and_then(|p| p["text"].as_str().map(str::to_string))
}

#[test]
fn campaign_provider_step_crashes_for_each_wire_protocol() {
    let mut tally = Tally::default();
    for wire in Wire::ALL {
        // Killed mid-stream: what streamed stays, the outcome of the step is unknown,
        // and the continuation is a new step — the request is never sent again.
        let server = Server::start(
            wire,
            vec![
                Answer::Stream {
                    pieces: wire.answer(&["Hello ", "from ", "the ", "model ", "here."]),
                    pause: Duration::from_millis(400),
                },
                Answer::Stream {
                    pieces: wire.answer(&["Carried on."]),
                    pause: Duration::ZERO,
                },
            ],
        );
        let scene = Scene::new(wire, &server);
        let mut child = scene.spawn("stream something");
        let streamed = eventually(Duration::from_secs(20), || {
            events_of(&scene.env).iter().any(|t| t == "step.text")
        });
        tally.check(&format!("{}: text streamed", wire.name()), streamed, || {
            "no text was committed".into()
        });
        signal(child.id(), "KILL");
        child.wait().unwrap();
        tally.fault(&format!("sigkill mid-stream ({})", wire.name()));
        let recovered = scene.recover();
        tally.check(
            &format!("{}: relaunch after a kill mid-stream", wire.name()),
            code(&recovered) == 0,
            || stderr(&recovered),
        );
        let assistants = scene.assistants();
        let first = &assistants[0];
        tally.check(
            &format!("{}: the restart string", wire.name()),
            recovery_text(first).as_deref() == Some(PROVIDER_UNKNOWN),
            || first.to_string(),
        );
        tally.check(
            &format!("{}: streamed text kept", wire.name()),
            text_of(first).starts_with("Hello "),
            || first.to_string(),
        );
        tally.check(
            &format!("{}: the continuation answered", wire.name()),
            assistants.last().map(text_of).as_deref() == Some("Carried on."),
            || format!("{assistants:?}"),
        );
        let bodies = server.bodies();
        tally.check(
            &format!("{}: no provider call replayed (mid-stream)", wire.name()),
            bodies.len() == 2
                && bodies[1]
                    .to_string()
                    .contains("The server restarted while you were working")
                && bodies[0] != bodies[1],
            || format!("{} requests: {bodies:?}", bodies.len()),
        );

        // Killed with the request in flight (nothing streamed yet).
        let server = Server::start(
            wire,
            vec![
                Answer::Stall,
                Answer::Stream {
                    pieces: wire.answer(&["Carried on."]),
                    pause: Duration::ZERO,
                },
            ],
        );
        let scene = Scene::new(wire, &server);
        let mut child = scene.spawn("ask something");
        let in_flight = eventually(Duration::from_secs(20), || !server.bodies().is_empty());
        tally.check(&format!("{}: request sent", wire.name()), in_flight, || {
            "the request never reached the server".into()
        });
        signal(child.id(), "KILL");
        child.wait().unwrap();
        tally.fault(&format!("sigkill request in flight ({})", wire.name()));
        let recovered = scene.recover();
        tally.check(
            &format!("{}: relaunch after a kill in flight", wire.name()),
            code(&recovered) == 0,
            || stderr(&recovered),
        );
        let assistants = scene.assistants();
        tally.check(
            &format!("{}: the restart string (in flight)", wire.name()),
            recovery_text(&assistants[0]).as_deref() == Some(PROVIDER_UNKNOWN),
            || assistants[0].to_string(),
        );
        let bodies = server.bodies();
        tally.check(
            &format!("{}: no provider call replayed (in flight)", wire.name()),
            bodies.len() == 2
                && bodies[1]
                    .to_string()
                    .contains("The server restarted while you were working"),
            || format!("{} requests: {bodies:?}", bodies.len()),
        );
        let doctor = scene.env.run(&["doctor"]);
        tally.check(
            &format!("{}: invariants", wire.name()),
            code(&doctor) == 0,
            || stdout(&doctor),
        );
    }
    tally.finish("providers");
}

#[test]
fn r4_17_a_session_keeps_its_provider_and_model() {
    let env = Env::new();
    let work = work_dir(&env);
    let first = write_script(&env, "first.toml", "[[step]]\ntext = [\"One.\"]\n");
    let other = write_script(&env, "other.toml", "[[step]]\ntext = [\"Other.\"]\n");
    let run = |args: &[&str]| env.cmd().args(args).output().unwrap();
    let output = run(&["--script", &first, "run", "--dir", &work, "one"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let session = only_session(&env);
    // Another process, with another model: the prompt is refused, nothing admitted.
    let refused = run(&["--script", &other, "run", "--session", &session, "two"]);
    assert_eq!(code(&refused), 1, "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains(
            "runs on scripted/first, which this process does not have (it runs scripted/other)"
        ),
        "{}",
        stderr(&refused)
    );
    let prompts = |env: &Env| -> Vec<String> {
        show(env, &session)["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["type"] == "user")
            .map(|m| m["data"]["text"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(prompts(&env), ["one"]);
    // Its own model runs it.
    let output = run(&["--script", &first, "run", "--session", &session, "three"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    // The user chooses another — with the flags after the command, as the refusal
    // suggests: recorded as such, and it runs from there.
    assert!(
        stderr(&refused).contains(&format!(
            "`steward run --session {session} --provider … --model …`"
        )),
        "{}",
        stderr(&refused)
    );
    let output = run(&[
        "run",
        "--session",
        &session,
        "--script",
        &other,
        "--model",
        "other",
        "four",
    ]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(
        stderr(&output).contains("runs on scripted/other from here"),
        "{}",
        stderr(&output)
    );
    let messages = show(&env, &session)["messages"].clone();
    let chosen = messages
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["data"]["kind"] == "model")
        .expect("the choice is in the transcript");
    assert_eq!(
        chosen["data"]["text"],
        "Model switched to scripted/other (was scripted/first)"
    );
    let last = messages.as_array().unwrap().last().unwrap();
    assert_eq!(last["data"]["model"], "other");
    assert_eq!(prompts(&env), ["one", "three", "four"]);
}

#[test]
fn r4_17_another_provider_chosen_by_flag_takes_none_of_the_configs_settings() {
    let env = Env::new();
    let work = work_dir(&env);
    // Written for Anthropic, with a key that is not set here: none of it applies
    // to the provider the flag names.
    let config = write_script(
        &env,
        "anthropic.toml",
        "[provider]\nname = \"anthropic\"\nbase_url = \"http://127.0.0.1:9\"\n\
         api_key_env = \"STEWARD_TEST_KEY_NEVER_SET\"\nmodel = \"claude-x\"\n",
    );
    let output = env
        .cmd()
        .args([
            "--config",
            &config,
            "--provider",
            "scripted",
            "run",
            "--dir",
            &work,
            "hi",
        ])
        .output()
        .unwrap();
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let session = only_session(&env);
    let answered = show(&env, &session)["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["type"] == "assistant")
        .map(|m| (m["data"]["provider"].clone(), m["data"]["model"].clone()))
        .unwrap();
    // The built-in demo, not a script named after Anthropic's model.
    assert_eq!(answered, ("scripted".into(), "demo".into()));
    // Without `--model`, a provider that needs one says so.
    let output = env
        .cmd()
        .args([
            "--config",
            &config,
            "--provider",
            "ollama",
            "run",
            "--dir",
            &work,
            "hi",
        ])
        .output()
        .unwrap();
    assert_eq!(code(&output), 1, "{}", stderr(&output));
    assert!(
        stderr(&output).contains("provider.model (or --model) is required for `ollama`"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn r4_17_a_continuation_waits_for_a_process_with_its_model() {
    let env = Env::new();
    let work = work_dir(&env);
    let script = write_script(
        &env,
        "slow.toml",
        "[[step]]\ntext = [\"Working.\"]\ntool_calls = [{ tool = \"run_command\", input = { command = \"sleep 300\" } }]\n[[step]]\ntext = [\"Carried on.\"]\n",
    );
    let mut child = env
        .cmd()
        .args(["--script", &script, "run", "--yes", "--dir", &work, "go"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(eventually(Duration::from_secs(20), || {
        events_of(&env).iter().any(|t| t == "tool.started")
    }));
    signal(child.id(), "KILL");
    child.wait().unwrap();
    // The demo is not this session's model: the continuation waits.
    let demo = env.run(&["recover", "--json"]);
    assert_eq!(code(&demo), 0, "{}", stderr(&demo));
    let report: Value = serde_json::from_str(&stdout(&demo)).unwrap();
    let session = only_session(&env);
    assert_eq!(report["wakes"]["waiting"], 1, "{report}");
    assert_eq!(report["wakes"]["redriven"], 0, "{report}");
    // Named, with the provider and model it waits for.
    assert_eq!(
        report["wakes"]["waiting_sessions"],
        serde_json::json!([{"session_id": session, "provider": "scripted", "model": "slow"}]),
        "{report}"
    );
    let inspect: Value = serde_json::from_slice(&env.run(&["inspect", "--json"]).stdout).unwrap();
    assert_eq!(inspect["wakes"].as_array().unwrap().len(), 1, "{inspect}");
    // Told in words: the session, and the model it waits for — not this process's.
    let told = env.run(&["recover"]);
    assert_eq!(code(&told), 0, "{}", stderr(&told));
    assert!(
        stdout(&told).contains(
            "wakes: 1 session waits for a provider and model this process does not have (it runs scripted/demo)"
        ) && stdout(&told).contains(&format!("  {session} waits for scripted/slow\n")),
        "{}",
        stdout(&told)
    );
    // A process with it continues the session.
    let own = env
        .cmd()
        .args(["--script", &script, "recover", "--json"])
        .output()
        .unwrap();
    assert_eq!(code(&own), 0, "{}", stderr(&own));
    let messages = show(&env, &session)["messages"].to_string();
    assert!(messages.contains("Carried on."), "{messages}");
}
