//! The one state of the interface ([`App`]), the messages that change it ([`Msg`])
//! and the effects it asks the runtime to carry out ([`Effect`]). [`crate::update`]
//! is the only code that changes an `App`; [`crate::view`] only reads one.

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use steward_engine::mcp::RunningServer;

use ratatui::crossterm::event::KeyEvent;
use ratatui_textarea::TextArea;
use steward_engine::inspect::pages::{ClaimLine, ClaimOrder, Counts, PageRequest};
use steward_engine::inspect::{
    QuarantineView, RecoveryView, SessionState, SessionSummary, WakeView,
};
use steward_engine::owner::{Liveness, OwnerRow};
use steward_engine::projection::{InputRow, MessageRow, SessionRow};
use steward_engine::recovery::RecoveryReport;
use steward_engine::runner::EngineEvent;
use steward_engine::tools::PermissionRequest;

use crate::theme::Theme;

/// Rows a table or list loads at once.
pub const PAGE: usize = 100;
/// Messages of a transcript loaded at once.
pub const TRANSCRIPT_PAGE: usize = 200;
/// A key typed within this many milliseconds of the previous key, or of a question
/// appearing, does not answer the question: it was typed before the question could
/// be read.
pub const TYPE_AHEAD_MS: u64 = 400;

/// Chat with the inspector, or the inspector alone and read-only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `steward`: sessions run here; the inspector's actions are enabled.
    Chat,
    /// `steward inspect`: reads only; actions are shown disabled.
    ReadOnly,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Screen {
    Chat,
    Inspector,
}

/// The chat's panes, in Tab order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pane {
    Sessions,
    Transcript,
    Prompt,
}

/// The inspector's tabs, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tab {
    Claims,
    Quarantine,
    Wakes,
    Recoveries,
    Owners,
    /// The MCP servers this process runs (none in `steward inspect`).
    Servers,
}

impl Tab {
    pub const ALL: [Tab; 6] = [
        Tab::Claims,
        Tab::Quarantine,
        Tab::Wakes,
        Tab::Recoveries,
        Tab::Owners,
        Tab::Servers,
    ];

    pub fn title(self) -> &'static str {
        match self {
            Tab::Claims => "Claims",
            Tab::Quarantine => "Quarantine",
            Tab::Wakes => "Wakes",
            Tab::Recoveries => "Recoveries",
            Tab::Owners => "Owners",
            Tab::Servers => "MCP",
        }
    }

    pub fn index(self) -> usize {
        Tab::ALL.iter().position(|t| *t == self).unwrap_or(0)
    }

    pub fn count(self, counts: &Counts, servers: usize) -> i64 {
        match self {
            Tab::Servers => i64::try_from(servers).unwrap_or(i64::MAX),
            Tab::Claims => counts.claims,
            Tab::Quarantine => counts.quarantine,
            Tab::Wakes => counts.wakes,
            Tab::Recoveries => counts.recoveries,
            Tab::Owners => counts.owners,
        }
    }
}

/// The rows of the inspector's current page.
#[derive(Debug, Clone, PartialEq)]
pub enum Rows {
    Claims(Vec<ClaimLine>),
    Quarantine(Vec<QuarantineView>),
    Wakes(Vec<WakeView>),
    Recoveries(Vec<RecoveryView>),
    Owners(Vec<(OwnerRow, Liveness)>),
    Servers(Vec<RunningServer>),
}

impl Rows {
    pub fn len(&self) -> usize {
        match self {
            Rows::Claims(r) => r.len(),
            Rows::Quarantine(r) => r.len(),
            Rows::Wakes(r) => r.len(),
            Rows::Recoveries(r) => r.len(),
            Rows::Owners(r) => r.len(),
            Rows::Servers(r) => r.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn tab(&self) -> Tab {
        match self {
            Rows::Claims(_) => Tab::Claims,
            Rows::Quarantine(_) => Tab::Quarantine,
            Rows::Wakes(_) => Tab::Wakes,
            Rows::Recoveries(_) => Tab::Recoveries,
            Rows::Owners(_) => Tab::Owners,
            Rows::Servers(_) => Tab::Servers,
        }
    }

    /// The key a page continues from, for row `i` (see [`PageRequest`]).
    pub fn key(&self, i: usize, order: ClaimOrder) -> Option<String> {
        Some(match self {
            Rows::Claims(r) => match order {
                ClaimOrder::Created => r.get(i)?.claim.execution_id.clone(),
                ClaimOrder::Session => r.get(i)?.claim.session_id.clone(),
            },
            Rows::Quarantine(r) => r.get(i)?.execution_id.clone(),
            Rows::Wakes(r) => r.get(i)?.input_id.clone(),
            Rows::Recoveries(r) => r.get(i)?.execution_id.clone(),
            Rows::Owners(r) => r.get(i)?.0.id.clone(),
            Rows::Servers(r) => {
                let s = r.get(i)?;
                format!("{}/{}", s.session_id, s.server)
            }
        })
    }

    /// The session a row is about.
    pub fn session(&self, i: usize) -> Option<String> {
        Some(match self {
            Rows::Claims(r) => r.get(i)?.claim.session_id.clone(),
            Rows::Quarantine(r) => r.get(i)?.session_id.clone(),
            Rows::Wakes(r) => r.get(i)?.session_id.clone(),
            Rows::Recoveries(r) => r.get(i)?.session_id.clone(),
            Rows::Owners(_) => return None,
            Rows::Servers(r) => r.get(i)?.session_id.clone(),
        })
    }

    /// The execution a row is about (what the actions act on).
    pub fn execution(&self, i: usize) -> Option<String> {
        match self {
            Rows::Claims(r) => Some(r.get(i)?.claim.execution_id.clone()),
            Rows::Quarantine(r) => Some(r.get(i)?.execution_id.clone()),
            Rows::Wakes(r) => r.get(i)?.execution_id.clone(),
            Rows::Recoveries(r) => Some(r.get(i)?.execution_id.clone()),
            Rows::Owners(_) | Rows::Servers(_) => None,
        }
    }
}

/// The inspector: one tab's page, its selection, sort and filter.
#[derive(Debug, Clone)]
pub struct Inspector {
    pub tab: Tab,
    pub rows: Rows,
    pub selected: usize,
    /// The page asked for (what a refresh reloads); its `reverse` is the sort.
    pub request: PageRequest,
    /// The page whose rows are on screen (kept when a page asked for is empty).
    pub shown: PageRequest,
    pub order: ClaimOrder,
    pub filter: String,
    pub editing_filter: bool,
    pub counts: Counts,
    /// MCP servers running in this process.
    pub servers: usize,
    /// Lines the detail pane is scrolled down.
    pub detail_scroll: u16,
    /// How many rows come before the page shown.
    pub offset: usize,
    /// The tabs' counts with the filter, while one is set.
    pub filtered: Option<Counts>,
}

impl Inspector {
    /// How many rows `tab` holds: those the filter matches, while one is set.
    pub fn count(&self, tab: Tab) -> i64 {
        match (&self.filtered, tab) {
            (Some(filtered), t) if t != Tab::Servers && !self.filter.is_empty() => {
                t.count(filtered, self.servers)
            }
            _ => tab.count(&self.counts, self.servers),
        }
    }
}

impl Default for Inspector {
    fn default() -> Self {
        Inspector {
            tab: Tab::Claims,
            rows: Rows::Claims(Vec::new()),
            selected: 0,
            request: PageRequest::first(PAGE),
            shown: PageRequest::first(PAGE),
            order: ClaimOrder::Created,
            filter: String::new(),
            editing_filter: false,
            counts: Counts::default(),
            servers: 0,
            detail_scroll: 0,
            offset: 0,
            filtered: None,
        }
    }
}

/// The session list's page.
#[derive(Debug, Clone)]
pub struct SessionList {
    pub rows: Vec<SessionSummary>,
    pub selected: usize,
    pub request: PageRequest,
    /// The page whose rows are on screen.
    pub shown: PageRequest,
    /// The next load keeps `selected` as it is (a move or a new session chose it).
    pub keep_selection: bool,
    /// Sessions whose title, directory or id contain this text (`/`).
    pub filter: String,
    pub editing_filter: bool,
    /// Archived sessions are listed too (`A`).
    pub archived: bool,
    /// How many sessions the list holds (those the filter matches).
    pub total: i64,
    /// How many rows come before the page shown.
    pub offset: usize,
}

impl Default for SessionList {
    fn default() -> Self {
        SessionList {
            rows: Vec::new(),
            selected: 0,
            request: PageRequest::first(PAGE),
            shown: PageRequest::first(PAGE),
            keep_selection: false,
            filter: String::new(),
            editing_filter: false,
            archived: false,
            total: 0,
            offset: 0,
        }
    }
}

/// The key the session list pages by: recent activity, then id.
pub fn session_key(s: &SessionSummary) -> String {
    steward_engine::inspect::pages::session_key(s.time_updated, &s.id)
}

/// How many lines of each scrollable box the last frame could not show (the most
/// it can scroll), written by the view.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Hidden {
    pub help: usize,
    pub permission: usize,
    pub detail: usize,
    /// Rows the session list shows at once (a page for PgUp/PgDn).
    pub list: usize,
    /// Rows the inspector's table shows at once.
    pub table: usize,
    /// Lines the help box shows at once.
    pub help_height: usize,
}

/// What the last frame drew of the transcript, for moves that depend on it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rendered {
    /// Lines of the loaded transcript at the width drawn.
    pub total: usize,
    /// Lines that fit.
    pub height: usize,
    /// The first line drawn.
    pub top: usize,
}

/// The open session's transcript (its newest messages, a page at a time).
#[derive(Debug, Clone, Default)]
pub struct Transcript {
    pub session: Option<SessionRow>,
    /// Its state, read with it.
    pub state: Option<SessionState>,
    pub messages: Vec<MessageRow>,
    /// Rows of the loaded page that cannot be decoded (shown as a warning).
    pub unreadable: Vec<steward_engine::store::rows::Unreadable>,
    pub pending: Vec<InputRow>,
    /// Its quarantined rows, as (execution id, reason).
    pub quarantined: Vec<(String, String)>,
    /// The owner holding its claim and that owner's pid, while one does.
    pub holder: Option<(String, i64)>,
    /// Older messages exist before the first one loaded.
    pub has_older: bool,
    /// How many messages (from the newest) are loaded.
    pub loaded: usize,
    /// `None` follows the newest line; `Some(top)` holds the view at line `top`,
    /// counted from the first line of message `anchor` (so text streaming in below,
    /// or older messages loaded above, do not move it).
    pub scroll: Option<usize>,
    pub anchor: Option<String>,
    /// While the view is held: the first message loaded when it was, and how many
    /// older ones were loaded since.
    pub pin: Option<(i64, usize)>,
    /// Tool output shown whole instead of its first lines.
    pub expanded: bool,
    pub rendered: Cell<Rendered>,
    /// Searching the transcript (`/`, then `n`/`N`).
    pub search: Option<Search>,
    /// The lines (of those drawn) the search finds, written by the view.
    pub found: std::cell::RefCell<Vec<usize>>,
    /// The first line of each loaded message, written by the view.
    pub starts: std::cell::RefCell<Vec<usize>>,
}

/// A search in the transcript.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Search {
    pub query: String,
    /// Still being typed.
    pub editing: bool,
    /// The line of the match shown (of all the transcript's lines drawn).
    pub current: Option<usize>,
}

/// How much of a running command's output the screen keeps.
pub const LIVE_BYTES: usize = 16 * 1024;

/// A provider step that failed before any output and is tried again at `at_ms`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retry {
    pub at_ms: i64,
    pub attempt: u32,
    pub of: u32,
    pub error: String,
}

/// What the last launch recovery found, for the header and the panel.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Launch {
    pub report: Option<RecoveryReport>,
    /// Why the launch recovery did not finish (a full disk, say), when it did not:
    /// the background retries it.
    pub error: Option<String>,
    /// When it ran (ms since the epoch).
    pub at_ms: i64,
    /// Recovery wakes pending or parked after it, as (execution, session, parked).
    pub wakes: Vec<(String, String, bool)>,
    /// Wakes waiting beyond those listed.
    pub more_wakes: usize,
    /// Recovery wakes this launch quarantined (the crash loop's parked ones aside), as
    /// (execution, session, reason): quarantined after the launch's redrive and not
    /// before the launch began.
    pub quarantined_wakes: Vec<(String, String, String)>,
    /// Every row still quarantined after the launch, claims and wakes alike, as the
    /// Quarantine tab lists them (the first ones, by execution).
    pub quarantine: Vec<Quarantined>,
    /// How many rows are quarantined in all: the Quarantine tab's count.
    pub quarantine_total: usize,
    /// Sessions the launch woke: the continuations of turns interrupted earlier (by a
    /// crash, or left running at the last quit) that start now.
    pub continued: Vec<String>,
    /// Whether recovered sessions continue on their own (`recovery.auto_continue`).
    pub auto_continue: bool,
    /// The titles of the sessions the panel names.
    pub titles: BTreeMap<String, String>,
    /// The session to open (`--continue`, `--session`).
    pub open: Option<String>,
    /// A note for the footer (`--continue` with no session to continue).
    pub note: Option<String>,
}

/// A row still quarantined after the launch, as the Quarantine tab lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quarantined {
    /// `claim` or `recovery`.
    pub kind: String,
    pub execution_id: String,
    pub session_id: String,
    pub reason: String,
}

/// How a session's last turn here ended when it did not end as asked: shown in its
/// transcript and, while its claim stays behind, as its badge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// What stopped it, in a sentence.
    pub text: String,
    /// The turn left its claim behind (a store failure): the session reads as
    /// running in the file until recovery takes the claim.
    pub holds_claim: bool,
    /// When it ended (ms since the epoch): a message written later supersedes it.
    pub at_ms: i64,
}

/// The last recovery seen: the launch's, or a later one in the background.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LastRecovery {
    /// When (ms since the epoch).
    pub at_ms: i64,
    /// Executions reconciled or quarantined.
    pub executions: usize,
}

/// One line of the after-crash panel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PanelLine {
    pub symbol: &'static str,
    pub session_id: String,
    pub execution_id: String,
    pub what: String,
    pub detail: String,
    /// Where Enter goes: the session (chat) or an inspector tab.
    pub target: Option<Tab>,
    /// Whether `w` and `d` apply (a wake that waits on the user, a quarantined row).
    pub actionable: bool,
    /// What was done to it since (`woken`, `discarded`).
    pub done: Option<String>,
}

/// An inspector action, confirmed with `y`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    Wake,
    Discard,
    Retry,
}

impl Act {
    pub fn verb(self) -> &'static str {
        match self {
            Act::Wake => "wake",
            Act::Discard => "discard",
            Act::Retry => "retry",
        }
    }
}

/// What sits over the screen.
#[derive(Debug, Clone)]
pub enum Overlay {
    Help {
        scroll: usize,
    },
    Panel {
        lines: Vec<PanelLine>,
        selected: usize,
    },
    Confirm {
        act: Act,
        execution_id: String,
        /// What the row is (its session, its kind), to tell rows apart.
        label: String,
        /// The panel line it came from, marked when the action is done.
        from_panel: Option<usize>,
    },
    /// Quitting while turns run here.
    Quit {
        running: Vec<String>,
    },
    Permission {
        id: u64,
        request: PermissionRequest,
        /// Lines of the input scrolled.
        scroll: u16,
    },
    /// Typing a session's new title.
    Rename {
        session: String,
        title: String,
    },
    /// Deleting a session, confirmed with `y`.
    Delete {
        session: String,
        title: String,
    },
}

/// Session housekeeping (protocol §3.6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Housekeep {
    Rename(String),
    /// Archive (`true`) or bring back.
    Archive(bool),
    Delete,
}

/// Everything on screen.
#[derive(Debug)]
pub struct App {
    pub mode: Mode,
    pub screen: Screen,
    pub pane: Pane,
    pub theme: Theme,
    pub data_dir: String,
    pub owner_id: Option<String>,
    /// The directory `n` creates sessions in.
    pub cwd: String,
    pub launch: Launch,
    pub counts: Counts,
    pub sessions: SessionList,
    pub transcript: Transcript,
    pub prompt: TextArea<'static>,
    pub inspector: Inspector,
    pub overlay: Vec<Overlay>,
    /// Sessions with an execution running here.
    pub running: BTreeSet<String>,
    /// Sessions whose last turn here did not end as asked, and how it ended.
    pub failures: BTreeMap<String, Failure>,
    /// Sessions whose provider step waits to be tried again, and until when.
    pub retrying: BTreeMap<String, Retry>,
    /// Running commands' output so far, by call id (its last [`LIVE_BYTES`]).
    pub live: crate::view::transcript::Live,
    /// This owner's claims as (session, expires_at): the header's lease health.
    pub own_claims: Vec<(String, i64)>,
    /// Wall-clock ms, moved by ticks, loads and every message the loop handles.
    pub now_ms: i64,
    /// A one-line note in the footer (an action's result, an error); the next key
    /// clears it.
    pub status: Option<String>,
    /// Bumped by every frame drawn while a turn runs (the spinner).
    pub frame: u64,
    pub quit: bool,
    /// The last recovery seen (the header).
    pub last_recovery: Option<LastRecovery>,
    /// Monotonic milliseconds of the message being handled (set by the runtime).
    pub mono_ms: u64,
    /// When the previous key arrived.
    pub last_key_ms: u64,
    /// When the overlay on top appeared.
    pub overlay_since: u64,
    /// The terminal's size.
    pub size: (u16, u16),
    /// Quitting waits for cancelled turns to stop.
    pub quitting: bool,
    /// The local time zone's offset, for times of day.
    pub utc_offset_s: i32,
    /// What the last frame could not show of the scrollable boxes.
    pub hidden: Cell<Hidden>,
    /// When a key last went into text (the prompt, the filter), or was taken for
    /// typing that ran on: what a question's answer must not follow too closely.
    pub last_typed_ms: u64,
    /// A prompt was sent to a session still being created.
    pub creating: bool,
    /// The last time a turn here lost its claim to another process (this one was
    /// stopped or paused past its lease), as (session, ms since the epoch): the
    /// header keeps saying so.
    pub lease_lost: Option<(String, i64)>,
    /// Ctrl-X was pressed in the prompt: Ctrl-E next opens the editor.
    pub chord: bool,
}

impl App {
    pub fn new(mode: Mode, data_dir: String, cwd: String, theme: Theme, now_ms: i64) -> App {
        let mut prompt = TextArea::default();
        prompt.set_cursor_line_style(ratatui::style::Style::default());
        prompt.set_placeholder_text("Write to the agent…");
        App {
            mode,
            screen: match mode {
                Mode::Chat => Screen::Chat,
                Mode::ReadOnly => Screen::Inspector,
            },
            pane: Pane::Prompt,
            theme,
            data_dir,
            owner_id: None,
            cwd,
            launch: Launch::default(),
            counts: Counts::default(),
            sessions: SessionList::default(),
            transcript: Transcript::default(),
            prompt,
            inspector: Inspector::default(),
            overlay: Vec::new(),
            running: BTreeSet::new(),
            failures: BTreeMap::new(),
            retrying: BTreeMap::new(),
            live: Default::default(),
            own_claims: Vec::new(),
            now_ms,
            status: None,
            frame: 0,
            quit: false,
            last_recovery: None,
            mono_ms: 0,
            last_key_ms: 0,
            overlay_since: 0,
            size: (120, 40),
            quitting: false,
            utc_offset_s: 0,
            hidden: Cell::new(Hidden::default()),
            last_typed_ms: 0,
            creating: false,
            lease_lost: None,
            chord: false,
        }
    }

    /// The session the chat shows.
    pub fn current_session(&self) -> Option<&str> {
        self.transcript.session.as_ref().map(|s| s.id.as_str())
    }

    /// The failure to show in the open session's transcript: its last turn's here,
    /// unless something was written to the session since.
    pub fn current_failure(&self) -> Option<&Failure> {
        let failure = self.failures.get(self.current_session()?)?;
        let newest = self
            .transcript
            .messages
            .iter()
            .map(|m| m.time_updated.max(m.time_created))
            .max()
            .unwrap_or(i64::MIN);
        (newest <= failure.at_ms && !self.current_is_running()).then_some(failure)
    }

    /// Whether the open session runs here now.
    pub fn current_is_running(&self) -> bool {
        self.current_session()
            .is_some_and(|s| self.running.contains(s))
    }

    /// Whether something on screen counts down (so the clock must tick): a claim
    /// whose expiry is still ahead, or a turn running here (its spinner and lease).
    pub fn needs_ticks(&self) -> bool {
        let counting = self.screen == Screen::Inspector
            && matches!(&self.inspector.rows, Rows::Claims(rows) if rows.iter().any(|c| {
                c.claim.recovery_error.is_none()
                    && c.claim.expires_at.as_i64().is_some_and(|at| at > self.now_ms)
            }));
        counting || !self.running.is_empty()
    }

    /// Whether a permission question of `session` waits for the user.
    pub fn waits_for_permission(&self, session: &str) -> bool {
        self.overlay.iter().any(
            |o| matches!(o, Overlay::Permission { request, .. } if request.session_id == session),
        )
    }

    /// Whether the terminal is too small for the layout.
    pub fn too_small(&self) -> bool {
        self.size.0 < crate::view::MIN_WIDTH || self.size.1 < crate::view::MIN_HEIGHT
    }
}

/// Everything that changes an [`App`].
#[derive(Debug)]
pub enum Msg {
    Key(KeyEvent),
    Paste(String),
    /// The terminal's new size.
    Resize(u16, u16),
    /// The mouse wheel, over whatever has the focus: up or down.
    Wheel {
        up: bool,
    },
    /// SIGTERM or SIGHUP: leave as `q` does, without asking.
    Terminate,
    /// The clock moved (only while something counts down).
    Tick(i64),
    /// The database changed (another process, or this one): reload what is shown.
    Changed,
    Engine(EngineEvent),
    Loaded(Box<Loaded>),
    /// A tool asks for permission.
    Permission {
        id: u64,
        request: PermissionRequest,
    },
    /// An effect finished: a note for the footer.
    Done(Result<String, String>),
    /// A prompt was not admitted: it goes back into the editor.
    SubmitFailed {
        prompt: String,
        error: String,
    },
    /// An inspector action finished (from the panel's line `from_panel`).
    Acted {
        result: Result<String, String>,
        act: Act,
        from_panel: Option<usize>,
    },
    /// Cancelled turns stopped: quitting can go on.
    Stopped,
    /// A session was created (then opened).
    Created(SessionRow),
    /// The launch recovery's report.
    Launched(Launch),
    /// Session housekeeping finished.
    Housekept {
        session: String,
        op: Housekeep,
        result: Result<String, String>,
    },
    /// The editor exited: the prompt it left, or why there is none.
    Edited(Result<String, String>),
}

/// What a load brought back.
#[derive(Debug, Default)]
pub struct Loaded {
    pub now_ms: i64,
    pub counts: Option<Counts>,
    pub sessions: Option<(PageRequest, Vec<SessionSummary>)>,
    pub transcript: Option<LoadedTranscript>,
    pub rows: Option<(PageRequest, Rows)>,
    pub own_claims: Option<Vec<(String, i64)>>,
    /// How many sessions the session list holds (with its filter).
    pub session_total: Option<i64>,
    /// How many rows each inspector tab holds with the table's filter, when one is set.
    pub filtered_counts: Option<Counts>,
    /// The MCP servers this process runs, when it runs any (`steward`).
    pub servers: Option<Vec<RunningServer>>,
    /// What could not be read (each part of a load stands alone).
    pub errors: Vec<String>,
}

#[derive(Debug)]
pub struct LoadedTranscript {
    pub session: SessionRow,
    pub state: Option<SessionState>,
    /// Which messages were asked for.
    pub extent: Extent,
    pub messages: Vec<MessageRow>,
    pub unreadable: Vec<steward_engine::store::rows::Unreadable>,
    pub pending: Vec<InputRow>,
    /// Its quarantined rows, as (execution id, reason).
    pub quarantined: Vec<(String, String)>,
    /// The owner holding its claim and that owner's pid, while one does.
    pub holder: Option<(String, i64)>,
    pub has_older: bool,
}

/// Which messages of a transcript to load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Extent {
    /// The newest `n`.
    Newest(usize),
    /// From `seq` to the newest, and `older` messages before it: a view held up
    /// the transcript keeps what it shows loaded however many messages arrive
    /// below.
    From { seq: i64, older: usize },
}

/// What the screen needs loaded.
#[derive(Debug, Clone, PartialEq)]
pub struct View {
    pub sessions: Option<PageRequest>,
    /// The session list shows archived sessions too.
    pub archived: bool,
    /// A session and which of its messages.
    pub transcript: Option<(String, Extent)>,
    pub table: Option<(Tab, ClaimOrder, PageRequest)>,
    pub owner_id: Option<String>,
}

/// What `update` asks the runtime to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    Load(Box<View>),
    /// Admit `prompt` to `session` (a new session in the current directory if none)
    /// and run it.
    Submit {
        session: Option<String>,
        prompt: String,
    },
    Cancel(String),
    Act {
        act: Act,
        execution_id: String,
        from_panel: Option<usize>,
    },
    /// Answer question `id`: allow once or always (in its session), or deny.
    Answer {
        id: u64,
        allow: bool,
        always: bool,
    },
    /// Add this tool to `tools.allow`: in the config file, and for every session
    /// of this run.
    SaveTool {
        tool: String,
    },
    /// Quit; cancel the running turns first when asked.
    Quit {
        cancel_running: bool,
    },
    /// Run `session` on this process's provider and model from here.
    ChooseModel(String),
    /// Rename, archive or delete a session.
    Housekeep {
        session: String,
        op: Housekeep,
    },
    /// Put this text on the clipboard (OSC 52).
    Copy(String),
    /// Edit this prompt in `$VISUAL` / `$EDITOR`.
    EditPrompt(String),
}
