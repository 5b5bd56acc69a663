//! Loading what the screen shows, off the event loop: one thread owns a read-only
//! [`Reader`], takes the newest [`View`] asked for (older requests that piled up are
//! skipped) and sends back what it read. Reading never touches the writer.

use std::sync::mpsc;

use steward_engine::clock::SharedClock;
use steward_engine::inspect::Reader;
use steward_engine::inspect::pages::PageRequest;
use tokio::sync::mpsc::UnboundedSender;

use crate::app::{Loaded, LoadedTranscript, Msg, Rows, Tab, View};

/// The handle the event loop asks through.
#[derive(Debug, Clone)]
pub struct Loader {
    requests: mpsc::Sender<View>,
}

impl Loader {
    /// Starts the loading thread over `reader`; results arrive on `inbox`.
    pub fn spawn(reader: Reader, clock: SharedClock, inbox: UnboundedSender<Msg>) -> Loader {
        let (requests, incoming) = mpsc::channel::<View>();
        std::thread::Builder::new()
            .name("steward-tui-loader".into())
            .spawn(move || {
                let mut reader = reader;
                while let Ok(mut view) = incoming.recv() {
                    while let Ok(newer) = incoming.try_recv() {
                        view = newer;
                    }
                    let msg = match load(&mut reader, clock.now_ms(), &view) {
                        Ok(loaded) => Msg::Loaded(Box::new(loaded)),
                        Err(e) => Msg::Done(Err(format!("cannot read the database: {e}"))),
                    };
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

/// Reads everything `view` needs.
pub fn load(reader: &mut Reader, now_ms: i64, view: &View) -> steward_engine::Result<Loaded> {
    let mut loaded = Loaded {
        now_ms,
        counts: Some(reader.counts()?),
        ..Loaded::default()
    };
    if let Some(request) = &view.sessions {
        loaded.sessions = Some((request.clone(), reader.sessions(now_ms, request)?));
    }
    if let Some((session_id, limit)) = &view.transcript
        && let Some(session) = reader.session(session_id)?
    {
        let mut messages = reader.transcript(session_id, None, limit + 1)?;
        let has_older = messages.len() > *limit;
        if has_older {
            messages.remove(0);
        }
        loaded.transcript = Some(LoadedTranscript {
            pending: reader.pending_inputs(session_id)?,
            session,
            messages,
            has_older,
        });
    }
    if let Some((tab, order, request)) = &view.table {
        let rows = match tab {
            Tab::Claims => Rows::Claims(reader.claims(*order, request, now_ms)?),
            Tab::Quarantine => Rows::Quarantine(reader.quarantine(request)?),
            Tab::Wakes => Rows::Wakes(reader.wakes(request)?),
            Tab::Recoveries => Rows::Recoveries(reader.recoveries(request)?),
            Tab::Owners => Rows::Owners(reader.owners(request)?),
        };
        loaded.rows = Some((request.clone(), rows));
    }
    if let Some(owner) = &view.owner_id {
        let mine = PageRequest {
            filter: Some(owner.clone()),
            ..PageRequest::first(100)
        };
        loaded.own_claims = Some(
            reader
                .claims(Default::default(), &mine, now_ms)?
                .into_iter()
                .filter(|c| &c.claim.owner_id == owner)
                .filter_map(|c| Some((c.claim.session_id, c.claim.expires_at.as_i64()?)))
                .collect(),
        );
    }
    Ok(loaded)
}
