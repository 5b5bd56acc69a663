//! What the client has opened, and what it was sent of each session. One task
//! forwards the engine's committed events as `session/update`s — once each, in
//! commit order, and only for sessions the client created or loaded — so a
//! prompt's turn, a continuation after a restart and a session loaded while it
//! runs all stream the same way. A prompt's answer and a permission question wait
//! for the forwarder ([`Views::barrier`]), so they never overtake the updates that
//! come before them.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use agent_client_protocol_schema::v1::{SessionNotification, SessionUpdate};
use steward_engine::EngineEvent;
use steward_engine::db::Db;
use steward_engine::events::{Event, EventRecord};
use steward_engine::projection::MessageRow;
use steward_engine::store::rows;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tokio::sync::{broadcast, mpsc, oneshot};

use super::agent::Failure;
use super::transport::{INVALID_REQUEST, Outbox, RESOURCE_NOT_FOUND};
use super::updates::Stream;

/// A prompt in progress in one session.
#[derive(Debug, Default)]
pub struct Turn {
    cancelled: AtomicBool,
}

impl Turn {
    /// Whether the client sent `session/cancel` for it.
    pub fn cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }
}

/// The session's turn while a prompt runs; ends it when dropped, whatever the
/// prompt's answer.
#[derive(Debug)]
pub struct TurnGuard {
    views: Arc<Views>,
    session: String,
    pub turn: Arc<Turn>,
}

impl Drop for TurnGuard {
    fn drop(&mut self) {
        if let Some(view) = self.views.lock().get_mut(&self.session)
            && view
                .turn
                .as_ref()
                .is_some_and(|t| Arc::ptr_eq(t, &self.turn))
        {
            view.turn = None;
        }
    }
}

#[derive(Debug, Default)]
struct View {
    /// Events at or below this seq were in the transcript the client was sent.
    shown_through: i64,
    /// While the transcript is being read and replayed: what arrived meanwhile.
    held: Option<Vec<Arrived>>,
    stream: Stream,
    turn: Option<Arc<Turn>>,
    /// Tools the user allowed for the rest of the session ("Always allow").
    always: BTreeSet<String>,
}

/// A committed event, with the message it closed when it closed one on the
/// engine's own account (read when it arrived).
#[derive(Debug)]
struct Arrived {
    record: EventRecord,
    ending: Option<MessageRow>,
}

/// The sessions the client opened.
#[derive(Debug)]
pub struct Views {
    outbox: Outbox,
    views: Mutex<HashMap<String, View>>,
    barriers: mpsc::UnboundedSender<oneshot::Sender<()>>,
}

/// The other end of [`Views`]: what the forwarder reads.
pub struct Forwarding {
    barriers: mpsc::UnboundedReceiver<oneshot::Sender<()>>,
}

impl Views {
    pub fn new(outbox: Outbox) -> (Arc<Views>, Forwarding) {
        let (barriers, receiver) = mpsc::unbounded_channel();
        let views = Arc::new(Views {
            outbox,
            views: Mutex::new(HashMap::new()),
            barriers,
        });
        (views, Forwarding { barriers: receiver })
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, View>> {
        self.views.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the client created or loaded the session.
    pub fn is_open(&self, session: &str) -> bool {
        self.lock().contains_key(session)
    }

    /// A session the client just created: it has nothing to replay.
    pub fn open_new(&self, session: &str) {
        self.lock().insert(session.to_string(), View::default());
    }

    /// Starts loading a session: events arriving from now on are held until its
    /// transcript has been sent. True when it was open already.
    pub fn begin_load(&self, session: &str) -> bool {
        let mut views = self.lock();
        let was_open = views.contains_key(session);
        let view = views.entry(session.to_string()).or_default();
        view.held = Some(Vec::new());
        was_open
    }

    /// Sends the transcript (read up to the session's event `through`), then what
    /// arrived after it while it was read.
    pub fn finish_load(&self, session: &str, messages: &[MessageRow], through: i64) {
        let mut views = self.lock();
        let Some(view) = views.get_mut(session) else {
            return;
        };
        view.stream = Stream::default();
        view.shown_through = through;
        for update in view.stream.replay(messages) {
            self.send(session, update);
        }
        for arrived in view.held.take().unwrap_or_default() {
            self.show(session, view, &arrived);
        }
    }

    /// A load that failed: the session is as it was before.
    pub fn abandon_load(&self, session: &str, was_open: bool) {
        let mut views = self.lock();
        if was_open {
            if let Some(view) = views.get_mut(session) {
                view.held = None;
            }
        } else {
            views.remove(session);
        }
    }

    /// Takes the session's turn for a prompt. Refused when the client did not
    /// open the session, or a prompt of its runs already.
    pub fn begin_turn(self: &Arc<Self>, session: &str) -> Result<TurnGuard, Failure> {
        let mut views = self.lock();
        let Some(view) = views.get_mut(session) else {
            return Err((
                RESOURCE_NOT_FOUND,
                format!("session {session} is not open: session/new or session/load it first"),
            ));
        };
        if view.turn.is_some() {
            return Err((
                INVALID_REQUEST,
                format!(
                    "a prompt is already running in session {session}: wait for its answer, \
                     or send session/cancel"
                ),
            ));
        }
        let turn = Arc::new(Turn::default());
        view.turn = Some(turn.clone());
        Ok(TurnGuard {
            views: self.clone(),
            session: session.to_string(),
            turn,
        })
    }

    /// Marks the session's prompt, if one runs, as cancelled. False when the
    /// client did not open the session.
    pub fn cancel(&self, session: &str) -> bool {
        match self.lock().get(session) {
            Some(view) => {
                if let Some(turn) = &view.turn {
                    turn.cancelled.store(true, Ordering::SeqCst);
                }
                true
            }
            None => false,
        }
    }

    /// Whether the user allowed `tool` for the rest of the session.
    pub fn always_allowed(&self, session: &str, tool: &str) -> bool {
        self.lock()
            .get(session)
            .is_some_and(|v| v.always.contains(tool))
    }

    pub fn allow_always(&self, session: &str, tool: &str) {
        if let Some(view) = self.lock().get_mut(session) {
            view.always.insert(tool.to_string());
        }
    }

    /// Waits until the forwarder has sent every update of the events committed
    /// before this call.
    pub async fn barrier(&self) {
        let (done, finished) = oneshot::channel();
        if self.barriers.send(done).is_ok() {
            let _ = finished.await;
        }
    }

    /// A final update for each tool of `messages` whose stored state is not the
    /// last one sent.
    pub fn settle(&self, session: &str, messages: &[MessageRow]) {
        let mut views = self.lock();
        if let Some(view) = views.get_mut(session) {
            for update in view.stream.settle(messages) {
                self.send(session, update);
            }
        }
    }

    fn send(&self, session: &str, update: SessionUpdate) {
        match serde_json::to_value(SessionNotification::new(session.to_string(), update)) {
            Ok(params) => self.outbox.notify("session/update", params),
            Err(e) => tracing::error!(error = %e, "cannot serialize an update"),
        }
    }

    /// One committed event, for a session the client opened: held while its
    /// transcript loads, otherwise shown unless the transcript had it.
    fn arrived(&self, arrived: Arrived) {
        let session = arrived.record.session_id.clone();
        let mut views = self.lock();
        let Some(view) = views.get_mut(&session) else {
            return;
        };
        match &mut view.held {
            Some(held) => held.push(arrived),
            None => self.show(&session, view, &arrived),
        }
    }

    fn show(&self, session: &str, view: &mut View, arrived: &Arrived) {
        if arrived.record.seq <= view.shown_through {
            return;
        }
        let mut updates = view.stream.event(&arrived.record.event);
        if let Some(message) = &arrived.ending {
            updates.extend(view.stream.ending(message));
        }
        for update in updates {
            self.send(session, update);
        }
    }
}

/// The message an event closed (or wrote) on the engine's own account: a failed
/// step, a cancellation, a recovery, a promoted continuation.
fn ending_of(record: &EventRecord) -> Option<String> {
    use steward_engine::ids;
    match &record.event {
        Event::StepFailed { message_id, .. } => Some(message_id.clone()),
        Event::StepInterrupted {
            execution_id,
            message_id,
        } => Some(
            message_id
                .clone()
                .unwrap_or_else(|| ids::interrupted_message(execution_id)),
        ),
        Event::StepRecovered {
            execution_id,
            assistant_message_id,
            ..
        } => Some(
            assistant_message_id
                .clone()
                .unwrap_or_else(|| ids::recovery_message(execution_id)),
        ),
        Event::InputPromoted {
            input_id,
            message_id,
        } if ids::continuation_execution(input_id).is_some() => Some(message_id.clone()),
        _ => None,
    }
}

/// Forwards committed events to [`Views`] until the engine's channel closes.
/// Events of sessions the client did not open are skipped without a read.
pub async fn forward(
    views: Arc<Views>,
    db: Db,
    mut events: broadcast::Receiver<EngineEvent>,
    forwarding: Forwarding,
) {
    let mut barriers = forwarding.barriers;
    loop {
        tokio::select! {
            biased;
            event = events.recv() => match event {
                Ok(event) => take(&views, &db, event).await,
                Err(RecvError::Lagged(n)) => {
                    tracing::warn!(missed = n, "session updates lagged; a turn's end settles its tools");
                }
                Err(RecvError::Closed) => return,
            },
            Some(done) = barriers.recv() => {
                // Everything sent before the barrier is in the channel by now.
                loop {
                    match events.try_recv() {
                        Ok(event) => take(&views, &db, event).await,
                        Err(TryRecvError::Lagged(n)) => {
                            tracing::warn!(missed = n, "session updates lagged; a turn's end settles its tools");
                        }
                        Err(_) => break,
                    }
                }
                let _ = done.send(());
            }
        }
    }
}

async fn take(views: &Views, db: &Db, event: EngineEvent) {
    let EngineEvent::Committed(record) = event else {
        return;
    };
    if !views.is_open(&record.session_id) {
        return;
    }
    let ending = match ending_of(&record) {
        Some(id) => match db.read(move |conn| rows::message(conn, &id)).await {
            Ok(message) => message,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read a message to show");
                None
            }
        },
        None => None,
    };
    views.arrived(Arrived { record, ending });
}
