use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::*;
use crate::config::ToolsConfig;
use crate::tools::StopSignals;
use pretty_assertions::assert_eq;

async fn call(tool: &dyn Tool, ctx: &ToolContext, input: Value) -> ToolOutput {
    match tool.prepare(ctx, &input).await {
        Ok(prepared) => prepared.run(StopSignals::default()).await,
        Err(e) => ToolOutput::Failed(e),
    }
}

fn ctx_in(dir: &Path) -> ToolContext {
    ToolContext {
        directory: dir.to_path_buf(),
        config: ToolsConfig::default(),
        data_dir: None,
        approved: None,
        shown: None,
        client: None,
    }
}

/// What a call would touch that is asked about every time: its path and why.
fn guarded(
    tool: &dyn Tool,
    ctx: &ToolContext,
    input: Value,
) -> Option<(PathBuf, crate::tools::Guard)> {
    tool.assess(ctx, &input)
        .unwrap()
        .guarded
        .map(|g| (g.path, g.guard))
}

fn outside(path: PathBuf) -> Option<(PathBuf, crate::tools::Guard)> {
    Some((path, crate::tools::Guard::Outside))
}

/// What the user approves when they allow `path` as they were shown it.
fn approval(ctx: &ToolContext, path: &str) -> Option<crate::tools::Guarded> {
    ctx.locate(path).unwrap().guarded()
}

fn failure(output: ToolOutput) -> String {
    match output {
        ToolOutput::Failed(message) => message,
        other => panic!("expected a failure, got {other:?}"),
    }
}

fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success());
}

#[tokio::test]
async fn files_are_written_read_and_listed_relative_to_the_session() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = ctx_in(dir.path());
    let wrote = call(
        &WriteFile,
        &ctx,
        json!({"path": "sub/a.txt", "content": "hello"}),
    )
    .await;
    assert!(matches!(wrote, ToolOutput::Completed { .. }), "{wrote:?}");
    let read = call(&ReadFile, &ctx, json!({"path": "sub/a.txt"})).await;
    assert_eq!(
        read,
        ToolOutput::Completed {
            output: "hello".into(),
            structured: Some(json!({"bytes": 5, "truncated": false})),
        }
    );
    let listed = call(&ListDir, &ctx, json!({"path": "."})).await;
    assert_eq!(
        listed,
        ToolOutput::Completed {
            output: "sub/".into(),
            structured: Some(json!({"entries": 1, "capped": false, "truncated": false})),
        }
    );
    let missing = failure(call(&ReadFile, &ctx, json!({"path": "nope"})).await);
    assert!(missing.contains("cannot read"), "{missing}");
    let bad = failure(call(&ReadFile, &ctx, json!({"file": "x"})).await);
    assert_eq!(bad, "invalid arguments: `path` (a string) is required");
}

#[tokio::test]
async fn a_fifo_is_refused_at_once_instead_of_blocking_for_ever() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = ctx_in(dir.path());
    mkfifo(&dir.path().join("pipe"));
    let started = Instant::now();
    let read = failure(call(&ReadFile, &ctx, json!({"path": "pipe"})).await);
    assert!(
        read.contains("a FIFO (named pipe), not a regular file"),
        "{read}"
    );
    let wrote = failure(call(&WriteFile, &ctx, json!({"path": "pipe", "content": "x"})).await);
    assert!(
        wrote.contains("a FIFO (named pipe), not a regular file"),
        "{wrote}"
    );
    let listed = failure(call(&ListDir, &ctx, json!({"path": "pipe"})).await);
    assert!(listed.contains("not a directory"), "{listed}");
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn devices_are_refused_so_dev_zero_never_fills_memory() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = ToolContext {
        approved: approval(&ctx_in(dir.path()), "/dev/zero"),
        ..ctx_in(dir.path())
    };
    let read = failure(call(&ReadFile, &ctx, json!({"path": "/dev/zero"})).await);
    assert!(
        read.contains("a character device, not a regular file"),
        "{read}"
    );
}

#[tokio::test]
async fn a_large_file_is_read_only_up_to_the_output_limit() {
    let dir = tempfile::tempdir().unwrap();
    let mut ctx = ctx_in(dir.path());
    ctx.config.output_limit_bytes = 1_000;
    std::fs::write(dir.path().join("big.txt"), "x".repeat(5_000_000)).unwrap();
    let ToolOutput::Completed { output, structured } =
        call(&ReadFile, &ctx, json!({"path": "big.txt"})).await
    else {
        panic!("read failed")
    };
    assert_eq!(output, format!("{}\n[output truncated]", "x".repeat(1_000)));
    assert_eq!(
        structured,
        Some(json!({"bytes": 5_000_000, "truncated": true}))
    );
}

#[tokio::test]
async fn list_dir_stops_after_its_entry_cap() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = ctx_in(dir.path());
    for i in 0..MAX_ENTRIES + 5 {
        std::fs::write(dir.path().join(format!("f{i:05}")), b"").unwrap();
    }
    let ToolOutput::Completed { output, structured } =
        call(&ListDir, &ctx, json!({"path": "."})).await
    else {
        panic!("list failed")
    };
    assert_eq!(
        structured,
        Some(json!({"entries": MAX_ENTRIES, "capped": true, "truncated": false}))
    );
    assert!(output.ends_with("the directory has more]"), "{output}");
}

#[test]
fn paths_outside_the_session_directory_are_assessed_after_symlinks() {
    let root = tempfile::tempdir().unwrap();
    let session = root.path().join("work");
    std::fs::create_dir_all(session.join("sub")).unwrap();
    let secret = root.path().join("secret.txt");
    std::fs::write(&secret, "s").unwrap();
    std::os::unix::fs::symlink(&secret, session.join("link")).unwrap();
    std::os::unix::fs::symlink(root.path(), session.join("up")).unwrap();
    let ctx = ctx_in(&session);
    let secret = std::fs::canonicalize(&secret).unwrap();
    let assessed = |path: &str| guarded(&ReadFile, &ctx, json!({"path": path}));
    assert_eq!(assessed("sub"), None);
    assert_eq!(assessed("new/file.txt"), None);
    assert_eq!(assessed(secret.to_str().unwrap()), outside(secret.clone()));
    assert_eq!(assessed("../secret.txt"), outside(secret.clone()));
    assert_eq!(assessed("link"), outside(secret.clone()));
    assert_eq!(assessed("up/secret.txt"), outside(secret.clone()));
    assert_eq!(
        assessed("up/new.txt"),
        outside(std::fs::canonicalize(root.path()).unwrap().join("new.txt"))
    );
    let climbing = WriteFile
        .assess(&ctx, &json!({"path": "missing/../../x", "content": ""}))
        .unwrap_err();
    assert!(
        climbing.contains("cannot resolve") || climbing.contains("climbs"),
        "{climbing}"
    );
}

#[tokio::test]
async fn r4_13_a_write_through_a_dangling_link_is_judged_by_where_it_lands() {
    let root = tempfile::tempdir().unwrap();
    let session = root.path().join("work");
    std::fs::create_dir_all(&session).unwrap();
    let target = root.path().join("outside-created");
    std::os::unix::fs::symlink(&target, session.join("dangling")).unwrap();
    std::os::unix::fs::symlink(root.path().join("gone/dir"), session.join("dir-link")).unwrap();
    let ctx = ctx_in(&session);
    let dangling = guarded(
        &WriteFile,
        &ctx,
        json!({"path": "dangling", "content": "x"}),
    );
    let real_root = std::fs::canonicalize(root.path()).unwrap();
    assert_eq!(dangling, outside(real_root.join("outside-created")));
    let through_dir = guarded(
        &WriteFile,
        &ctx,
        json!({"path": "dir-link/new.txt", "content": "x"}),
    );
    assert_eq!(through_dir, outside(real_root.join("gone/dir/new.txt")));
    let denied = failure(
        call(
            &WriteFile,
            &ctx,
            json!({"path": "dangling", "content": "pwned"}),
        )
        .await,
    );
    assert!(denied.contains("outside the session directory"), "{denied}");
    assert!(!target.exists());
}

#[test]
fn a_session_directory_of_root_is_no_boundary() {
    let ctx = ToolContext {
        directory: "/".into(),
        ..ctx_in(Path::new("/"))
    };
    let located = ctx.locate("/etc/hostname").unwrap();
    assert_eq!(located.guard, Some(crate::tools::Guard::Outside));
}

#[tokio::test]
async fn a_run_never_reaches_outside_without_permission() {
    let root = tempfile::tempdir().unwrap();
    let session = root.path().join("work");
    std::fs::create_dir_all(&session).unwrap();
    std::fs::write(root.path().join("secret.txt"), "s").unwrap();
    std::os::unix::fs::symlink(root.path().join("secret.txt"), session.join("link")).unwrap();
    let ctx = ctx_in(&session);
    let denied = failure(call(&ReadFile, &ctx, json!({"path": "link"})).await);
    assert!(denied.contains("outside the session directory"), "{denied}");
    let denied = failure(
        call(
            &WriteFile,
            &ctx,
            json!({"path": "../new.txt", "content": "x"}),
        )
        .await,
    );
    assert!(denied.contains("outside the session directory"), "{denied}");
    assert!(!root.path().join("new.txt").exists());
    let allowed = ToolContext {
        approved: approval(&ctx, "link"),
        ..ctx
    };
    let read = call(&ReadFile, &allowed, json!({"path": "link"})).await;
    assert!(
        matches!(read, ToolOutput::Completed { ref output, .. } if output == "s"),
        "{read:?}"
    );
}

#[tokio::test]
async fn r2_8_file_tools_never_open_the_database_this_process_uses() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("steward.db");
    let clock = crate::clock::ManualClock::new(1_000);
    let store = crate::store::Store::open(&db, &clock).unwrap();
    store
        .conn()
        .query_row("SELECT count(*) FROM session", [], |r| r.get::<_, i64>(0))
        .unwrap();
    // Only looked at by `stat`: this test must not open the file either.
    let before = std::fs::metadata(&db).unwrap().len();
    let held = crate::store::pinned::tests::own_posix_locks(&db);
    assert!(held > 0);
    let ctx = ctx_in(dir.path());
    for name in ["steward.db", "steward.db-wal", "steward.db-shm"] {
        let read = failure(call(&ReadFile, &ctx, json!({"path": name})).await);
        assert!(read.contains("the database Steward is using"), "{read}");
        let wrote = failure(call(&WriteFile, &ctx, json!({"path": name, "content": "x"})).await);
        assert!(wrote.contains("the database Steward is using"), "{wrote}");
    }
    // Through a link too: the file is judged by what it is, not by its name.
    std::os::unix::fs::symlink(&db, dir.path().join("link")).unwrap();
    let read = failure(call(&ReadFile, &ctx, json!({"path": "link"})).await);
    assert!(read.contains("the database Steward is using"), "{read}");
    assert_eq!(std::fs::metadata(&db).unwrap().len(), before);
    assert_eq!(crate::store::pinned::tests::own_posix_locks(&db), held);
    drop(store);
}

#[tokio::test]
async fn r4_13_an_approval_is_bound_to_the_path_the_user_was_shown() {
    let root = tempfile::tempdir().unwrap();
    let work = root.path().join("work");
    let outside = root.path().join("outside");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("approved.txt"), "old").unwrap();
    std::fs::write(outside.join("secret.txt"), "secret").unwrap();
    std::os::unix::fs::symlink(outside.join("approved.txt"), work.join("link.txt")).unwrap();
    let ctx = ctx_in(&work);
    let input = json!({"path": "link.txt", "content": "new"});
    let asked = WriteFile.assess(&ctx, &input).unwrap().guarded.unwrap();
    let approved_path = std::fs::canonicalize(outside.join("approved.txt")).unwrap();
    assert_eq!(asked.path, approved_path);
    // The user allows what they were shown; the link is re-pointed before the run.
    let allowed = ToolContext {
        approved: Some(asked),
        ..ctx
    };
    std::fs::remove_file(work.join("link.txt")).unwrap();
    std::os::unix::fs::symlink(outside.join("secret.txt"), work.join("link.txt")).unwrap();
    let refused = failure(call(&WriteFile, &allowed, input.clone()).await);
    assert!(refused.contains("which was allowed: refused"), "{refused}");
    assert_eq!(
        std::fs::read_to_string(outside.join("secret.txt")).unwrap(),
        "secret"
    );
    let read = failure(call(&ReadFile, &allowed, json!({"path": "link.txt"})).await);
    assert!(read.contains("which was allowed: refused"), "{read}");
    // Pointing where it did, the approved write runs.
    std::fs::remove_file(work.join("link.txt")).unwrap();
    std::os::unix::fs::symlink(outside.join("approved.txt"), work.join("link.txt")).unwrap();
    let wrote = call(&WriteFile, &allowed, input).await;
    assert!(matches!(wrote, ToolOutput::Completed { .. }), "{wrote:?}");
    assert_eq!(
        std::fs::read_to_string(outside.join("approved.txt")).unwrap(),
        "new"
    );
}

#[tokio::test]
async fn r4_13_a_file_with_other_hard_links_is_never_read_or_truncated_unasked() {
    let root = tempfile::tempdir().unwrap();
    let work = root.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(root.path().join("outside.txt"), "keep me").unwrap();
    std::fs::hard_link(root.path().join("outside.txt"), work.join("inside.txt")).unwrap();
    let ctx = ctx_in(&work);
    let read = failure(call(&ReadFile, &ctx, json!({"path": "inside.txt"})).await);
    assert!(read.contains("other hard links"), "{read}");
    let wrote = failure(
        call(
            &WriteFile,
            &ctx,
            json!({"path": "inside.txt", "content": "x"}),
        )
        .await,
    );
    assert!(wrote.contains("other hard links"), "{wrote}");
    assert_eq!(
        std::fs::read_to_string(root.path().join("outside.txt")).unwrap(),
        "keep me"
    );
}

#[tokio::test]
async fn r4_13_an_approval_is_refused_when_the_link_now_lands_inside_the_session() {
    let root = tempfile::tempdir().unwrap();
    let work = root.path().join("work");
    std::fs::create_dir_all(work.join("sub")).unwrap();
    std::fs::create_dir_all(root.path().join("outside")).unwrap();
    std::fs::write(root.path().join("outside/o.txt"), "OUT").unwrap();
    std::fs::write(work.join("sub/o.txt"), "IN").unwrap();
    std::os::unix::fs::symlink("../outside", work.join("lnk")).unwrap();
    let ctx = ctx_in(&work);
    let allowed = ToolContext {
        approved: approval(&ctx, "lnk/o.txt"),
        ..ctx
    };
    // Re-pointed into the session after the question: not what was allowed.
    std::fs::remove_file(work.join("lnk")).unwrap();
    std::os::unix::fs::symlink("sub", work.join("lnk")).unwrap();
    let read = failure(call(&ReadFile, &allowed, json!({"path": "lnk/o.txt"})).await);
    assert!(read.contains("which was allowed: refused"), "{read}");
    let wrote = failure(
        call(
            &WriteFile,
            &allowed,
            json!({"path": "lnk/o.txt", "content": "x"}),
        )
        .await,
    );
    assert!(wrote.contains("which was allowed: refused"), "{wrote}");
    assert_eq!(
        std::fs::read_to_string(work.join("sub/o.txt")).unwrap(),
        "IN"
    );
}

#[tokio::test]
async fn r4_13_an_approved_file_replaced_since_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let work = root.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(root.path().join("notes.txt"), "notes").unwrap();
    std::fs::write(root.path().join("key"), "KEY").unwrap();
    let ctx = ctx_in(&work);
    let target = root.path().join("notes.txt");
    let allowed = ToolContext {
        approved: approval(&ctx, target.to_str().unwrap()),
        ..ctx
    };
    // The same path now names another file: a hard link to the key.
    std::fs::remove_file(&target).unwrap();
    std::fs::hard_link(root.path().join("key"), &target).unwrap();
    let read = failure(
        call(
            &ReadFile,
            &allowed,
            json!({"path": target.to_str().unwrap()}),
        )
        .await,
    );
    assert!(
        read.contains("no longer the file that was allowed"),
        "{read}"
    );
}

#[tokio::test]
async fn r4_13_an_approved_path_with_no_file_yet_never_takes_one_that_appeared_since() {
    let root = tempfile::tempdir().unwrap();
    let work = root.path().join("work");
    let out = root.path().join("out");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(root.path().join("key"), "KEY").unwrap();
    let ctx = ctx_in(&work);
    for tool in ["write", "read"] {
        let target = out.join(format!("new-{tool}.txt"));
        let asked = approval(&ctx, target.to_str().unwrap()).unwrap();
        assert_eq!(asked.file, None, "nothing there when asked");
        let allowed = ToolContext {
            approved: Some(asked),
            ..ctx.clone()
        };
        // While the question is open, a hard link to the key appears there.
        std::fs::hard_link(root.path().join("key"), &target).unwrap();
        let input = json!({"path": target.to_str().unwrap(), "content": "PWNED"});
        let refused = if tool == "write" {
            failure(call(&WriteFile, &allowed, input).await)
        } else {
            failure(call(&ReadFile, &allowed, input).await)
        };
        assert!(refused.contains("created since"), "{tool}: {refused}");
        assert!(!refused.contains("KEY"), "{tool}: {refused}");
        assert_eq!(
            std::fs::read_to_string(root.path().join("key")).unwrap(),
            "KEY"
        );
    }
    // Planted after the run's check, the file is still not opened: a fresh path is
    // created, never opened.
    let target = out.join("late.txt");
    let allowed = ToolContext {
        approved: approval(&ctx, target.to_str().unwrap()),
        ..ctx.clone()
    };
    let located = crate::tools::reach::located_for_run(&allowed, target.to_str().unwrap()).unwrap();
    std::fs::hard_link(root.path().join("key"), &target).unwrap();
    let (dir, name) = crate::tools::reach::open_parent(&allowed, &located, true).unwrap();
    let opened = dir.open_with(
        &name,
        cap_std::fs::OpenOptions::new().write(true).create_new(true),
    );
    assert!(opened.is_err(), "the planted link was opened");
    // With nothing planted, the approved new file is written.
    std::fs::remove_file(&target).unwrap();
    let wrote = call(
        &WriteFile,
        &allowed,
        json!({"path": target.to_str().unwrap(), "content": "fine"}),
    )
    .await;
    assert!(matches!(wrote, ToolOutput::Completed { .. }), "{wrote:?}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "fine");
}

#[tokio::test]
async fn a_path_ending_in_a_slash_is_not_taken_for_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = ctx_in(dir.path());
    let wrote = failure(call(&WriteFile, &ctx, json!({"path": "newdir/", "content": "x"})).await);
    assert!(wrote.contains("names a directory"), "{wrote}");
    assert!(!dir.path().join("newdir").exists());
    std::fs::write(dir.path().join("a.txt"), "a").unwrap();
    let read = failure(call(&ReadFile, &ctx, json!({"path": "a.txt/"})).await);
    assert!(read.contains("names a directory"), "{read}");
    let nul = failure(call(&ReadFile, &ctx, json!({"path": "a\0b"})).await);
    assert!(nul.contains("NUL"), "{nul}");
    let climbs = failure(call(&ReadFile, &ctx, json!({"path": "missing/../a.txt"})).await);
    assert!(climbs.contains("climbs with `..`"), "{climbs}");
}

#[test]
fn r2_7_what_a_tool_hands_back_never_carries_the_provider_key() {
    // Any variable's value stands in for the key here: PATH is always set.
    let value = std::env::var("PATH").unwrap();
    let read = format!("PATH={value}\nHOME=/x\n");
    let scrubbed = crate::tools::scrub_secrets(read, &["PATH".to_string()]);
    assert_eq!(scrubbed, "PATH=<redacted>\nHOME=/x\n");
}

#[tokio::test]
async fn r4_19_an_approved_write_finds_the_file_as_the_question_showed_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("notes.txt");
    std::fs::write(&file, "as shown\n").unwrap();
    let asked = WriteFile
        .assess(
            &ctx_in(dir.path()),
            &json!({"path": "notes.txt", "content": "new\n"}),
        )
        .unwrap();
    let shown = asked.diff.unwrap().basis;
    let ctx = ToolContext {
        shown: shown.clone(),
        ..ctx_in(dir.path())
    };
    // Changed after the question: refused, untouched.
    std::fs::write(&file, "precious work\n").unwrap();
    let refused = failure(
        call(
            &WriteFile,
            &ctx,
            json!({"path": "notes.txt", "content": "new\n"}),
        )
        .await,
    );
    assert!(
        refused.contains("changed after the permission question"),
        "{refused}"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "precious work\n");
    // As shown: written.
    std::fs::write(&file, "as shown\n").unwrap();
    let written = call(
        &WriteFile,
        &ctx,
        json!({"path": "notes.txt", "content": "new\n"}),
    )
    .await;
    assert!(
        matches!(written, ToolOutput::Completed { .. }),
        "{written:?}"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "new\n");
    // A question that showed no file binds to no file.
    let ctx = ToolContext {
        shown: Some(crate::tools::Basis::Absent),
        ..ctx_in(dir.path())
    };
    let refused = failure(
        call(
            &WriteFile,
            &ctx,
            json!({"path": "notes.txt", "content": "other\n"}),
        )
        .await,
    );
    assert!(
        refused.contains("changed after the permission question"),
        "{refused}"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "new\n");
}

#[tokio::test]
async fn r4_19_a_write_replaces_the_file_whole_keeping_its_permissions() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("run.sh");
    std::fs::write(&file, "#!/bin/sh\necho old\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o750)).unwrap();
    let before = std::fs::metadata(&file).unwrap().ino();
    let written = call(
        &WriteFile,
        &ctx_in(dir.path()),
        json!({"path": "run.sh", "content": "#!/bin/sh\necho new\n"}),
    )
    .await;
    assert!(
        matches!(written, ToolOutput::Completed { .. }),
        "{written:?}"
    );
    let meta = std::fs::metadata(&file).unwrap();
    assert_ne!(
        meta.ino(),
        before,
        "a new file was put in place, not the old one cut"
    );
    assert_eq!(meta.permissions().mode() & 0o7777, 0o750);
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "#!/bin/sh\necho new\n"
    );
    // Nothing is left beside it.
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["run.sh"]);
    // A file the user may not write is refused, as it was.
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o440)).unwrap();
    if is_root() {
        return;
    }
    let refused = failure(
        call(
            &WriteFile,
            &ctx_in(dir.path()),
            json!({"path": "run.sh", "content": "x"}),
        )
        .await,
    );
    assert!(refused.contains("Permission denied"), "{refused}");
}

#[allow(unsafe_code)]
fn is_root() -> bool {
    // SAFETY: plain syscall with no arguments.
    unsafe { libc::geteuid() == 0 }
}

#[tokio::test]
async fn r4_19_an_allowed_file_with_other_hard_links_is_written_in_place_for_all_its_names() {
    let root = tempfile::tempdir().unwrap();
    let work = root.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(work.join("a.txt"), "old\n").unwrap();
    std::fs::hard_link(work.join("a.txt"), root.path().join("other.txt")).unwrap();
    let ctx = ctx_in(&work);
    let allowed = ToolContext {
        approved: approval(&ctx, "a.txt"),
        ..ctx_in(&work)
    };
    let written = call(
        &WriteFile,
        &allowed,
        json!({"path": "a.txt", "content": "new\n"}),
    )
    .await;
    assert!(
        matches!(written, ToolOutput::Completed { .. }),
        "{written:?}"
    );
    // The user allowed a file that is reached from elsewhere too: every name sees it.
    assert_eq!(
        std::fs::read_to_string(root.path().join("other.txt")).unwrap(),
        "new\n"
    );
    assert_eq!(std::fs::metadata(work.join("a.txt")).unwrap().nlink(), 2);
}

#[tokio::test]
#[allow(unsafe_code)]
async fn r4_19_a_file_with_extended_attributes_keeps_them_written_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tagged.txt");
    std::fs::write(&file, "old\n").unwrap();
    let path = std::ffi::CString::new(file.to_str().unwrap()).unwrap();
    // SAFETY: NUL-terminated strings and a buffer with its length.
    let set = unsafe {
        libc::setxattr(
            path.as_ptr(),
            c"user.tag".as_ptr(),
            b"kept".as_ptr().cast(),
            4,
            0,
        )
    };
    if set != 0 {
        // This file system takes no user attributes: nothing to keep.
        return;
    }
    let before = std::fs::metadata(&file).unwrap().ino();
    let written = call(
        &WriteFile,
        &ctx_in(dir.path()),
        json!({"path": "tagged.txt", "content": "new\n"}),
    )
    .await;
    assert!(
        matches!(written, ToolOutput::Completed { .. }),
        "{written:?}"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "new\n");
    assert_eq!(
        std::fs::metadata(&file).unwrap().ino(),
        before,
        "written in place"
    );
    let mut value = [0u8; 16];
    // SAFETY: as above.
    let got = unsafe {
        libc::getxattr(
            path.as_ptr(),
            c"user.tag".as_ptr(),
            value.as_mut_ptr().cast(),
            value.len(),
        )
    };
    assert_eq!(&value[..got.max(0) as usize], b"kept");
}

#[test]
fn r4_20_a_prompt_s_linked_file_is_read_inside_the_session_and_refused_where_read_file_asks() {
    let root = tempfile::tempdir().unwrap();
    let work = root.path().join("my work");
    std::fs::create_dir_all(&work).unwrap();
    let work = work.canonicalize().unwrap();
    std::fs::write(work.join("a b.txt"), "inside\n").unwrap();
    std::fs::write(root.path().join("outside.txt"), "outside\n").unwrap();
    std::fs::write(
        work.join("big.txt"),
        vec![b'x'; MAX_LINKED_BYTES as usize + 1],
    )
    .unwrap();
    std::fs::write(work.join("bin"), [0xff, 0xfe, 0x00]).unwrap();
    let ctx = ctx_in(&work);
    let uri = |p: &Path| format!("file://{}", p.display()).replace(' ', "%20");
    assert_eq!(
        linked_text(&ctx, &uri(&work.join("a b.txt")), MAX_LINKED_BYTES).unwrap(),
        "inside\n"
    );
    let outside = linked_text(
        &ctx,
        &uri(&root.path().join("outside.txt")),
        MAX_LINKED_BYTES,
    )
    .unwrap_err();
    assert!(
        outside.contains("outside the session directory"),
        "{outside}"
    );
    let missing = linked_text(&ctx, &uri(&work.join("gone.txt")), MAX_LINKED_BYTES).unwrap_err();
    assert!(missing.contains("does not exist"), "{missing}");
    let big = linked_text(&ctx, &uri(&work.join("big.txt")), MAX_LINKED_BYTES).unwrap_err();
    assert!(big.contains("more than the 262144"), "{big}");
    let binary = linked_text(&ctx, &uri(&work.join("bin")), MAX_LINKED_BYTES).unwrap_err();
    assert!(binary.contains("not UTF-8"), "{binary}");
    let other = linked_text(&ctx, "https://example.com/a.txt", MAX_LINKED_BYTES).unwrap_err();
    assert!(other.contains("not a file:// URI"), "{other}");
}

#[test]
fn r4_20_a_linked_file_s_uri_may_carry_a_fragment_or_query_and_any_case_of_scheme() {
    let work = tempfile::tempdir().unwrap();
    let work = work.path().canonicalize().unwrap();
    std::fs::write(work.join("a.txt"), "one\ntwo\n").unwrap();
    let ctx = ctx_in(&work);
    let path = work.join("a.txt").display().to_string();
    for uri in [
        format!("file://{path}#L1:2"),
        format!("file://{path}?x=1"),
        format!("file://{path}?x=1#top"),
        format!("FILE://{path}"),
        format!("File://LOCALHOST{path}"),
    ] {
        assert_eq!(
            linked_text(&ctx, &uri, MAX_LINKED_BYTES).as_deref(),
            Ok("one\ntwo\n"),
            "{uri}"
        );
    }
}

#[test]
fn r4_20_a_linked_file_has_the_hidden_values_redacted_as_read_file_has() {
    let work = tempfile::tempdir().unwrap();
    let work = work.path().canonicalize().unwrap();
    // A variable of this process stands for the provider's key.
    let (name, value) = ("PATH".to_string(), std::env::var("PATH").unwrap());
    std::fs::write(work.join(".env"), format!("key={value}\n")).unwrap();
    let mut ctx = ctx_in(&work);
    ctx.config.hidden_env = vec![name];
    let uri = format!("file://{}", work.join(".env").display());
    let text = linked_text(&ctx, &uri, MAX_LINKED_BYTES).unwrap();
    assert_eq!(text, "key=<redacted>\n");
}

#[test]
fn r4_20_a_linked_file_larger_than_the_room_left_is_refused_and_a_read_never_passes_its_limit() {
    let work = tempfile::tempdir().unwrap();
    let work = work.path().canonicalize().unwrap();
    std::fs::write(work.join("a.txt"), "0123456789").unwrap();
    let ctx = ctx_in(&work);
    let uri = format!("file://{}", work.join("a.txt").display());
    assert_eq!(linked_text(&ctx, &uri, 10).as_deref(), Ok("0123456789"));
    let refused = linked_text(&ctx, &uri, 9).unwrap_err();
    assert!(
        refused.contains("more than the 9 left of the 262144"),
        "{refused}"
    );
    // Whatever the size said, no more than the limit and one byte is read.
    let file = File::open(work.join("a.txt")).unwrap();
    assert!(matches!(
        text_of(file, &work.join("a.txt"), 4),
        Err(TextError::Larger)
    ));
    let file = File::open(work.join("a.txt")).unwrap();
    assert!(matches!(text_of(file, &work.join("a.txt"), 10), Ok(t) if t == "0123456789"));
}

#[test]
fn r4_19_the_directory_of_a_replaced_file_can_be_synced() {
    // cap-std walks by `O_PATH` handles, which fsync refuses (EBADF): the sync
    // after a replace opens the directory for reading.
    let tmp = tempfile::tempdir().unwrap();
    let dir = cap_std::fs::Dir::open_ambient_dir(tmp.path(), cap_std::ambient_authority()).unwrap();
    assert!(
        dir.try_clone().unwrap().into_std_file().sync_all().is_err(),
        "the walking handle syncs after all; the reopening is not needed"
    );
    sync_dir(&dir).unwrap();
}
