//! The rest of the fault campaign: a zombie owner, two processes at once, bad rows,
//! and a database that fills up mid-run.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::campaign::{Scenario, Tally};
use crate::recovery::events_of;
use crate::support::{code, eventually, helper_bin, signal, stderr, stdout};

fn count(scenario: &Scenario, sql: &str) -> i64 {
    let conn = rusqlite::Connection::open(scenario.env.db()).unwrap();
    conn.query_row(sql, [], |r| r.get(0)).unwrap()
}

fn json(output: &std::process::Output) -> Value {
    serde_json::from_str(&stdout(output)).unwrap_or(Value::Null)
}

/// A fixture of `n` interrupted sessions whose owner is dead.
fn interrupted(scenario: &Scenario, n: usize) {
    std::fs::create_dir_all(&scenario.env.data).unwrap();
    let out = Command::new(helper_bin())
        .args([
            "interrupted",
            scenario.env.data.to_str().unwrap(),
            &n.to_string(),
            &scenario.work,
            "script",
        ])
        .env_remove("FAILPOINTS")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
}

const SLOW: &str = r#"
[[step]]
text = ["one ", "two ", "three ", "four ", "five ", "six ", "seven ", "eight ", "nine ", "ten ", "eleven ", "twelve "]
delay_ms = 250
[[step]]
text = ["Taken over and finished."]
"#;

#[test]
fn campaign_a_zombie_owner_resumed_past_its_lease_commits_and_dispatches_nothing() {
    let mut tally = Tally::default();
    let scenario = Scenario::new("zombie".into(), SLOW);
    scenario.set_config("[lease]\nlease_ms = 1500\n");
    let mut zombie = scenario
        .steward(None)
        .args(["run", "--dir", &scenario.work, "count slowly"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(eventually(Duration::from_secs(10), || events_of(
        &scenario.env
    )
    .contains(&"step.text".to_string())));
    signal(zombie.id(), "STOP");
    tally.fault("sigstop past the lease");
    std::thread::sleep(Duration::from_millis(2_000));
    // A second process takes over the expired claim and finishes the session.
    let taker = scenario
        .steward(None)
        .args(["recover", "--json"])
        .output()
        .unwrap();
    tally.check(
        "zombie: the second process recovers",
        code(&taker) == 0,
        || stderr(&taker),
    );
    let report = json(&taker);
    tally.check(
        "zombie: one execution taken over",
        report["recovered"].as_array().map(Vec::len) == Some(1),
        || report.to_string(),
    );
    let zombie_owner: String = {
        let conn = rusqlite::Connection::open(scenario.env.db()).unwrap();
        conn.query_row(
            "SELECT owner_id FROM event WHERE type = 'step.text' ORDER BY seq LIMIT 1",
            [],
            |r| r.get(0),
        )
        .unwrap()
    };
    let events_before = count(&scenario, "SELECT count(*) FROM event");
    let resumed = Instant::now();
    signal(zombie.id(), "CONT");
    let status = zombie.wait().unwrap();
    let stopped_after = resumed.elapsed();
    tally.check(
        "zombie: stops within one heartbeat",
        stopped_after < Duration::from_millis(1_500),
        || format!("{stopped_after:?}"),
    );
    tally.check(
        "zombie: exits as having lost its claim",
        status.code() == Some(1),
        || format!("{status:?}"),
    );
    tally.check(
        "zombie: commits nothing after resuming",
        count(&scenario, "SELECT count(*) FROM event") == events_before,
        || "events were added".into(),
    );
    let taken_seq = count(
        &scenario,
        "SELECT min(seq) FROM event WHERE type = 'step.recovered'",
    );
    tally.check(
        "zombie: nothing of the zombie after the takeover",
        count(
            &scenario,
            &format!(
                "SELECT count(*) FROM event WHERE owner_id = '{zombie_owner}' AND seq > {taken_seq}"
            ),
        ) == 0,
        || "the zombie wrote after the takeover".into(),
    );
    scenario.check(&mut tally, &[("count slowly", true)]);
    tally.finish("zombie");
}

#[test]
fn campaign_two_processes_launched_at_once_never_double_a_claim_or_a_recovery() {
    let mut tally = Tally::default();
    for round in 0..20 {
        let scenario = Scenario::new(format!("pair {round}"), "[[step]]\ntext = [\"Hello.\"]\n");
        if round % 2 == 0 {
            // Two runs racing on a fresh data directory (creation, migration, owners).
            let spawn = |prompt: &str| {
                scenario
                    .steward(None)
                    .args(["run", "--dir", &scenario.work, prompt])
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            };
            let (a, b) = (spawn("left"), spawn("right"));
            let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
            tally.fault("simultaneous launch");
            tally.check(
                &format!("pair {round}: both runs succeed"),
                code(&a) == 0 && code(&b) == 0,
                || format!("{} / {}", stderr(&a), stderr(&b)),
            );
            tally.check(
                &format!("pair {round}: migrated once"),
                count(&scenario, "SELECT count(*) FROM schema_migration")
                    == steward_engine::store::migrate::MIGRATIONS.len() as i64,
                || "".into(),
            );
            tally.check(
                &format!("pair {round}: two sessions, each answered once"),
                count(
                    &scenario,
                    "SELECT count(*) FROM session_message WHERE type = 'assistant'",
                ) == 2,
                || "".into(),
            );
            scenario.check(&mut tally, &[]);
        } else {
            interrupted(&scenario, 20);
            let spawn = || {
                scenario
                    .steward(None)
                    .args(["recover", "--json"])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            };
            let (a, b) = (spawn(), spawn());
            let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
            tally.fault("simultaneous recovery");
            let recovered = |o: &std::process::Output| {
                json(o)["recovered"].as_array().map(Vec::len).unwrap_or(0)
            };
            tally.check(
                &format!("pair {round}: both recoveries succeed"),
                code(&a) == 0 && code(&b) == 0,
                || format!("{} / {}", stderr(&a), stderr(&b)),
            );
            tally.check(
                &format!("pair {round}: every execution recovered exactly once"),
                recovered(&a) + recovered(&b) == 20,
                || format!("{} + {}", recovered(&a), recovered(&b)),
            );
            tally.check(
                &format!("pair {round}: one recovery row and one continuation each"),
                count(&scenario, "SELECT count(*) FROM session_recovery") == 20
                    && count(&scenario, "SELECT count(*) FROM session_message WHERE data LIKE '%\"kind\":\"continuation\"%'") == 20,
                || "doubled".into(),
            );
            scenario.check(&mut tally, &[]);
        }
    }
    tally.finish("pairs");
}

#[test]
fn campaign_bad_rows_are_quarantined_or_reported_and_everything_else_works() {
    let mut tally = Tally::default();
    let scenario = Scenario::new("bad rows".into(), "[[step]]\ntext = [\"Carrying on.\"]\n");
    interrupted(&scenario, 6);
    let conn = rusqlite::Connection::open(scenario.env.db()).unwrap();
    let claims: Vec<(String, String, String)> = conn
        .prepare("SELECT id, session_id, assistant_message_id FROM session_execution ORDER BY id")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    // An older, non-STRICT claims table, as a previous build might have left it.
    conn.execute_batch(
        "PRAGMA foreign_keys = OFF;
         CREATE TABLE session_execution_old AS SELECT * FROM session_execution;
         DROP TABLE session_execution;
         CREATE TABLE session_execution (id TEXT NOT NULL, session_id TEXT NOT NULL
             REFERENCES session(id) ON DELETE CASCADE, owner_id TEXT NOT NULL,
             epoch INTEGER NOT NULL DEFAULT 0, assistant_message_id TEXT, phase TEXT NOT NULL,
             assistant_seq INTEGER NOT NULL DEFAULT -1, time_created INTEGER NOT NULL,
             expires_at INTEGER NOT NULL, recovery_error TEXT,
             CONSTRAINT session_execution_pk PRIMARY KEY (id));
         INSERT INTO session_execution SELECT * FROM session_execution_old;
         DROP TABLE session_execution_old;
         CREATE UNIQUE INDEX session_execution_session_idx ON session_execution (session_id);
         CREATE INDEX session_execution_owner_idx ON session_execution (owner_id);
         CREATE INDEX session_execution_created_idx ON session_execution (time_created, id);
         PRAGMA foreign_keys = ON;",
    )
    .unwrap();
    conn.execute(
        "UPDATE session_execution SET phase = 'bogus' WHERE id = ?1",
        [&claims[0].0],
    )
    .unwrap();
    conn.execute(
        "UPDATE session_execution SET expires_at = 'later' WHERE id = ?1",
        [&claims[1].0],
    )
    .unwrap();
    conn.execute(
        "UPDATE session_execution SET owner_id = 'own_nobody', expires_at = 1 WHERE id = ?1",
        [&claims[2].0],
    )
    .unwrap();
    conn.execute(
        "UPDATE session_message SET data = '{not json' WHERE id = ?1",
        [&claims[3].2],
    )
    .unwrap();
    // A recovery row whose continuation belongs to another session.
    conn.execute_batch(&format!(
        "INSERT INTO session_input (id, session_id, prompt, delivery, admitted_seq, time_created)
             VALUES ('inp_rec_exe_forged', '{}', 'forged', 'queue', 1000, 0);
         INSERT INTO session_recovery (execution_id, session_id, continuation_message_id, phase, time_created)
             VALUES ('exe_forged', '{}', 'inp_rec_exe_forged', 'ready', 0);",
        claims[4].1, claims[5].1
    ))
    .unwrap();
    drop(conn);
    tally.fault("bad rows");

    let output = scenario
        .steward(None)
        .args(["recover", "--json"])
        .output()
        .unwrap();
    tally.check(
        "bad rows: recovery runs to the end",
        code(&output) == 0,
        || stderr(&output),
    );
    let report = json(&output);
    let mut reasons: Vec<(String, String)> = report["quarantined"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|q| {
            (
                q["execution_id"].as_str().unwrap_or("").to_string(),
                q["reason"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    reasons.sort();
    let expect = |i: usize, needle: &str| {
        reasons
            .iter()
            .any(|(id, reason)| *id == claims[i].0 && reason.contains(needle))
    };
    tally.check(
        "bad rows: unknown phase quarantined with its reason",
        expect(0, "unknown phase \"bogus\""),
        || format!("{reasons:?}"),
    );
    tally.check(
        "bad rows: TEXT expires_at quarantined with its reason",
        expect(1, "expires_at is not an integer (later)"),
        || format!("{reasons:?}"),
    );
    tally.check(
        "bad rows: undecodable assistant quarantined with its reason",
        expect(3, "undecodable"),
        || format!("{reasons:?}"),
    );
    let recovered: Vec<&str> = report["recovered"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|r| r["execution_id"].as_str())
                .collect()
        })
        .unwrap_or_default();
    tally.check(
        "bad rows: the claim of a missing owner and the sound ones are recovered",
        [2, 4, 5]
            .iter()
            .all(|i| recovered.contains(&claims[*i].0.as_str()))
            && recovered.len() == 3,
        || format!("{recovered:?}"),
    );
    tally.check(
        "bad rows: the forged wake is quarantined",
        report["wakes"]["quarantined"] == 1,
        || report["wakes"].to_string(),
    );
    let inspect = json(
        &scenario
            .steward(None)
            .args(["inspect", "--json"])
            .output()
            .unwrap(),
    );
    let quarantine = inspect["quarantine"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    tally.check(
        "bad rows: the inspector lists four quarantined rows with reasons",
        quarantine.len() == 4
            && quarantine
                .iter()
                .all(|q| !q["reason"].as_str().unwrap_or("").is_empty()),
        || inspect["quarantine"].to_string(),
    );
    let forged = quarantine
        .iter()
        .find(|q| q["execution_id"] == "exe_forged")
        .map(|q| q["reason"].clone())
        .unwrap_or_default();
    tally.check(
        "bad rows: the forged wake's reason names the other session",
        forged
            .as_str()
            .unwrap_or("")
            .contains(&format!("belongs to session {}", claims[4].1)),
        || forged.to_string(),
    );
    let sessions = scenario
        .steward(None)
        .args(["sessions", "--json"])
        .output()
        .unwrap();
    tally.check(
        "bad rows: sessions still lists everything",
        json(&sessions).as_array().map(Vec::len) == Some(6),
        || stdout(&sessions),
    );
    let doctor = scenario
        .steward(None)
        .args(["doctor", "--json"])
        .output()
        .unwrap();
    let report = json(&doctor);
    let broken: Vec<String> = report["invariants"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|v| format!("{} {}", v["rule"], v["detail"]))
        .collect();
    tally.check(
        "bad rows: doctor reports the undecodable message with a reason",
        code(&doctor) == 1 && broken.iter().any(|b| b.contains("undecodable")),
        || broken.join("; "),
    );
    tally.finish("bad rows");
}

#[test]
fn campaign_a_full_database_fails_typed_without_corruption_and_works_once_raised() {
    let mut tally = Tally::default();
    let big: String = "x".repeat(2_000);
    let script = format!(
        "[[step]]\ntext = [\"small answer\"]\n[[step]]\ntext = [{}]\ndelay_ms = 5\n[[step]]\ntext = [\"done\"]\n",
        vec![format!("\"{big}\""); 60].join(", ")
    );
    let scenario = Scenario::new("full".into(), &script);
    let first = scenario
        .steward(None)
        .args(["run", "--dir", &scenario.work, "first"])
        .output()
        .unwrap();
    assert_eq!(code(&first), 0, "{}", stderr(&first));
    let pages = count(&scenario, "PRAGMA page_count");
    scenario.set_config(&format!("[store]\nmax_pages = {}\n", pages + 6));
    let session = scenario.session().unwrap();
    let full = scenario
        .steward(None)
        .args(["run", "--session", &session, "a long answer please"])
        .output()
        .unwrap();
    tally.fault("max_page_count");
    tally.check("full: the run fails", code(&full) == 1, || {
        format!("{} {}", code(&full), stderr(&full))
    });
    tally.check(
        "full: with a typed, readable error",
        stderr(&full).contains("the disk is full: "),
        || stderr(&full),
    );
    scenario.set_config("");
    let doctor = scenario
        .steward(None)
        .args(["doctor", "--json"])
        .output()
        .unwrap();
    let report = json(&doctor);
    tally.check(
        "full: no corruption",
        report["quick_check"] == "ok"
            && report["invariants"]
                .as_array()
                .is_some_and(|v| v.iter().all(|v| v["rule"] == "open_tool")),
        || report.to_string(),
    );
    // With the limit raised, recovery and the continuation finish the job.
    scenario.check(
        &mut tally,
        &[("first", true), ("a long answer please", true)],
    );
    tally.finish("full");
}
