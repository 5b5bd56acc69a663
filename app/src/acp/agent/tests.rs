//! The ACP methods over a real engine on a temp directory.

mod times {
    use super::super::*;

    #[test]
    fn times_are_rfc3339_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_796_084_532_000), "2026-12-01T00:22:12Z");
    }
}

mod turn_tests {
    use super::super::*;
    use crate::acp::transport::INVALID_REQUEST;
    use crate::acp::transport::Outbox;
    use steward_engine::EngineOptions;
    use steward_engine::config::Config;
    use steward_engine::db::Db;
    use steward_engine::tools::{Headless, ToolRegistry};

    async fn agent(
        dir: &tempfile::TempDir,
        script: &str,
        config: Config,
    ) -> (Arc<Agent>, tokio::sync::mpsc::UnboundedReceiver<Value>) {
        agent_asking(dir, script, config, false).await
    }

    /// An agent whose tool permission is the client's (`ask`) or allows all.
    async fn agent_asking(
        dir: &tempfile::TempDir,
        script: &str,
        config: Config,
        ask: bool,
    ) -> (Arc<Agent>, tokio::sync::mpsc::UnboundedReceiver<Value>) {
        let script_path = dir.path().join("script.toml");
        std::fs::write(&script_path, script).unwrap();
        let mut config = config;
        config.provider.script = Some(script_path);
        let clock = steward_engine::clock::SystemClock::shared();
        // The data directory apart from the sessions' directories (Steward's own
        // files ask every time).
        let data = dir.path().join("data");
        std::fs::create_dir_all(&data).unwrap();
        let database = data.join("steward.db");
        let (out, mut outgoing) = tokio::sync::mpsc::unbounded_channel();
        let outbox = Outbox::new(out, Arc::default());
        // What the agent sends, as the client reads it.
        let (values, received) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Some(message) = outgoing.recv().await {
                let message: crate::acp::transport::Outgoing = message;
                if values.send(message.into_value()).is_err() {
                    return;
                }
            }
        });
        let (views, forwarding) = Views::new(outbox.clone());
        let engine = Engine::start(EngineOptions {
            db: Db::open(&database, clock.as_ref()).unwrap(),
            owners_dir: data.join("owners"),
            clock,
            provider: steward_engine::provider::from_config(&config.provider).unwrap(),
            config,
            tools: ToolRegistry::standard(),
            permission: if ask {
                Arc::new(ClientPermission {
                    outbox: outbox.clone(),
                    views: views.clone(),
                })
            } else {
                Arc::new(Headless { allow_all: true })
            },
        })
        .await
        .unwrap();
        let engine = Arc::new(engine);
        tokio::spawn(super::super::super::views::forward(
            views.clone(),
            engine.clone(),
            engine.subscribe(),
            forwarding,
        ));
        let (_done, shut_down) = tokio::sync::watch::channel(false);
        let agent = Agent {
            engine,
            outbox,
            views,
            shut_down,
            database,
            owners: data.join("owners"),
            reader: Arc::default(),
            fs: Default::default(),
        };
        (Arc::new(agent), received)
    }

    async fn new_session(agent: &Agent, dir: &tempfile::TempDir) -> String {
        let work = dir.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        let created = agent
            .call("session/new", json!({"cwd": work, "mcpServers": []}))
            .await
            .unwrap();
        created["sessionId"].as_str().unwrap().to_string()
    }

    fn prompt(session: &str, text: &str) -> Value {
        json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]})
    }

    /// Every `session/update` received so far, as (kind, text or status).
    fn received(
        updates: &mut tokio::sync::mpsc::UnboundedReceiver<Value>,
    ) -> Vec<(String, String)> {
        let mut out = Vec::new();
        while let Ok(message) = updates.try_recv() {
            if message["method"] != "session/update" {
                continue;
            }
            let update = &message["params"]["update"];
            let detail = update["content"]["text"]
                .as_str()
                .or(update["status"].as_str())
                .unwrap_or_default();
            out.push((
                update["sessionUpdate"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                detail.to_string(),
            ));
        }
        out
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_step_limit_answers_max_turn_requests() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = Config::default();
        config.agent.max_steps = 2;
        let script = "[[step]]\ntool_calls = [{ tool = \"list_dir\", input = { path = \".\" } }]\n";
        let (agent, _updates) = agent(&dir, script, config).await;
        let session = new_session(&agent, &dir).await;
        let answer = agent
            .call("session/prompt", prompt(&session, "loop"))
            .await
            .unwrap();
        assert_eq!(answer["stopReason"], "max_turn_requests");
        agent.engine.shutdown().await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cancel_racing_the_end_of_a_turn_answers_one_or_the_other_and_keeps_the_transcript_valid()
     {
        for delay in [0u64, 1, 3, 10] {
            let dir = tempfile::tempdir().unwrap();
            let script = "[[step]]\ntext = [\"a \", \"b \", \"c\"]\ndelay_ms = 2\n";
            let (agent, _updates) = agent(&dir, script, Config::default()).await;
            let session = new_session(&agent, &dir).await;
            let prompting = {
                let (agent, session) = (agent.clone(), session.clone());
                tokio::spawn(
                    async move { agent.call("session/prompt", prompt(&session, "go")).await },
                )
            };
            tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
            agent.notify("session/cancel", json!({"sessionId": session}));
            let answer = prompting.await.unwrap().unwrap();
            let stop = answer["stopReason"].as_str().unwrap().to_string();
            assert!(stop == "end_turn" || stop == "cancelled", "{stop}");
            let report = agent
                .engine
                .db()
                .read(|c| steward_engine::doctor::check(c, i64::MAX / 2))
                .await
                .unwrap();
            assert!(report.ok, "delay {delay}: {report:?}");
            agent.engine.shutdown().await.unwrap();
        }
    }

    /// A script whose one step streams slowly (about two seconds).
    const SLOW: &str = "[[step]]\ntext = [\"a \", \"b \", \"c \", \"d \", \"e \", \"f \", \"g \", \"h\"]\ndelay_ms = 250\n";

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cancel_sent_right_behind_its_prompt_cancels_the_turn() {
        let dir = tempfile::tempdir().unwrap();
        let (agent, _updates) = agent(&dir, SLOW, Config::default()).await;
        let session = new_session(&agent, &dir).await;
        // In arrival order: the prompt is accepted, then the cancel, before the
        // prompt's task has run at all.
        let accepted = agent
            .accept("session/prompt", prompt(&session, "go"))
            .unwrap();
        agent.notify("session/cancel", json!({"sessionId": session}));
        let started = std::time::Instant::now();
        let answer = agent.handle(accepted).await.0.unwrap();
        assert_eq!(answer["stopReason"], "cancelled");
        assert!(started.elapsed() < std::time::Duration::from_millis(1500));
        agent.engine.shutdown().await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_second_prompt_while_one_runs_is_refused_and_each_update_is_sent_once() {
        let dir = tempfile::tempdir().unwrap();
        let script = "[[step]]\ntext = [\"one \", \"two \", \"three\"]\ndelay_ms = 100\n";
        let (agent, mut updates) = agent(&dir, script, Config::default()).await;
        let session = new_session(&agent, &dir).await;
        let first = agent
            .accept("session/prompt", prompt(&session, "go"))
            .unwrap();
        let refused = agent
            .accept("session/prompt", prompt(&session, "again"))
            .unwrap_err();
        assert_eq!(refused.0, INVALID_REQUEST, "{refused:?}");
        let answer = agent.handle(first).await.0.unwrap();
        assert_eq!(answer["stopReason"], "end_turn");
        let texts: Vec<String> = received(&mut updates)
            .into_iter()
            .filter(|(kind, _)| kind == "agent_message_chunk")
            .map(|(_, text)| text)
            .collect();
        assert_eq!(texts.concat(), "one two three");
        // The turn is over: the next prompt is taken.
        let answer = agent
            .call("session/prompt", prompt(&session, "again"))
            .await
            .unwrap();
        assert_eq!(answer["stopReason"], "end_turn");
        agent.engine.shutdown().await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_prompt_for_a_session_not_opened_here_is_not_found() {
        let dir = tempfile::tempdir().unwrap();
        let (agent, _updates) = agent(&dir, SLOW, Config::default()).await;
        for id in ["ses_nope", ""] {
            let refused = agent
                .call("session/prompt", prompt(id, "go"))
                .await
                .unwrap_err();
            assert_eq!(refused.0, RESOURCE_NOT_FOUND, "{refused:?}");
        }
        agent.engine.shutdown().await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_cwd_filter_matches_the_directory_however_it_is_spelled() {
        let dir = tempfile::tempdir().unwrap();
        let (agent, _updates) = agent(&dir, SLOW, Config::default()).await;
        let real = dir.path().join("real");
        std::fs::create_dir_all(&real).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let created = agent
            .call("session/new", json!({"cwd": link, "mcpServers": []}))
            .await
            .unwrap();
        let other = dir.path().join("other");
        std::fs::create_dir_all(&other).unwrap();
        agent
            .call("session/new", json!({"cwd": other, "mcpServers": []}))
            .await
            .unwrap();
        let spellings = [
            link.display().to_string(),
            format!("{}/", link.display()),
            real.display().to_string(),
            format!("{}/.", real.display()),
        ];
        for cwd in spellings {
            let listed = agent
                .call("session/list", json!({"cwd": cwd}))
                .await
                .unwrap();
            let ids: Vec<&str> = listed["sessions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["sessionId"].as_str().unwrap())
                .collect();
            assert_eq!(ids, vec![created["sessionId"].as_str().unwrap()], "{cwd}");
        }
        for bad in [json!({"cwd": "relative/dir"}), json!({"cursor": "zzzz"})] {
            let refused = agent.call("session/list", bad.clone()).await.unwrap_err();
            assert_eq!(refused.0, INVALID_PARAMS, "{bad}");
        }
        agent.engine.shutdown().await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_client_hears_of_a_tool_call_before_it_is_asked_and_always_is_per_session() {
        let dir = tempfile::tempdir().unwrap();
        let script = "[[step]]\ntool_calls = [{ tool = \"write_file\", input = { path = \"a.txt\", content = \"x\" } }]\n\
                      [[step]]\ntext = [\"done\"]\n\
                      [[step]]\ntool_calls = [{ tool = \"write_file\", input = { path = \"b.txt\", content = \"y\" } }]\n\
                      [[step]]\ntext = [\"done\"]\n\
                      [[step]]\ntool_calls = [{ tool = \"write_file\", input = { path = \"c.txt\", content = \"z\" } }]\n\
                      [[step]]\ntext = [\"done\"]\n";
        let (agent, mut out) = agent_asking(&dir, script, Config::default(), true).await;
        // The client: answers every permission question with `allow_always`, and
        // records what it was sent, in order.
        let seen = Arc::new(std::sync::Mutex::new(Vec::<Value>::new()));
        let client = {
            let (agent, seen) = (agent.clone(), seen.clone());
            tokio::spawn(async move {
                while let Some(message) = out.recv().await {
                    if message["method"] == "session/request_permission" {
                        agent.outbox.answer(
                            &message["id"],
                            Ok(json!({"outcome": {"outcome": "selected", "optionId": "allow_always"}})),
                        );
                    }
                    seen.lock().unwrap().push(message);
                }
            })
        };
        let first = new_session(&agent, &dir).await;
        for _ in 0..2 {
            let answer = agent
                .call("session/prompt", prompt(&first, "write"))
                .await
                .unwrap();
            assert_eq!(answer["stopReason"], "end_turn");
        }
        let second_dir = dir.path().join("second");
        std::fs::create_dir_all(&second_dir).unwrap();
        let second = agent
            .call("session/new", json!({"cwd": second_dir, "mcpServers": []}))
            .await
            .unwrap()["sessionId"]
            .as_str()
            .unwrap()
            .to_string();
        let answer = agent
            .call("session/prompt", prompt(&second, "write"))
            .await
            .unwrap();
        assert_eq!(answer["stopReason"], "end_turn");
        agent.engine.shutdown().await.unwrap();
        drop(agent);
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), client).await;
        let seen = seen.lock().unwrap();
        let asked: Vec<&Value> = seen
            .iter()
            .filter(|m| m["method"] == "session/request_permission")
            .collect();
        // Asked once in the first session (then "always"), and again in the second.
        assert_eq!(asked.len(), 2, "{asked:?}");
        assert_eq!(asked[0]["params"]["sessionId"], first.as_str());
        assert_eq!(asked[1]["params"]["sessionId"], second.as_str());
        for question in asked {
            let call = &question["params"]["toolCall"]["toolCallId"];
            let at = |pred: &dyn Fn(&Value) -> bool| seen.iter().position(pred).unwrap();
            let told = at(&|m| {
                m["params"]["update"]["sessionUpdate"] == "tool_call"
                    && m["params"]["update"]["toolCallId"] == *call
            });
            let asked_at = at(&|m| {
                m["method"] == "session/request_permission"
                    && m["params"]["toolCall"]["toolCallId"] == *call
            });
            assert!(told < asked_at, "asked about {call} before the tool_call");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cancel_behind_a_prompt_queued_to_a_running_execution_cancels_the_prompt_too() {
        let dir = tempfile::tempdir().unwrap();
        let (agent, _updates) = agent(&dir, SLOW, Config::default()).await;
        let session = new_session(&agent, &dir).await;
        // Something already runs the session (as a continuation after a restart
        // does), then the client prompts and cancels at once.
        agent.engine.submit(&session, "earlier").await.unwrap();
        let accepted = agent
            .accept("session/prompt", prompt(&session, "now"))
            .unwrap();
        agent.notify("session/cancel", json!({"sessionId": session}));
        let started = std::time::Instant::now();
        let answer = agent.handle(accepted).await.0.unwrap();
        assert_eq!(answer["stopReason"], "cancelled");
        assert!(started.elapsed() < std::time::Duration::from_millis(1500));
        // The queued prompt never got an answer of its own.
        let messages = agent
            .engine
            .db()
            .read({
                let session = session.clone();
                move |c| steward_engine::store::rows::messages(c, &session)
            })
            .await
            .unwrap();
        let after_prompt: Vec<_> = messages
            .iter()
            .skip_while(|m| !matches!(&m.data, steward_engine::message::MessageData::User(u) if u.text == "now"))
            .filter_map(|m| m.data.as_assistant())
            .collect();
        assert!(
            after_prompt
                .iter()
                .all(|a| a.finish.is_none_or(|f| f.as_str() == "error")),
            "{after_prompt:?}"
        );
        agent.engine.shutdown().await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_second_turn_starts_its_text_without_a_paragraph_break() {
        let dir = tempfile::tempdir().unwrap();
        let script = "[[step]]\ntext = [\"first\"]\n[[step]]\ntext = [\"second\"]\n";
        let (agent, mut updates) = agent(&dir, script, Config::default()).await;
        let session = new_session(&agent, &dir).await;
        for text in ["one", "two"] {
            agent
                .call("session/prompt", prompt(&session, text))
                .await
                .unwrap();
        }
        let texts: Vec<String> = received(&mut updates)
            .into_iter()
            .filter(|(kind, _)| kind == "agent_message_chunk")
            .map(|(_, text)| text)
            .collect();
        assert_eq!(texts, vec!["first", "second"]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_call_outside_the_session_directory_is_never_offered_always() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside.txt");
        std::fs::write(&outside, "x").unwrap();
        let script = format!(
            "[[step]]\ntool_calls = [{{ tool = \"read_file\", input = {{ path = {:?} }} }}]\n[[step]]\ntext = [\"done\"]\n",
            outside.display().to_string()
        );
        let (agent, mut out) = agent_asking(&dir, &script, Config::default(), true).await;
        let session = new_session(&agent, &dir).await;
        let asked = {
            let agent = agent.clone();
            tokio::spawn(async move {
                while let Some(message) = out.recv().await {
                    if message["method"] == "session/request_permission" {
                        agent.outbox.answer(
                            &message["id"],
                            Ok(json!({"outcome": {"outcome": "selected", "optionId": "allow_once"}})),
                        );
                        return message;
                    }
                }
                Value::Null
            })
        };
        let answer = agent
            .call("session/prompt", prompt(&session, "read it"))
            .await
            .unwrap();
        assert_eq!(answer["stopReason"], "end_turn");
        let question = asked.await.unwrap();
        let options: Vec<&str> = question["params"]["options"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["optionId"].as_str().unwrap())
            .collect();
        assert_eq!(options, vec!["allow_once", "reject_once"]);
        agent.engine.shutdown().await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn unknown_methods_and_bad_params_get_their_error_codes() {
        let dir = tempfile::tempdir().unwrap();
        let (agent, _updates) = agent(&dir, "[[step]]\ntext = [\"x\"]\n", Config::default()).await;
        assert_eq!(
            agent.call("session/fly", json!({})).await.unwrap_err().0,
            METHOD_NOT_FOUND
        );
        assert_eq!(
            agent
                .call("session/new", json!({"cwd": 5}))
                .await
                .unwrap_err()
                .0,
            INVALID_PARAMS
        );
        assert_eq!(
            agent
                .call(
                    "session/load",
                    json!({"sessionId": "ses_nope", "cwd": "/", "mcpServers": []})
                )
                .await
                .unwrap_err()
                .0,
            RESOURCE_NOT_FOUND
        );
        // A prompt of whitespace alone is the client's mistake, and nothing is
        // admitted.
        let session = new_session(&agent, &dir).await;
        let refused = agent
            .call("session/prompt", prompt(&session, " \n "))
            .await
            .unwrap_err();
        assert_eq!(refused, (INVALID_PARAMS, "the prompt is empty".to_string()));
        let inputs: i64 = agent
            .engine
            .db()
            .read(|c| Ok(c.query_row("SELECT count(*) FROM session_input", [], |r| r.get(0))?))
            .await
            .unwrap();
        assert_eq!(inputs, 0);
        agent.engine.shutdown().await.unwrap();
    }
}
