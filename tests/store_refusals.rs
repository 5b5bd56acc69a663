//! protocol §2.3 against the real binary: every file Steward must not touch is refused
//! with a one-line error naming what and where, the documented exit code, and the
//! directory byte-for-byte as it was (no `-wal`/`-shm`, no logs).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use pretty_assertions::assert_eq;
use rusqlite::Connection;

use crate::support::{Env, code, helper_bin, signal, snapshot, stderr, stdout, unprivileged};

/// Runs a command on the prepared data dir and checks the refusal (`doctor`
/// explains a refusal at length instead; see `hardening.rs`).
fn assert_refused(env: &Env, expected_code: i32, message: &str) {
    let before = snapshot(&env.data);
    let mut cmd = env.cmd();
    cmd.arg("sessions");
    if expected_code == 1 {
        unprivileged(&mut cmd);
    }
    let output = cmd.output().unwrap();
    let err = stderr(&output);
    assert_eq!(code(&output), expected_code, "stderr: {err}");
    assert_eq!(err.lines().count(), 1, "not one line: {err}");
    assert!(err.contains(message), "{err:?} lacks {message:?}");
    assert!(
        err.contains(&env.db().display().to_string()),
        "{err:?} does not say where"
    );
    assert_eq!(stdout(&output), "");
    assert_eq!(snapshot(&env.data), before, "the data directory changed");
}

/// A real Steward database, closed cleanly (no WAL left).
fn steward_db(env: &Env) {
    let output = env.run(&["sessions"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    std::fs::remove_dir_all(env.data.join("logs")).unwrap();
}

fn write_db_file(env: &Env, bytes: &[u8]) {
    std::fs::create_dir_all(&env.data).unwrap();
    std::fs::write(env.db(), bytes).unwrap();
}

#[test]
fn r2_3_a_foreign_database_is_refused() {
    let env = Env::new();
    std::fs::create_dir_all(&env.data).unwrap();
    let conn = Connection::open(env.db()).unwrap();
    conn.execute_batch("CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('mine');")
        .unwrap();
    drop(conn);
    assert_refused(&env, 3, "Database is not empty and has no session table");
}

#[test]
fn r2_3_a_newer_schema_is_refused() {
    let env = Env::new();
    steward_db(&env);
    let conn = Connection::open(env.db()).unwrap();
    conn.execute(
        "INSERT INTO schema_migration VALUES ('0999_future', 'x', 1)",
        [],
    )
    .unwrap();
    drop(conn);
    assert_refused(
        &env,
        3,
        "Database schema is newer than this build (migration 0999_future)",
    );
}

#[test]
fn r2_3_a_checksum_mismatch_is_refused() {
    let env = Env::new();
    steward_db(&env);
    let conn = Connection::open(env.db()).unwrap();
    conn.execute(
        "UPDATE schema_migration SET checksum = 'fnv1a64:0000' WHERE id = '0001_init'",
        [],
    )
    .unwrap();
    drop(conn);
    assert_refused(&env, 3, "Migration 0001_init checksum mismatch");
}

#[test]
fn r2_3_a_file_that_is_not_a_database_is_refused() {
    let env = Env::new();
    write_db_file(&env, b"these are my notes, not a database\n");
    assert_refused(&env, 3, "the file is not a SQLite database");
    let env = Env::new();
    let noise: Vec<u8> = (0..8192u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    write_db_file(&env, &noise);
    assert_refused(&env, 3, "the file is not a SQLite database");
}

#[test]
fn r2_3_a_zeroed_header_is_refused() {
    let env = Env::new();
    steward_db(&env);
    let mut bytes = std::fs::read(env.db()).unwrap();
    bytes[..100].fill(0);
    std::fs::write(env.db(), bytes).unwrap();
    assert_refused(&env, 3, "the file is not a SQLite database");
}

#[test]
fn r2_3_a_truncated_file_is_refused() {
    let env = Env::new();
    steward_db(&env);
    let bytes = std::fs::read(env.db()).unwrap();
    assert!(
        bytes.len() >= 4 * 4096,
        "fixture too small: {}",
        bytes.len()
    );
    std::fs::write(env.db(), &bytes[..2 * 4096]).unwrap();
    assert_refused(&env, 3, "the file is truncated");
    let env = Env::new();
    steward_db(&env);
    let bytes = std::fs::read(env.db()).unwrap();
    std::fs::write(env.db(), &bytes[..bytes.len() - 1000]).unwrap();
    assert_refused(&env, 3, "the file is truncated");
}

#[test]
fn r2_3_a_zero_length_file_is_refused() {
    let env = Env::new();
    write_db_file(&env, b"");
    assert_refused(&env, 3, "the file is empty (0 bytes)");
}

#[test]
fn r2_3_a_directory_in_place_of_the_file_is_refused() {
    let env = Env::new();
    std::fs::create_dir_all(env.db()).unwrap();
    std::fs::write(env.db().join("keep.txt"), b"keep").unwrap();
    assert_refused(&env, 3, "it is a directory, not a database file");
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn an_unreadable_database_fails_with_exit_1() {
    let env = Env::new();
    steward_db(&env);
    chmod(env.root.path(), 0o755);
    chmod(&env.data, 0o777);
    chmod(&env.home, 0o777);
    chmod(&env.db(), 0o000);
    assert_refused(&env, 1, "Permission denied");
}

#[test]
fn a_read_only_database_file_fails_with_exit_1() {
    let env = Env::new();
    steward_db(&env);
    chmod(env.root.path(), 0o755);
    chmod(&env.data, 0o777);
    chmod(&env.home, 0o777);
    chmod(&env.db(), 0o444);
    assert_refused(&env, 1, "read-only");
}

#[test]
fn a_read_only_data_directory_fails_with_exit_1() {
    let env = Env::new();
    steward_db(&env);
    chmod(env.root.path(), 0o755);
    chmod(&env.home, 0o777);
    chmod(&env.db(), 0o666);
    chmod(&env.data, 0o555);
    assert_refused(&env, 1, "cannot use");
    chmod(&env.data, 0o755);
}

#[test]
fn a_data_directory_that_cannot_be_created_fails_with_exit_1() {
    let env = Env::new();
    chmod(env.root.path(), 0o555);
    chmod(&env.home, 0o777);
    let mut cmd = env.cmd();
    cmd.arg("sessions");
    unprivileged(&mut cmd);
    let output = cmd.output().unwrap();
    assert_eq!(code(&output), 1, "{}", stderr(&output));
    assert!(
        stderr(&output).contains("cannot create data directory"),
        "{}",
        stderr(&output)
    );
    assert!(!env.data.exists());
    chmod(env.root.path(), 0o755);
}

#[test]
fn r2_1_a_fresh_data_dir_gets_a_migrated_database() {
    let env = Env::new();
    let output = env.run(&["sessions"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let output = env.run(&["doctor", "--json"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let report: serde_json::Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(
        report["schema_version"],
        steward_engine::store::migrate::MIGRATIONS
            .last()
            .unwrap()
            .id
    );
    assert_eq!(report["quick_check"], "ok");
    assert_eq!(report["ok"], true);
    assert_eq!(report["path"], env.db().display().to_string());
    let names: Vec<String> = std::fs::read_dir(&env.data)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with("steward.db-"))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(names, vec!["logs", "steward.db"]);
}

#[test]
fn r2_2_an_abort_while_creating_leaves_no_half_made_database() {
    let env = Env::new();
    let output = env
        .cmd()
        .arg("sessions")
        .env("FAILPOINTS", "migrate.after_apply=return")
        .output()
        .unwrap();
    assert_ne!(code(&output), 0);
    assert!(
        stderr(&output).contains("failpoint migrate.after_apply hit"),
        "{}",
        stderr(&output)
    );
    assert!(
        !env.db().exists(),
        "a half-created database was left in place"
    );
    let output = env.run(&["sessions"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let leftovers: Vec<String> = std::fs::read_dir(&env.data)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("creating"))
        .collect();
    assert_eq!(leftovers, Vec::<String>::new());
}

#[test]
fn r2_2_an_abort_after_a_migration_resumes_and_records_each_once() {
    let env = Env::new();
    std::fs::create_dir_all(&env.data).unwrap();
    let db = env.db();
    let helper = |count: &str, failpoints: Option<&str>| {
        let mut cmd = std::process::Command::new(helper_bin());
        cmd.args(["migrate", db.to_str().unwrap(), count]);
        match failpoints {
            Some(f) => cmd.env("FAILPOINTS", f),
            None => cmd.env_remove("FAILPOINTS"),
        };
        cmd.output().unwrap()
    };
    assert!(helper("1", None).status.success());
    // Upgrade to three migrations, aborting right after the first one applied.
    let aborted = helper("3", Some("migrate.after_apply=return"));
    assert!(!aborted.status.success());
    assert!(stderr(&aborted).contains("failpoint migrate.after_apply hit"));
    let ids = |db: &Path| -> Vec<String> {
        let conn = Connection::open(db).unwrap();
        let mut stmt = conn
            .prepare("SELECT id FROM schema_migration ORDER BY id")
            .unwrap();
        stmt.query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    assert_eq!(ids(&db), vec!["0001_init", "9002_test_notes"]);
    let done = helper("3", None);
    assert!(done.status.success(), "{}", stderr(&done));
    assert_eq!(
        ids(&db),
        vec!["0001_init", "9002_test_notes", "9003_test_note_tags"]
    );
    let conn = Connection::open(&db).unwrap();
    let notes: Vec<String> = conn
        .prepare("SELECT body FROM test_note ORDER BY id")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(notes, vec!["from 9002", "from 9003"]);
}

#[test]
fn an_unknown_config_key_is_an_error_that_names_it() {
    let env = Env::new();
    let config = env.root.path().join("config.toml");
    std::fs::write(&config, "[tools]\nallow = []\ntimeout = 5\n").unwrap();
    let output = env
        .cmd()
        .arg("--config")
        .arg(&config)
        .arg("doctor")
        .output()
        .unwrap();
    assert_eq!(code(&output), 1);
    let err = stderr(&output);
    assert!(
        err.contains("unknown field `timeout`") && err.contains("config.toml"),
        "{err}"
    );
    assert!(
        !env.data.exists(),
        "a bad config still touched the data directory"
    );
    let missing = env
        .cmd()
        .arg("--config")
        .arg(env.root.path().join("nope.toml"))
        .arg("doctor")
        .output()
        .unwrap();
    assert_eq!(code(&missing), 1);
    assert!(
        stderr(&missing).contains("nope.toml"),
        "{}",
        stderr(&missing)
    );
}

#[test]
fn r2_3_after_a_power_cut_a_damaged_page_is_refused_before_anything_is_written() {
    let env = Env::new();
    let work = env.root.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let dir = work.display().to_string();
    for prompt in ["one", "two", "three"] {
        let output = env.run(&["run", "--yes", "--dir", &dir, prompt]);
        assert_eq!(code(&output), 0, "{}", stderr(&output));
    }
    std::fs::remove_dir_all(env.data.join("logs")).unwrap();
    // A power cut: the owner row of a process of an earlier boot is still there, and
    // a page of the transcript did not survive as written.
    let conn = Connection::open(env.db()).unwrap();
    conn.execute(
        "INSERT INTO owner VALUES ('own_before', 1, 'this-host', 1000, NULL, 'this-machine', 'an-earlier-boot')",
        [],
    )
    .unwrap();
    let page_size: i64 = conn
        .query_row("PRAGMA page_size", [], |r| r.get(0))
        .unwrap();
    let root: i64 = conn
        .query_row(
            "SELECT rootpage FROM sqlite_master WHERE name = 'session_message'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    drop(conn);
    assert!(!env.data.join("steward.db-wal").exists());
    let mut bytes = std::fs::read(env.db()).unwrap();
    let at = ((root - 1) * page_size) as usize;
    bytes[at] = 0xff; // no b-tree page has this type
    std::fs::write(env.db(), &bytes).unwrap();
    // Every command that would write refuses it untouched, the one that recovers too.
    let before = snapshot(&env.data);
    for args in [
        &["recover"][..],
        &["sessions"],
        &["run", "--yes", "--dir", &dir, "four"],
    ] {
        let output = env.run(args);
        let err = stderr(&output);
        assert_eq!(code(&output), 3, "{args:?}: {err}");
        assert!(err.contains("PRAGMA quick_check"), "{args:?}: {err}");
        assert_eq!(
            snapshot(&env.data),
            before,
            "{args:?} changed the data directory"
        );
    }
}

/// Runs three prompts in a new session, closed cleanly; returns the session id, the
/// page size and the root page of the transcript's table.
fn three_turns(env: &Env) -> (String, i64, i64) {
    let work = env.root.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let dir = work.display().to_string();
    let first = env.run(&["run", "--json", "--yes", "--dir", &dir, "one"]);
    assert_eq!(code(&first), 0, "{}", stderr(&first));
    let line = stdout(&first);
    let event: serde_json::Value = serde_json::from_str(line.lines().next().unwrap()).unwrap();
    let session = event["session_id"].as_str().unwrap().to_string();
    for prompt in ["two", "three"] {
        let output = env.run(&["run", "--yes", "--session", &session, prompt]);
        assert_eq!(code(&output), 0, "{}", stderr(&output));
    }
    let conn = Connection::open(env.db()).unwrap();
    let page_size: i64 = conn
        .query_row("PRAGMA page_size", [], |r| r.get(0))
        .unwrap();
    let root: i64 = conn
        .query_row(
            "SELECT rootpage FROM sqlite_master WHERE name = 'session_message'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    drop(conn);
    (session, page_size, root)
}

/// Starts `steward acp` and waits until it answers `initialize`: its owner is
/// registered, and has written which database it runs on into its lock file.
fn running_acp(env: &Env) -> std::process::Child {
    use std::io::{BufRead, Write};
    let mut child = env
        .cmd()
        .arg("acp")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    writeln!(
        child.stdin.as_mut().unwrap(),
        r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"protocolVersion":1}}}}"#
    )
    .unwrap();
    let mut answer = String::new();
    std::io::BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut answer)
        .unwrap();
    assert!(answer.contains("\"result\""), "{answer}");
    let owners = env.data.join("owners");
    let recorded = std::fs::read_dir(&owners)
        .unwrap()
        .flatten()
        .any(|e| std::fs::read_to_string(e.path()).is_ok_and(|t| t.starts_with("database ")));
    assert!(recorded, "steward acp did not record its database");
    child
}

/// Makes one page of the file invalid, as a torn write or another program could.
fn damage_page(db: &Path, page_size: i64, page: i64) {
    let mut bytes = std::fs::read(db).unwrap();
    bytes[((page - 1) * page_size) as usize] = 0xff; // no b-tree page has this type
    std::fs::write(db, &bytes).unwrap();
}

#[test]
fn r2_3_a_data_directory_copied_while_steward_ran_is_checked_whole_on_this_machine_too() {
    let env = Env::new();
    let (_, page_size, root) = three_turns(&env);
    let mut acp = running_acp(&env);
    // A copy of the data directory taken while Steward runs, file by file, and
    // restored elsewhere on this machine.
    let restored = Env::new();
    let copy = restored.data.clone();
    std::fs::create_dir_all(copy.join("owners")).unwrap();
    for name in ["steward.db", "steward.db-wal", "steward.db-shm"] {
        std::fs::copy(env.data.join(name), copy.join(name)).unwrap();
    }
    for entry in std::fs::read_dir(env.data.join("owners"))
        .unwrap()
        .flatten()
    {
        std::fs::copy(entry.path(), copy.join("owners").join(entry.file_name())).unwrap();
    }
    signal(acp.id(), "KILL");
    acp.wait().unwrap();
    // The copy was torn mid-write: every command refuses it untouched.
    damage_page(&copy.join("steward.db"), page_size, root);
    // The -shm is SQLite's shared-memory index of the log, not data: a reader of a
    // copy whose index is stale rebuilds it.
    let contents = |dir: &Path| {
        let mut files = snapshot(dir);
        files.remove("steward.db-shm");
        files
    };
    let before = contents(&copy);
    for args in [&["sessions"][..], &["recover"]] {
        let output = restored.run(args);
        let err = stderr(&output);
        assert_eq!(code(&output), 3, "{args:?}: {err}");
        assert!(err.contains("PRAGMA quick_check"), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "not one line: {err}");
        assert_eq!(contents(&copy), before, "{args:?} changed the copy");
    }
    // The original, whose last owner was killed while it ran on it, opens at once.
    let output = env.run(&["sessions"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
}

#[test]
fn r2_3_a_page_damaged_after_a_kill_fails_the_command_that_reads_it_and_doctor_explains_it() {
    let env = Env::new();
    let (session, page_size, root) = three_turns(&env);
    let mut acp = running_acp(&env);
    signal(acp.id(), "KILL");
    acp.wait().unwrap();
    // Another program damages a page while nothing runs.
    damage_page(&env.db(), page_size, root);
    let show = env.run(&["show", &session]);
    let err = stderr(&show);
    assert_eq!(code(&show), 1, "{err}");
    assert!(
        err.contains(&format!(
            "{} is damaged; `steward doctor` says where",
            env.db().display()
        )),
        "{err}"
    );
    let doctor = env.run(&["doctor"]);
    let out = stdout(&doctor);
    assert_eq!(code(&doctor), 3, "{out}{}", stderr(&doctor));
    assert!(out.contains("the file is damaged"), "{out}");
    let doctor = env.run(&["doctor", "--json"]);
    assert_eq!(code(&doctor), 3, "{}", stderr(&doctor));
    let report: serde_json::Value = serde_json::from_str(&stdout(&doctor)).unwrap();
    assert_eq!(report["failed"], "integrity", "{report}");
}

/// A damaged file that opens without its whole-file check (its last owner killed on
/// this very file) is explained by `doctor` and left as it was: the database and its
/// log byte for byte, the log still there for a salvage. A read-write connection's
/// close would have copied the log into the damaged file and removed it, though the
/// refusal says doctor wrote nothing.
#[test]
fn r2_3_doctor_on_a_damaged_file_that_opened_leaves_the_file_and_its_log_untouched() {
    let env = Env::new();
    let (_, page_size, root) = three_turns(&env);
    let mut acp = running_acp(&env);
    signal(acp.id(), "KILL");
    acp.wait().unwrap();
    damage_page(&env.db(), page_size, root);
    let wal = env.data.join("steward.db-wal");
    assert!(
        std::fs::metadata(&wal).is_ok_and(|m| m.len() > 0),
        "the killed process left no log to keep"
    );
    let before = (
        std::fs::read(env.db()).unwrap(),
        std::fs::read(&wal).unwrap(),
    );
    for args in [&["doctor"][..], &["doctor", "--json"]] {
        let doctor = env.run(args);
        assert_eq!(code(&doctor), 3, "{}{}", stdout(&doctor), stderr(&doctor));
        assert!(
            stdout(&doctor).contains("doctor wrote nothing"),
            "{}",
            stdout(&doctor)
        );
        let after = (
            std::fs::read(env.db()).unwrap(),
            std::fs::read(&wal).unwrap_or_default(),
        );
        assert!(
            after == before,
            "doctor {args:?} changed the database or its log"
        );
    }
}

/// A config file named by `--config` or `STEWARD_CONFIG` must exist (a typo must not
/// silently run with defaults); the default location missing means defaults.
#[test]
fn a_named_config_file_must_exist_and_the_default_one_may_be_missing() {
    let env = Env::new();
    let missing = env.root.path().join("nope.toml");
    let output = env
        .cmd()
        .env("STEWARD_CONFIG", &missing)
        .arg("sessions")
        .output()
        .unwrap();
    assert_eq!(code(&output), 1, "{}", stderr(&output));
    assert!(stderr(&output).contains("nope.toml"), "{}", stderr(&output));
    assert!(!env.data.exists(), "a missing config touched the data dir");
    // No config named, none at ~/.config/steward/config.toml (HOME is private).
    assert!(!env.home.join(".config/steward/config.toml").exists());
    let output = env.run(&["sessions"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let help = stdout(&env.run(&["--help"]));
    assert!(
        help.contains("A file named here must exist")
            && help.contains("its absence means defaults"),
        "{help}"
    );
}

/// `steward doctor` only reads: on a data directory that does not exist it says there
/// is nothing to check (exit 1) and creates neither the directory nor a database.
#[test]
fn doctor_on_a_missing_data_directory_creates_nothing() {
    let env = Env::new();
    let output = env.run(&["doctor"]);
    assert_eq!(code(&output), 1, "{}", stderr(&output));
    let out = stdout(&output);
    assert!(out.contains("nothing to check"), "{out}");
    assert!(out.contains(&env.db().display().to_string()), "{out}");
    assert!(!env.data.exists(), "doctor created {}", env.data.display());
    let output = env.run(&["doctor", "--json"]);
    assert_eq!(code(&output), 1);
    let json: serde_json::Value = serde_json::from_str(stdout(&output).trim()).unwrap();
    assert_eq!(json["ok"], false);
    assert!(!env.data.exists());
}

/// `doctor` runs the whole-file check in the same look before opening every command
/// runs, so a file that is no database, or a truncated one, is refused by `doctor` in
/// the very words every other command uses (protocol §2.3).
#[test]
fn r2_3_doctor_refuses_a_file_in_the_words_every_command_uses() {
    let env = Env::new();
    let (_, page_size, _) = three_turns(&env);
    let whole = std::fs::read(env.db()).unwrap();
    let cases: [(&str, Vec<u8>); 2] = [
        ("not a database", b"notes, not a database at all".repeat(8)),
        (
            "truncated",
            whole[..(page_size as usize * 2).min(whole.len() - 1)].to_vec(),
        ),
    ];
    for (what, bytes) in cases {
        std::fs::write(env.db(), &bytes).unwrap();
        let sessions = env.run(&["sessions"]);
        assert_eq!(code(&sessions), 3, "{what}: {}", stderr(&sessions));
        let doctor = env.run(&["doctor", "--json"]);
        assert_eq!(code(&doctor), 3, "{what}: {}", stderr(&doctor));
        let report: serde_json::Value = serde_json::from_str(&stdout(&doctor)).unwrap();
        let refusal = report["refusal"].as_str().unwrap();
        assert!(
            stderr(&sessions).contains(refusal),
            "{what}: doctor says {refusal:?}, sessions says {}",
            stderr(&sessions)
        );
        assert_eq!(std::fs::read(env.db()).unwrap(), bytes, "{what}: changed");
    }
}
