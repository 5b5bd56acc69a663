//! What the client has opened, and what it was sent of each session. One task
//! forwards the engine's committed events as `session/update`s — once each, in
//! `seq` order, and only for sessions the client created or loaded — so a prompt's
//! turn, a continuation after a restart and a session loaded while it runs all
//! stream the same way. What other processes write to an opened session (another
//! window running it, a recovery there) is read from the file when the data
//! directory changes. A prompt's answer and a permission question wait for the
//! forwarder ([`Views::barrier`]), so they never overtake the updates that come
//! before them.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use agent_client_protocol_schema::v1::{SessionNotification, SessionUpdate};
use steward_engine::events::{Event, EventRecord};
use steward_engine::message::MessageData;
use steward_engine::projection::MessageRow;
use steward_engine::{Engine, EngineEvent};
use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tokio::sync::{broadcast, mpsc, oneshot};

use super::agent::Failure;
use super::transport::{INVALID_REQUEST, Outbox, RESOURCE_NOT_FOUND};
use super::updates::Stream;

/// A prompt in progress in one session.
#[derive(Debug, Default)]
pub struct Turn {
    cancelled: AtomicBool,
    cancels: tokio::sync::Notify,
}

impl Turn {
    /// Whether the client sent `session/cancel` for it.
    pub fn cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }

    /// Resolves at the next `session/cancel` for it.
    pub async fn wait_cancelled(&self) {
        self.cancels.notified().await;
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
    /// The client has every event up to this seq (in the transcript it was sent,
    /// or forwarded since).
    shown_through: i64,
    /// Loads in progress: while any runs, what arrives is held.
    loading: u32,
    held: Vec<Arrived>,
    stream: Stream,
    turn: Option<Arc<Turn>>,
    /// The client was sent the session (created, or a load finished).
    opened: bool,
    /// Events of it may have been lost to a lagging channel: the next catch-up reads
    /// them from the file, whoever runs the session.
    missed: bool,
    /// Prompts the client sent that were not promoted yet, with how many agent
    /// chunks had been sent then.
    prompts: Vec<(String, u64)>,
    /// Running commands' output so far, by call id.
    live: HashMap<String, Live>,
}

/// A running command's output, and when it was last sent.
#[derive(Debug, Default)]
struct Live {
    text: String,
    sent: Option<std::time::Instant>,
    /// Output came since it was last sent (held back by [`LIVE_EVERY`]).
    unsent: bool,
}

/// How much of a running command's output a client is sent (its end).
const LIVE_BYTES: usize = 16 * 1024;
/// How often a running command's output is sent at most.
const LIVE_EVERY: std::time::Duration = std::time::Duration::from_millis(250);

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
    /// Rung whenever a load ends (finished or abandoned).
    loads_ended: tokio::sync::Notify,
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
            loads_ended: tokio::sync::Notify::new(),
        });
        (views, Forwarding { barriers: receiver })
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, View>> {
        self.views.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the client created the session or a load of it has answered: what
    /// lets the engine run its wakes and ask about its tools (protocol §5.1: a
    /// loaded session's wake starts after the load).
    pub fn is_open(&self, session: &str) -> bool {
        self.lock().get(session).is_some_and(|v| v.opened)
    }

    /// Waits until no load of the session is in progress: a prompt that arrived
    /// while it loaded runs after it. Refused when the session is not open then
    /// (its load failed).
    pub async fn after_loads(&self, session: &str) -> Result<(), Failure> {
        loop {
            let ended = self.loads_ended.notified();
            match self.lock().get(session) {
                Some(view) if view.loading == 0 && view.opened => return Ok(()),
                Some(view) if view.loading > 0 => {}
                _ => return Err(not_open(session)),
            }
            ended.await;
        }
    }

    /// A session the client just created (its events so far, through `through`,
    /// need no update: it has nothing to show yet).
    pub fn open_new(&self, session: &str, through: i64, directory: &Path) {
        let mut view = View {
            shown_through: through,
            opened: true,
            ..View::default()
        };
        view.stream.directory = Some(directory.to_path_buf());
        self.lock().insert(session.to_string(), view);
    }

    /// The sessions open and not loading, with the last seq each was sent and
    /// whether events of it were missed.
    fn watched(&self) -> Vec<(String, i64, bool)> {
        self.lock()
            .iter()
            .filter(|(_, v)| v.loading == 0)
            .map(|(id, v)| (id.clone(), v.shown_through, v.missed))
            .collect()
    }

    /// Events were lost to a lagging channel: every session's next catch-up reads
    /// the file.
    fn missed_events(&self) {
        for view in self.lock().values_mut() {
            view.missed = true;
        }
    }

    fn caught_up(&self, session: &str) {
        if let Some(view) = self.lock().get_mut(session) {
            view.missed = false;
        }
    }

    /// Waits until the client has read enough of what was sent (the outbox has
    /// room): what produces many updates waits here.
    pub async fn ready(&self) {
        self.outbox.ready().await;
    }

    /// Starts loading a session: events arriving from now on are held until its
    /// transcript has been sent.
    pub fn begin_load(&self, session: &str) {
        self.lock().entry(session.to_string()).or_default().loading += 1;
    }

    /// Sends the transcript (read up to the session's event `through`), then what
    /// arrived after it while it was read.
    pub fn finish_load(
        &self,
        session: &str,
        messages: &[MessageRow],
        through: i64,
        directory: Option<&Path>,
    ) {
        let mut views = self.lock();
        let Some(view) = views.get_mut(session) else {
            return;
        };
        let _ended = LoadEnded(&self.loads_ended);
        view.loading = view.loading.saturating_sub(1);
        view.opened = true;
        view.stream = Stream::default();
        view.stream.directory = directory.map(Path::to_path_buf);
        view.shown_through = through;
        for update in view.stream.replay(messages) {
            self.send(session, update);
        }
        if view.loading == 0 {
            for arrived in std::mem::take(&mut view.held) {
                self.show(session, view, &arrived);
            }
        }
    }

    /// A load that failed. A session opened only by it (no other load of it in
    /// progress, never shown) is closed again.
    pub fn abandon_load(&self, session: &str) {
        let mut views = self.lock();
        let Some(view) = views.get_mut(session) else {
            return;
        };
        let _ended = LoadEnded(&self.loads_ended);
        view.loading = view.loading.saturating_sub(1);
        if view.loading == 0 {
            if !view.opened {
                views.remove(session);
            } else {
                for arrived in std::mem::take(&mut view.held) {
                    self.show(session, view, &arrived);
                }
            }
        }
    }

    /// A prompt that was not admitted after all.
    pub fn forget_prompt(&self, session: &str, prompt: &str) {
        if let Some(view) = self.lock().get_mut(session)
            && let Some(i) = view.prompts.iter().rposition(|(text, _)| text == prompt)
        {
            view.prompts.remove(i);
        }
    }

    /// The client sent `prompt`: when it is promoted, it is the client's own.
    pub fn expect_prompt(&self, session: &str, prompt: &str) {
        if let Some(view) = self.lock().get_mut(session) {
            let texts = view.stream.texts();
            view.prompts.push((prompt.to_string(), texts));
        }
    }

    /// Takes the session's turn for a prompt. Refused when the client did not
    /// open the session, or a prompt of its runs already.
    pub fn begin_turn(self: &Arc<Self>, session: &str) -> Result<TurnGuard, Failure> {
        let mut views = self.lock();
        let Some(view) = views.get_mut(session) else {
            return Err(not_open(session));
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
                    turn.cancels.notify_one();
                }
                true
            }
            None => false,
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

    /// A running command of an open session wrote `text`: the client is sent all it
    /// wrote so far (up to [`LIVE_BYTES`], its end), at most every
    /// [`LIVE_EVERY`].
    fn tool_output(&self, session: &str, call_id: &str, text: &str) {
        let mut views = self.lock();
        let Some(view) = views.get_mut(session) else {
            return;
        };
        if view.loading > 0 || !view.opened {
            return;
        }
        let live = view.live.entry(call_id.to_string()).or_default();
        live.text.push_str(text);
        if live.text.len() > LIVE_BYTES {
            let mut cut = live.text.len() - LIVE_BYTES;
            while !live.text.is_char_boundary(cut) {
                cut += 1;
            }
            live.text.drain(..cut);
        }
        let now = std::time::Instant::now();
        if live
            .sent
            .is_some_and(|at| now.duration_since(at) < LIVE_EVERY)
        {
            // Sent when its time comes ([`Views::flush_live`]).
            live.unsent = true;
            return;
        }
        live.sent = Some(now);
        live.unsent = false;
        let update = super::updates::tool_output(call_id, &live.text);
        drop(views);
        self.send(session, update);
    }

    /// When output held back by [`LIVE_EVERY`] is due, if any is.
    fn live_due(&self) -> Option<std::time::Instant> {
        self.lock()
            .values()
            .flat_map(|view| view.live.values())
            .filter(|live| live.unsent)
            .filter_map(|live| live.sent.map(|at| at + LIVE_EVERY))
            .min()
    }

    /// Sends the output held back whose time has come: a command that writes
    /// and then goes quiet is seen to the end of what it wrote.
    fn flush_live(&self) {
        let now = std::time::Instant::now();
        let mut due = Vec::new();
        for (session, view) in self.lock().iter_mut() {
            for (call_id, live) in &mut view.live {
                if live.unsent && live.sent.is_none_or(|at| now >= at + LIVE_EVERY) {
                    live.unsent = false;
                    live.sent = Some(now);
                    due.push((
                        session.clone(),
                        super::updates::tool_output(call_id, &live.text),
                    ));
                }
            }
        }
        for (session, update) in due {
            self.send(&session, update);
        }
    }

    /// A provider step of an open session waits to be tried again: the client reads
    /// why and when, as thought text (nothing of the answer).
    fn retrying(&self, session: &str, attempt: u32, of: u32, at_ms: i64, error: &str) {
        if !self.is_open(session) {
            return;
        }
        let now = steward_engine::clock::Clock::now_ms(&steward_engine::clock::SystemClock::new());
        let seconds = ((at_ms - now).max(0) as u64).div_ceil(1000);
        let text = format!(
            "⟳ {}: trying again in {seconds} s (attempt {attempt} of {of})\n",
            steward_engine::printable::clean(error)
        );
        self.send(session, super::updates::thought(text));
    }

    fn send(&self, session: &str, update: SessionUpdate) {
        let notification = SessionNotification::new(session.to_string(), update);
        match self.outbox.notify_with("session/update", &notification) {
            Ok(()) => {}
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
        if view.loading > 0 {
            view.held.push(arrived);
        } else {
            self.show(&session, view, &arrived);
        }
    }

    fn show(&self, session: &str, view: &mut View, arrived: &Arrived) {
        if arrived.record.seq <= view.shown_through {
            return;
        }
        view.shown_through = arrived.record.seq;
        if let Event::ToolCompleted { call_id, .. } | Event::ToolFailed { call_id, .. } =
            &arrived.record.event
        {
            view.live.remove(call_id);
        }
        let mut updates = view.stream.event(&arrived.record.event);
        match &arrived.ending {
            Some(message) if matches!(&message.data, MessageData::User(_)) => {
                let MessageData::User(user) = &message.data else {
                    unreachable!()
                };
                let own = view
                    .prompts
                    .iter()
                    .position(|(text, _)| *text == user.text)
                    .map(|i| view.prompts.remove(i).1);
                updates.extend(view.stream.prompt(user, own));
            }
            Some(message) => updates.extend(view.stream.ending(message)),
            None => {}
        }
        for update in updates {
            self.send(session, update);
        }
    }
}

/// Rings the load-ended bell when a load's bookkeeping is done (the lock is
/// released after it: waiters look again once they get it).
struct LoadEnded<'a>(&'a tokio::sync::Notify);

impl Drop for LoadEnded<'_> {
    fn drop(&mut self) {
        self.0.notify_waiters();
    }
}

fn not_open(session: &str) -> Failure {
    (
        RESOURCE_NOT_FOUND,
        format!("session {session} is not open: session/new or session/load it first"),
    )
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
        // A continuation's note, or a user's prompt (another process's is shown).
        Event::InputPromoted { message_id, .. } => Some(message_id.clone()),
        Event::CompactionEnded { message_id, .. } => Some(message_id.clone()),
        _ => None,
    }
}

/// Forwards committed events to [`Views`] until the engine's channel closes.
/// Events of sessions the client did not open are skipped without a read.
pub async fn forward(
    views: Arc<Views>,
    engine: Arc<Engine>,
    mut events: broadcast::Receiver<EngineEvent>,
    forwarding: Forwarding,
) {
    let db = &*engine;
    let mut barriers = forwarding.barriers;
    // Other processes' writes ring the data directory's doorbell; a slow poll
    // covers a missed ring (or a platform that cannot watch).
    let bell = Arc::new(tokio::sync::Notify::new());
    let _watcher = engine
        .database()
        .and_then(|p| p.parent())
        .and_then(|dir| steward_engine::doorbell::watch(dir, bell.clone()));
    let mut poll = tokio::time::interval(POLL);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // A session running here sends its events on the channel: only the others are
    // read from the file — and any whose events a lagging channel lost.
    let others = |s: &str, missed: bool| missed || !engine.is_running(s);
    loop {
        // A client that does not read slows this loop down; the engine's channel
        // then lags, and what it lost is read from the file: nothing is dropped,
        // nothing grows.
        views.ready().await;
        let live_due = views.live_due();
        tokio::select! {
            biased;
            event = events.recv() => match event {
                Ok(event) => take(&views, db, event).await,
                Err(RecvError::Lagged(n)) => {
                    tracing::warn!(missed = n, "session updates lagged; reading them from the file");
                    views.missed_events();
                    catch_up(&views, db, &|_, _| true).await;
                }
                Err(RecvError::Closed) => return,
            },
            _ = bell.notified() => catch_up(&views, db, &others).await,
            () = async {
                match live_due {
                    Some(at) => tokio::time::sleep_until(at.into()).await,
                    None => std::future::pending().await,
                }
            } => views.flush_live(),
            _ = poll.tick() => catch_up(&views, db, &others).await,
            Some(done) = barriers.recv() => {
                // Everything sent before the barrier is in the channel by now.
                loop {
                    match events.try_recv() {
                        Ok(event) => take(&views, db, event).await,
                        Err(TryRecvError::Lagged(n)) => {
                            tracing::warn!(missed = n, "session updates lagged; reading them from the file");
                            views.missed_events();
                            catch_up(&views, db, &|_, _| true).await;
                        }
                        Err(_) => break,
                    }
                }
                let _ = done.send(());
            }
        }
    }
}

/// How often the opened sessions are read for writes the doorbell did not ring for.
const POLL: std::time::Duration = std::time::Duration::from_secs(5);

/// Reads what the opened sessions `which` accepts (by id, and whether events of it
/// were missed) got from other processes, or lost to a lagging channel, and shows it.
async fn catch_up(views: &Views, db: &Engine, which: &(dyn Fn(&str, bool) -> bool + Sync)) {
    for (session, after, missed) in views.watched() {
        if !which(&session, missed) {
            continue;
        }
        views.caught_up(&session);
        let read = db.events_after(&session, after).await;
        match read {
            Ok(records) => {
                for record in records {
                    arrive(views, db, record).await;
                }
            }
            Err(e) => {
                views.missed_events();
                tracing::warn!(session = %session, error = %e, "cannot read the session's new events")
            }
        }
    }
}

async fn take(views: &Views, db: &Engine, event: EngineEvent) {
    if let EngineEvent::ToolOutput {
        session_id,
        call_id,
        text,
    } = &event
    {
        views.tool_output(session_id, call_id, text);
        return;
    }
    if let EngineEvent::Retrying {
        session_id,
        attempt,
        of,
        at_ms,
        error,
    } = &event
    {
        views.retrying(session_id, *attempt, *of, *at_ms, error);
        return;
    }
    let EngineEvent::Committed(record) = event else {
        return;
    };
    if !views.is_open(&record.session_id) {
        return;
    }
    arrive(views, db, record).await;
}

async fn arrive(views: &Views, db: &Engine, record: EventRecord) {
    let ending = match ending_of(&record) {
        Some(id) => match db.message(&id).await {
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
