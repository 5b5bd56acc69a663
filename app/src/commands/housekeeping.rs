//! `steward rename ID TITLE`, `steward archive ID [--undo]`, `steward delete ID`:
//! session housekeeping (protocol §3.6). Each is refused, with the reason and
//! nothing changed, while the session runs or holds a claim, a pending wake or a
//! quarantined row; the refusal is decided in the transaction that makes the change.
//! Never recovers or runs anything.

use std::process::ExitCode;

use anyhow::Result;
use steward_engine::housekeeping;
use steward_engine::store::Store;

use crate::output::out;

pub fn rename(mut store: Store, now_ms: i64, session: &str, title: &str) -> Result<ExitCode> {
    store.write(|tx| housekeeping::rename(tx, session, title, now_ms))?;
    out!("renamed {session}: {}", title.trim());
    Ok(ExitCode::SUCCESS)
}

pub fn archive(mut store: Store, now_ms: i64, session: &str, undo: bool) -> Result<ExitCode> {
    let changed = store.write(|tx| housekeeping::archive(tx, session, !undo, now_ms))?;
    match (undo, changed) {
        (false, true) => out!(
            "archived {session}: `steward sessions --archived` lists it, `steward archive --undo {session}` brings it back"
        ),
        (false, false) => out!("{session} was already archived"),
        (true, true) => out!("{session} is no longer archived"),
        (true, false) => out!("{session} was not archived"),
    }
    Ok(ExitCode::SUCCESS)
}

pub fn delete(mut store: Store, now_ms: i64, session: &str) -> Result<ExitCode> {
    let events = store.write(|tx| housekeeping::delete(tx, session, now_ms))?;
    out!("deleted {session} ({events} events and every row of it)");
    Ok(ExitCode::SUCCESS)
}
