//! Frames of the terminal interface, drawn from the real read models into a
//! 120×40 test backend: the Claims tab of a file with 100,000 claims (its page query
//! included), and a 2,000-message transcript (the page the screen loads, and all
//! of it). Medians of interleaved rounds, against a target of 5 ms and a bar of
//! 16 ms (one frame at 60 Hz). `cargo bench -p steward-tui --bench frame`.

#![allow(clippy::print_stdout, clippy::print_stderr)]

#[path = "../../engine/benches/support/history.rs"]
mod history;
#[path = "../../engine/benches/support/table.rs"]
mod table;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ratatui::Terminal;
use ratatui::backend::TestBackend;
use rusqlite::params;
use steward_engine::clock::{Clock, ManualClock, SystemClock};
use steward_engine::inspect::Reader;
use steward_engine::inspect::pages::{ClaimOrder, PageRequest};
use steward_engine::store::{self, Store};
use steward_tui::app::{App, Extent, Mode, Msg, Screen, Tab, View};
use steward_tui::theme::Theme;
use steward_tui::update::update;

const ROUNDS: usize = 41;
const CLAIMS: usize = 100_000;

/// A data directory with `CLAIMS` claims of a dead owner (cached).
fn claims_dir(target: &Path) -> PathBuf {
    let dir = target.join("bench-history").join("claims-100k-v1");
    let database = dir.join("steward.db");
    if database.exists() {
        return dir;
    }
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let partial = dir.join("steward.db.building");
    let clock = ManualClock::new(1_780_000_000_000);
    let mut store = Store::open(&partial, &clock).unwrap();
    store::write(store.conn_mut(), |tx| {
        let mut session =
            tx.prepare("INSERT INTO session (id, title, directory, time_created, time_updated) VALUES (?1, 'a session', '/home/user/project', ?2, ?2)")?;
        let mut claim = tx.prepare(
            "INSERT INTO session_execution (id, session_id, owner_id, epoch, phase, assistant_seq, time_created, expires_at)
             VALUES (?1, ?2, 'own_01gone', 0, 'ready', -1, ?3, ?3 + 30000)",
        )?;
        for i in 0..CLAIMS {
            let t = 1_780_000_000_000 + i as i64;
            let s = format!("ses_01{i:030x}");
            session.execute(params![s, t])?;
            claim.execute(params![format!("exe_01{i:030x}"), s, t])?;
        }
        Ok(())
    })
    .unwrap();
    store
        .conn()
        .execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
        .unwrap();
    drop(store);
    std::fs::rename(&partial, &database).unwrap();
    dir
}

/// One frame: the load the screen asks for, then the draw.
fn frame(
    reader: &mut Reader,
    app: &mut App,
    view: &View,
    terminal: &mut Terminal<TestBackend>,
) -> Duration {
    let start = Instant::now();
    let loaded = steward_tui::loader::load(reader, app.now_ms, view);
    update(app, Msg::Loaded(Box::new(loaded)));
    terminal.draw(|f| steward_tui::view::view(app, f)).unwrap();
    start.elapsed()
}

fn median(mut v: Vec<Duration>) -> f64 {
    v.sort();
    v[v.len() / 2].as_secs_f64() * 1e3
}

fn main() {
    let target = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target");
    eprintln!("building the bench files (once; cached under target/bench-history)…");
    let claims = claims_dir(&target);
    let history = history::data_dir(
        &target,
        history::Spec {
            name: "large",
            sessions: 9_999,
            turns: 9,
            long_messages: 2_000,
        },
    );
    let now = SystemClock::new().now_ms();
    let theme = Theme { color: true };

    // The Claims tab, first page, on 100,000 claims.
    let mut claims_reader =
        Reader::open(&claims.join("steward.db"), &claims.join("owners")).unwrap();
    let mut claims_app = App::new(Mode::ReadOnly, "bench".into(), "/".into(), theme, now);
    claims_app.screen = Screen::Inspector;
    claims_app.size = (120, 40);
    let claims_view = View {
        sessions: None,
        archived: false,
        transcript: None,
        table: Some((Tab::Claims, ClaimOrder::Created, PageRequest::first(100))),
        owner_id: None,
    };

    // The long session's transcript: the page the screen loads, and all of it.
    let mut history_reader =
        Reader::open(&history.database, &history.data_dir.join("owners")).unwrap();
    let transcript_app = || {
        let mut app = App::new(Mode::Chat, "bench".into(), "/".into(), theme, now);
        app.size = (120, 40);
        app.transcript.session = Some(steward_engine::projection::SessionRow {
            id: history.long_session.clone(),
            title: String::new(),
            directory: String::new(),
            time_created: 0,
            time_updated: 0,
            archived: false,
        });
        app
    };
    let (mut page_app, mut all_app) = (transcript_app(), transcript_app());
    // As after scrolling up through all of it.
    all_app.transcript.loaded = 2_000;
    let view_of = |extent: Extent| View {
        sessions: None,
        archived: false,
        transcript: Some((history.long_session.clone(), extent)),
        table: None,
        owner_id: None,
    };
    let (page_view, all_view) = (view_of(Extent::Newest(200)), view_of(Extent::Newest(2_000)));

    let mut terminal = Terminal::new(TestBackend::new(120, 40)).unwrap();
    let (mut c, mut p, mut a) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        c.push(frame(
            &mut claims_reader,
            &mut claims_app,
            &claims_view,
            &mut terminal,
        ));
        p.push(frame(
            &mut history_reader,
            &mut page_app,
            &page_view,
            &mut terminal,
        ));
        a.push(frame(
            &mut history_reader,
            &mut all_app,
            &all_view,
            &mut terminal,
        ));
    }
    assert_eq!(
        claims_app.inspector.rows.len(),
        100,
        "the claims page did not load"
    );
    assert_eq!(
        all_app.transcript.messages.len(),
        2_000,
        "the transcript did not load"
    );
    println!("frames at 120×40, medians of {ROUNDS} interleaved rounds (load + draw)");
    for (what, ms) in [
        ("Claims tab, 100,000 claims", median(c)),
        ("2,000-message transcript, page shown", median(p)),
        ("2,000-message transcript, all loaded", median(a)),
    ] {
        println!("{what:<40} {ms:>8.2} ms   (target 5, bar 16)");
        table::row(
            "terminal interface",
            &format!("frame: {what}"),
            ms,
            "ms",
            None,
            table::Limit::Below {
                target: 5.0,
                bar: 16.0,
            },
        );
    }
}
