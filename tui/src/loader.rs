//! Loading what the screen shows, off the event loop: one thread owns a read-only
//! [`Reader`], takes the newest [`View`] asked for (older requests that piled up are
//! skipped) and sends back what it read. Reading never touches the writer.

use std::sync::mpsc;

use steward_engine::clock::SharedClock;
use steward_engine::inspect::Reader;
use steward_engine::inspect::pages::PageRequest;
use steward_engine::mcp::RunningServer;
use tokio::sync::mpsc::UnboundedSender;

use crate::app::{Extent, Loaded, LoadedTranscript, Msg, Rows, Tab, View};

/// The MCP servers this process runs, read from the engine (not the file).
pub type Servers = std::sync::Arc<dyn Fn() -> Vec<RunningServer> + Send + Sync>;

/// The handle the event loop asks through.
#[derive(Debug, Clone)]
pub struct Loader {
    requests: mpsc::Sender<View>,
}

impl Loader {
    /// Starts the loading thread over `reader`; results arrive on `inbox`.
    pub fn spawn(
        reader: Reader,
        clock: SharedClock,
        servers: Option<Servers>,
        inbox: UnboundedSender<Msg>,
    ) -> Loader {
        let (requests, incoming) = mpsc::channel::<View>();
        std::thread::Builder::new()
            .name("steward-tui-loader".into())
            .spawn(move || {
                let mut reader = reader;
                while let Ok(mut view) = incoming.recv() {
                    while let Ok(newer) = incoming.try_recv() {
                        view = newer;
                    }
                    let mut loaded = load(&mut reader, clock.now_ms(), &view);
                    if let Some(servers) = &servers {
                        with_servers(&mut loaded, &view, servers());
                    }
                    let msg = Msg::Loaded(Box::new(loaded));
                    if inbox.send(msg).is_err() {
                        return;
                    }
                }
            })
            .expect("spawn the loader thread");
        Loader { requests }
    }

    pub fn request(&self, view: View) {
        let _ = self.requests.send(view);
    }
}

/// Reads everything `view` needs. Each part stands alone: one that cannot be read
/// is reported in `errors`, and the others are still shown.
pub fn load(reader: &mut Reader, now_ms: i64, view: &View) -> Loaded {
    let mut loaded = Loaded {
        now_ms,
        ..Loaded::default()
    };
    let mut errors = Vec::new();
    let mut part = |what: &str, e: steward_engine::Error| errors.push(format!("{what}: {e}"));
    match reader.counts() {
        Ok(counts) => loaded.counts = Some(counts),
        Err(e) => part("counts", e),
    }
    if let Some(request) = &view.sessions {
        match reader.recent_sessions(now_ms, request, view.archived) {
            Ok(rows) => loaded.sessions = Some((request.clone(), rows)),
            Err(e) => part("sessions", e),
        }
        match reader.count_sessions(request, view.archived) {
            Ok(n) => loaded.session_total = Some(n),
            Err(e) => part("sessions", e),
        }
    }
    if let Some((_, _, request)) = &view.table
        && request.filter.is_some()
    {
        match reader.filtered_counts(request, now_ms) {
            Ok(counts) => loaded.filtered_counts = Some(counts),
            Err(e) => part("counts", e),
        }
    }
    if let Some((session_id, extent)) = &view.transcript {
        match transcript(reader, now_ms, session_id, extent) {
            Ok(t) => loaded.transcript = t,
            Err(e) => part("transcript", e),
        }
    }
    if let Some((tab, order, request)) = &view.table {
        let rows = match tab {
            Tab::Claims => reader.claims(*order, request, now_ms).map(Rows::Claims),
            Tab::Quarantine => reader.quarantine(request).map(Rows::Quarantine),
            Tab::Wakes => reader.wakes(request).map(Rows::Wakes),
            Tab::Recoveries => reader.recoveries(request).map(Rows::Recoveries),
            Tab::Owners => reader.owners(request).map(Rows::Owners),
            // From the engine, not the file ([`with_servers`]).
            Tab::Servers => Ok(Rows::Servers(Vec::new())),
        };
        match rows {
            Ok(rows) => loaded.rows = Some((request.clone(), rows)),
            Err(e) => part(&tab.title().to_lowercase(), e),
        }
    }
    if let Some(owner) = &view.owner_id {
        let mine = PageRequest {
            filter: Some(owner.clone()),
            ..PageRequest::first(100)
        };
        match reader.claims(Default::default(), &mine, now_ms) {
            Ok(claims) => {
                loaded.own_claims = Some(
                    claims
                        .into_iter()
                        .filter(|c| &c.claim.owner_id == owner)
                        .filter_map(|c| Some((c.claim.session_id, c.claim.expires_at.as_i64()?)))
                        .collect(),
                )
            }
            Err(e) => part("this owner's claims", e),
        }
    }
    loaded.errors = errors;
    loaded
}

/// Adds the MCP servers this process runs to `loaded`: their count, and the rows
/// of the Servers tab (those whose session or name holds the filter).
fn with_servers(loaded: &mut Loaded, view: &View, servers: Vec<RunningServer>) {
    if let Some((Tab::Servers, _, request)) = &view.table {
        let shown = servers
            .iter()
            .filter(|s| {
                request
                    .filter
                    .as_deref()
                    .is_none_or(|f| s.session_id.contains(f) || s.server.contains(f))
            })
            .cloned()
            .collect();
        loaded.rows = Some((request.clone(), Rows::Servers(shown)));
    }
    loaded.servers = Some(servers);
}

/// The messages `extent` names of a session (rows that cannot be decoded set
/// aside), its pending inputs and its state.
fn transcript(
    reader: &mut Reader,
    now_ms: i64,
    session_id: &str,
    extent: &Extent,
) -> steward_engine::Result<Option<LoadedTranscript>> {
    let Some(session) = reader.session(session_id)? else {
        return Ok(None);
    };
    let (messages, unreadable, has_older) = match *extent {
        Extent::Newest(limit) => {
            let (mut messages, mut unreadable) =
                reader.transcript_lenient(session_id, None, limit + 1)?;
            let has_older = messages.len() + unreadable.len() > limit;
            if has_older {
                drop_oldest(&mut messages, &mut unreadable);
            }
            (messages, unreadable, has_older)
        }
        Extent::From { seq, older } => {
            let (mut messages, mut unreadable) =
                reader.transcript_lenient(session_id, Some(seq), older + 1)?;
            let has_older = messages.len() + unreadable.len() > older;
            if has_older {
                drop_oldest(&mut messages, &mut unreadable);
            }
            let (newer, newer_bad) = reader.transcript_from_lenient(session_id, seq)?;
            messages.extend(newer);
            unreadable.extend(newer_bad);
            (messages, unreadable, has_older)
        }
    };
    let state = reader.session_state(session_id, now_ms)?;
    // Why it is quarantined, said in the transcript.
    let quarantined = if state == Some(steward_engine::inspect::SessionState::Quarantined) {
        let request = PageRequest {
            filter: Some(session_id.to_string()),
            ..PageRequest::first(100)
        };
        reader
            .quarantine(&request)?
            .into_iter()
            .filter(|q| q.session_id == session_id)
            .map(|q| (q.execution_id, q.reason))
            .collect()
    } else {
        Vec::new()
    };
    // Who runs it, when another process may: what Esc here says.
    let holder = if state == Some(steward_engine::inspect::SessionState::Running) {
        reader.session_holder(session_id)?
    } else {
        None
    };
    Ok(Some(LoadedTranscript {
        state,
        quarantined,
        holder,
        pending: reader.pending_inputs(session_id)?,
        extent: extent.clone(),
        session,
        messages,
        unreadable,
        has_older,
    }))
}

/// Drops the oldest row read (one more than asked for, read only to tell that older
/// ones exist).
fn drop_oldest(
    messages: &mut Vec<steward_engine::projection::MessageRow>,
    unreadable: &mut Vec<steward_engine::store::rows::Unreadable>,
) {
    match (messages.first(), unreadable.first()) {
        (Some(m), Some(u)) if u.seq < m.seq => {
            unreadable.remove(0);
        }
        (Some(_), _) => {
            messages.remove(0);
        }
        (None, _) => {
            unreadable.remove(0);
        }
    }
}
