//! Sessions and their inputs: creating a session, admitting an input, and choosing
//! which pending inputs a wake promotes.

use rusqlite::{Connection, Transaction, params};

use crate::claim::{self, ClaimRow, ClaimState};
use crate::error::{Error, Result};
use crate::events::{Delivery, Event, EventRecord};
use crate::ids;
use crate::projection::{InputRow, SessionRow};
use crate::store::events::append_unowned;
use crate::store::rows;

/// Which pending inputs an execution promotes (protocol §5.7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Every pending input in admitted order — `queue` and `admit` alike — except
    /// continuations whose recovery wake is parked or quarantined.
    Queued,
    /// Only these continuation inputs: a recovery wake never promotes unrelated
    /// pending inputs (invariant 10).
    Continuations(Vec<String>),
}

impl Scope {
    /// The scope of one recovery wake.
    pub fn continuation(input_id: impl Into<String>) -> Scope {
        Scope::Continuations(vec![input_id.into()])
    }

    /// Two wakes coalesced into one run: a queued wake promotes everything pending
    /// anyway; recovery wakes alone promote only their continuations.
    pub fn merge(self, other: Scope) -> Scope {
        match (self, other) {
            (Scope::Continuations(mut a), Scope::Continuations(b)) => {
                for id in b {
                    if !a.contains(&id) {
                        a.push(id);
                    }
                }
                Scope::Continuations(a)
            }
            _ => Scope::Queued,
        }
    }
}

/// The provider and model `session_id` runs on (protocol §4.17): the user's last
/// choice or the last step's, whichever is newer; `None` before its first step.
pub fn model_of(conn: &Connection, session_id: &str) -> Result<Option<(String, String)>> {
    let latest = |sql: &str| -> Result<Option<(i64, String, String)>> {
        let mut stmt = conn.prepare_cached(sql)?;
        let mut rows = stmt.query([session_id])?;
        while let Some(row) = rows.next()? {
            let (seq, provider, model): (i64, Option<String>, Option<String>) =
                (row.get(0)?, row.get(1)?, row.get(2)?);
            if let (Some(provider), Some(model)) = (provider, model) {
                return Ok(Some((seq, provider, model)));
            }
        }
        Ok(None)
    };
    // Both read newest first through `session_message (session_id, type, seq)`.
    let step = latest(
        "SELECT seq, json_extract(data, '$.provider'), json_extract(data, '$.model')
         FROM session_message WHERE session_id = ?1 AND type = 'assistant'
         ORDER BY seq DESC LIMIT 1",
    )?;
    let chosen = latest(
        "SELECT seq, json_extract(data, '$.provider'), json_extract(data, '$.model')
         FROM session_message WHERE session_id = ?1 AND type = 'synthetic'
           AND json_extract(data, '$.kind') = 'model'
         ORDER BY seq DESC LIMIT 1",
    )?;
    Ok(match (step, chosen) {
        (Some(a), Some(b)) => Some(if a.0 > b.0 { (a.1, a.2) } else { (b.1, b.2) }),
        (Some(a), None) | (None, Some(a)) => Some((a.1, a.2)),
        (None, None) => None,
    })
}

/// Records that the user chose `provider`/`model` for `session_id` (`model.chosen`,
/// unowned), unless the session runs on them already.
pub fn choose_model(
    tx: &Transaction<'_>,
    session_id: &str,
    provider: &str,
    model: &str,
    now_ms: i64,
) -> Result<Option<EventRecord>> {
    if rows::session(tx, session_id)?.is_none() {
        return Err(Error::NotFound {
            kind: "session",
            id: session_id.to_string(),
        });
    }
    let current = model_of(tx, session_id)?;
    if current
        .as_ref()
        .is_some_and(|(p, m)| p == provider && m == model)
    {
        return Ok(None);
    }
    let event = Event::ModelChosen {
        message_id: ids::new(ids::MESSAGE, now_ms),
        provider: provider.to_string(),
        model: model.to_string(),
        previous: current.map(|(p, m)| format!("{p}/{m}")),
    };
    Ok(Some(append_unowned(tx, session_id, now_ms, event)?))
}

/// A session title from the start of its first prompt: its first line, at most 60
/// characters.
pub fn title_from(prompt: &str) -> String {
    let line = prompt.lines().next().unwrap_or_default().trim();
    let mut title: String = line.chars().take(60).collect();
    if line.chars().count() > 60 {
        title.push('…');
    }
    title
}

/// The longest title kept, in characters.
pub const MAX_TITLE_CHARS: usize = 200;

/// A title as one clean line: terminal escape sequences removed whole
/// ([`crate::printable::clean`]), other control characters (line breaks, tabs)
/// made spaces, runs of spaces one, and more than [`MAX_TITLE_CHARS`] cut with
/// `…`. Lists print a title on one line; it must not be able to forge another.
pub fn clean_title(title: &str) -> String {
    let spaced: String = crate::printable::clean(title)
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let line = spaced.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() <= MAX_TITLE_CHARS {
        return line;
    }
    let mut cut: String = line.chars().take(MAX_TITLE_CHARS - 1).collect();
    cut.push('…');
    cut
}

/// Creates a session (`session.created`).
pub fn create(
    tx: &Transaction<'_>,
    title: &str,
    directory: &str,
    now_ms: i64,
) -> Result<SessionRow> {
    let id = ids::new(ids::SESSION, now_ms);
    create_with_id(tx, &id, title, directory, now_ms)
}

/// [`create`] with an id chosen by the caller (a `ses_` id from [`ids::new`]).
pub fn create_with_id(
    tx: &Transaction<'_>,
    id: &str,
    title: &str,
    directory: &str,
    now_ms: i64,
) -> Result<SessionRow> {
    append_unowned(
        tx,
        id,
        now_ms,
        Event::SessionCreated {
            title: clean_title(title),
            directory: directory.to_string(),
        },
    )?;
    rows::session(tx, id)?.ok_or_else(|| Error::corrupt("a created session vanished"))
}

/// Admits a user input (`input.admitted`): `queue` sets the durable wake flag.
pub fn admit(
    tx: &Transaction<'_>,
    session_id: &str,
    prompt: &str,
    delivery: Delivery,
    now_ms: i64,
) -> Result<(InputRow, EventRecord)> {
    admit_content(tx, session_id, prompt, &[], delivery, now_ms)
}

/// [`admit`] of a prompt that carries resources: its blocks are kept as they are
/// (protocol §4.20).
pub fn admit_content(
    tx: &Transaction<'_>,
    session_id: &str,
    prompt: &str,
    content: &[crate::message::PromptBlock],
    delivery: Delivery,
    now_ms: i64,
) -> Result<(InputRow, EventRecord)> {
    if rows::session(tx, session_id)?.is_none() {
        return Err(Error::NotFound {
            kind: "session",
            id: session_id.to_string(),
        });
    }
    let input_id = ids::new(ids::INPUT, now_ms);
    let record = append_unowned(
        tx,
        session_id,
        now_ms,
        Event::InputAdmitted {
            input_id: input_id.clone(),
            prompt: prompt.to_string(),
            content: content.to_vec(),
            delivery,
            wake_pending: delivery == Delivery::Queue,
            continuation_of: None,
        },
    )?;
    let input =
        rows::input(tx, &input_id)?.ok_or_else(|| Error::corrupt("an admitted input vanished"))?;
    Ok((input, record))
}

/// The live claim of another owner holding `session_id`, if any.
pub fn held_by_other(
    conn: &Connection,
    session_id: &str,
    me: &str,
    now_ms: i64,
) -> Result<Option<ClaimRow>> {
    Ok(claim::for_session(conn, session_id)?
        .filter(|c| c.owner_id != me && c.state(now_ms) == ClaimState::Live))
}

/// The inputs `scope` promotes now, in admitted order. Without `auto_continue`
/// (protocol §5.9) a queued run leaves recovery continuations alone: only an explicit
/// wake ([`Scope::Continuations`]) promotes them.
pub fn promotable(
    conn: &Connection,
    session_id: &str,
    scope: &Scope,
    auto_continue: bool,
) -> Result<Vec<InputRow>> {
    let pending = rows::pending_inputs(conn, session_id)?;
    match scope {
        // Checked again in the promoting transaction: a wake discarded (or
        // quarantined) since it was started promotes nothing.
        Scope::Continuations(ids) => {
            let mut out = Vec::new();
            for input in pending.into_iter().filter(|i| ids.contains(&i.id)) {
                if let Some(execution_id) = ids::continuation_execution(&input.id)
                    && crate::recovery::wakes::is_due(conn, execution_id, &input.id)?
                {
                    out.push(input);
                }
            }
            Ok(out)
        }
        Scope::Queued => {
            let mut out = Vec::new();
            for input in pending {
                match ids::continuation_execution(&input.id) {
                    None => out.push(input),
                    // A continuation runs when its recovery wake is due and continuing
                    // on its own is allowed — or when it carries a wake flag itself,
                    // so that nothing the clear check waits for is left unpromoted.
                    Some(execution_id)
                        if input.wake_pending
                            || (auto_continue
                                && crate::recovery::wakes::is_due(
                                    conn,
                                    execution_id,
                                    &input.id,
                                )?) =>
                    {
                        out.push(input)
                    }
                    Some(_) => {}
                }
            }
            Ok(out)
        }
    }
}

/// Marks a recovery's wake done, in the continuation's promotion transaction.
pub fn finish_recovery_wake(tx: &Transaction<'_>, input_id: &str) -> Result<()> {
    if let Some(execution_id) = ids::continuation_execution(input_id) {
        tx.prepare_cached(
            "UPDATE session_recovery SET wake_pending = 0
             WHERE execution_id = ?1 AND continuation_message_id = ?2",
        )?
        .execute(params![execution_id, input_id])?;
    }
    Ok(())
}

/// Sessions with an input admitted with a wake that was never promoted (protocol §5.7).
pub fn with_pending_input_wakes(conn: &Connection) -> Result<Vec<String>> {
    let mut stmt = conn.prepare_cached(
        "SELECT DISTINCT session_id FROM session_input
         WHERE wake_pending = 1 AND promoted_seq IS NULL ORDER BY session_id",
    )?;
    let rows = stmt.query_map([], |r| r.get(0))?;
    Ok(rows.collect::<Result<_, _>>()?)
}
