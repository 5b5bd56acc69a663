//! The one keymap table: it drives the key handling ([`lookup`]) and generates the
//! `?` help overlay ([`help_lines`]), so the two can never disagree.

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

/// Where a binding applies. [`lookup`] tries the most specific context first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Context {
    /// Everywhere, even while typing in the prompt.
    Always,
    /// Everywhere outside the prompt editor, unless a more specific binding takes the
    /// key.
    Global,
    /// The prompt editor has the focus.
    Prompt,
    /// The chat, outside the prompt editor.
    Chat,
    /// The session list has the focus.
    Sessions,
    /// The transcript has the focus.
    Transcript,
    /// The inspector.
    Inspector,
    /// Editing a table filter.
    Filter,
    /// The after-crash panel.
    Panel,
    /// A question (confirmations, quitting while turns run).
    Confirm,
    /// The permission modal.
    Permission,
    /// The help overlay.
    Help,
    /// Typing a session's new title.
    Rename,
    /// Typing a search in the transcript.
    Search,
}

impl Context {
    pub fn title(self) -> &'static str {
        match self {
            Context::Always => "anywhere, even while typing",
            Context::Global => "outside the prompt",
            Context::Prompt => "prompt",
            Context::Chat => "chat",
            Context::Sessions => "sessions",
            Context::Transcript => "transcript",
            Context::Inspector => "inspector",
            Context::Filter => "filter",
            Context::Panel => "after-crash panel",
            Context::Confirm => "questions",
            Context::Permission => "permission",
            Context::Help => "help",
            Context::Rename => "renaming a session",
            Context::Search => "searching the transcript",
        }
    }
}

/// What a key does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyAction {
    Send,
    Newline,
    /// Cancel the running turn of the current session.
    CancelTurn,
    /// Cancel the running turn, or quit when nothing runs.
    Interrupt,
    Quit,
    NextPane,
    PrevPane,
    Up,
    Down,
    Top,
    Bottom,
    PageUp,
    PageDown,
    /// Scroll the inspector's detail pane.
    DetailUp,
    DetailDown,
    NewSession,
    /// Run the current session on this process's provider and model from here.
    ChooseModel,
    ToggleInspector,
    NextTab,
    PrevTab,
    Tab(u8),
    Filter,
    CycleSort,
    Wake,
    Discard,
    Retry,
    Help,
    /// Enter: open, jump, expand.
    Open,
    /// Esc: close, leave.
    Close,
    Yes,
    No,
    /// Cancel running turns, then quit.
    CancelAndQuit,
    AllowOnce,
    AllowAlways,
    AllowAndSave,
    Deny,
    /// Ctrl-U: clear what is typed (a filter, a search, a title).
    ClearText,
    /// Search the transcript (`/`), then the next or previous match.
    Search,
    NextMatch,
    PrevMatch,
    /// The session list: rename, archive (or bring back), delete the selected
    /// session; show archived sessions too.
    Rename,
    Archive,
    Delete,
    ShowArchived,
    /// Copy the message in view, or its last code block or tool output (OSC 52).
    Copy,
    CopyBlock,
    /// Ctrl-X, the first key of Ctrl-X Ctrl-E (the prompt in `$EDITOR`).
    EditorChord,
}

/// A key: its code and the modifiers that must be held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key {
    pub code: KeyCode,
    pub modifiers: KeyModifiers,
}

const fn key(code: KeyCode) -> Key {
    Key {
        code,
        modifiers: KeyModifiers::NONE,
    }
}

const fn ctrl(c: char) -> Key {
    Key {
        code: KeyCode::Char(c),
        modifiers: KeyModifiers::CONTROL,
    }
}

const fn ch(c: char) -> Key {
    key(KeyCode::Char(c))
}

/// One row of the table.
#[derive(Debug, Clone, Copy)]
pub struct Binding {
    pub context: Context,
    pub keys: &'static [Key],
    /// How the keys are written in help.
    pub label: &'static str,
    pub action: KeyAction,
    pub help: &'static str,
}

use Context as C;
use KeyAction as A;

/// Every key Steward's screens answer to.
pub const KEYMAP: &[Binding] = &[
    Binding {
        context: C::Prompt,
        keys: &[key(KeyCode::Enter)],
        label: "Enter",
        action: A::Send,
        help: "send (queued as a new input while a turn runs)",
    },
    Binding {
        context: C::Prompt,
        keys: &[
            ctrl('j'),
            Key {
                code: KeyCode::Enter,
                modifiers: KeyModifiers::SHIFT,
            },
            Key {
                code: KeyCode::Enter,
                modifiers: KeyModifiers::ALT,
            },
        ],
        label: "Ctrl-J / Shift-Enter",
        action: A::Newline,
        help: "new line",
    },
    Binding {
        context: C::Prompt,
        keys: &[key(KeyCode::Esc)],
        label: "Esc",
        action: A::CancelTurn,
        help: "cancel the running turn (recorded like Ctrl-C in `run`)",
    },
    Binding {
        context: C::Prompt,
        keys: &[key(KeyCode::Tab)],
        label: "Tab",
        action: A::NextPane,
        help: "leave the prompt for the next pane",
    },
    Binding {
        context: C::Prompt,
        keys: &[key(KeyCode::BackTab)],
        label: "Shift-Tab",
        action: A::PrevPane,
        help: "leave the prompt for the previous pane",
    },
    Binding {
        context: C::Help,
        keys: &[key(KeyCode::Esc), ch('?'), ch('q'), key(KeyCode::Enter)],
        label: "Esc ? q Enter",
        action: A::Close,
        help: "close help",
    },
    Binding {
        context: C::Help,
        keys: &[ch('j'), key(KeyCode::Down)],
        label: "j ↓",
        action: A::Down,
        help: "scroll help",
    },
    Binding {
        context: C::Help,
        keys: &[ch('k'), key(KeyCode::Up)],
        label: "k ↑",
        action: A::Up,
        help: "scroll help",
    },
    Binding {
        context: C::Help,
        keys: &[key(KeyCode::PageDown)],
        label: "PgDn",
        action: A::PageDown,
        help: "scroll help a page",
    },
    Binding {
        context: C::Help,
        keys: &[key(KeyCode::PageUp)],
        label: "PgUp",
        action: A::PageUp,
        help: "scroll help a page",
    },
    Binding {
        context: C::Help,
        keys: &[ch('g'), key(KeyCode::Home)],
        label: "g Home",
        action: A::Top,
        help: "top of help",
    },
    Binding {
        context: C::Permission,
        keys: &[ch('y')],
        label: "y",
        action: A::AllowOnce,
        help: "allow this call once (keys typed just before the question are ignored)",
    },
    Binding {
        context: C::Permission,
        keys: &[ch('j'), key(KeyCode::Down)],
        label: "j ↓",
        action: A::Down,
        help: "scroll the call's input",
    },
    Binding {
        context: C::Permission,
        keys: &[ch('k'), key(KeyCode::Up)],
        label: "k ↑",
        action: A::Up,
        help: "scroll the call's input",
    },
    Binding {
        context: C::Permission,
        keys: &[ch('a')],
        label: "a",
        action: A::AllowAlways,
        help: "always allow this tool while Steward runs",
    },
    Binding {
        context: C::Permission,
        keys: &[ch('s')],
        label: "s",
        action: A::AllowAndSave,
        help: "always allow this tool, and save it to tools.allow in the config file",
    },
    Binding {
        context: C::Permission,
        keys: &[ch('n'), key(KeyCode::Esc)],
        label: "n Esc",
        action: A::Deny,
        help: "deny",
    },
    Binding {
        context: C::Confirm,
        keys: &[ch('y')],
        label: "y",
        action: A::Yes,
        help: "yes (keys typed just before the question are ignored)",
    },
    Binding {
        context: C::Confirm,
        keys: &[ch('c')],
        label: "c",
        action: A::CancelAndQuit,
        help: "cancel the running turns, then quit",
    },
    Binding {
        context: C::Confirm,
        keys: &[ch('n'), key(KeyCode::Esc)],
        label: "n Esc",
        action: A::No,
        help: "no",
    },
    Binding {
        context: C::Prompt,
        keys: &[ctrl('x')],
        label: "Ctrl-X Ctrl-E",
        action: A::EditorChord,
        help: "edit the prompt in $VISUAL or $EDITOR (the screen comes back when it exits)",
    },
    Binding {
        context: C::Filter,
        keys: &[ctrl('u')],
        label: "Ctrl-U",
        action: A::ClearText,
        help: "clear the filter (keep typing)",
    },
    Binding {
        context: C::Search,
        keys: &[key(KeyCode::Enter)],
        label: "Enter",
        action: A::Open,
        help: "search, then n / N for the next or previous match",
    },
    Binding {
        context: C::Search,
        keys: &[key(KeyCode::Esc)],
        label: "Esc",
        action: A::Close,
        help: "stop searching",
    },
    Binding {
        context: C::Search,
        keys: &[ctrl('u')],
        label: "Ctrl-U",
        action: A::ClearText,
        help: "clear the search",
    },
    Binding {
        context: C::Rename,
        keys: &[key(KeyCode::Enter)],
        label: "Enter",
        action: A::Open,
        help: "rename the session",
    },
    Binding {
        context: C::Rename,
        keys: &[key(KeyCode::Esc)],
        label: "Esc",
        action: A::Close,
        help: "leave the title as it was",
    },
    Binding {
        context: C::Rename,
        keys: &[ctrl('u')],
        label: "Ctrl-U",
        action: A::ClearText,
        help: "clear the title",
    },
    Binding {
        context: C::Filter,
        keys: &[key(KeyCode::Enter)],
        label: "Enter",
        action: A::Open,
        help: "apply the filter",
    },
    Binding {
        context: C::Filter,
        keys: &[key(KeyCode::Esc)],
        label: "Esc",
        action: A::Close,
        help: "clear the filter",
    },
    Binding {
        context: C::Panel,
        keys: &[key(KeyCode::Enter)],
        label: "Enter",
        action: A::Open,
        help: "go to that session or inspector row",
    },
    Binding {
        context: C::Panel,
        keys: &[key(KeyCode::Esc)],
        label: "Esc",
        action: A::Close,
        help: "close the panel",
    },
    Binding {
        context: C::Panel,
        keys: &[ch('j'), key(KeyCode::Down)],
        label: "j ↓",
        action: A::Down,
        help: "next line",
    },
    Binding {
        context: C::Panel,
        keys: &[ch('k'), key(KeyCode::Up)],
        label: "k ↑",
        action: A::Up,
        help: "previous line",
    },
    Binding {
        context: C::Panel,
        keys: &[ch('w')],
        label: "w",
        action: A::Wake,
        help: "wake the selected recovery now",
    },
    Binding {
        context: C::Panel,
        keys: &[ch('d')],
        label: "d",
        action: A::Discard,
        help: "discard the selected row",
    },
    Binding {
        context: C::Inspector,
        keys: &[key(KeyCode::Right), key(KeyCode::Tab)],
        label: "→ Tab",
        action: A::NextTab,
        help: "next tab",
    },
    Binding {
        context: C::Inspector,
        keys: &[key(KeyCode::Left), key(KeyCode::BackTab)],
        label: "← Shift-Tab",
        action: A::PrevTab,
        help: "previous tab",
    },
    Binding {
        context: C::Inspector,
        keys: &[ch('1')],
        label: "1",
        action: A::Tab(0),
        help: "Claims",
    },
    Binding {
        context: C::Inspector,
        keys: &[ch('2')],
        label: "2",
        action: A::Tab(1),
        help: "Quarantine",
    },
    Binding {
        context: C::Inspector,
        keys: &[ch('3')],
        label: "3",
        action: A::Tab(2),
        help: "Wakes",
    },
    Binding {
        context: C::Inspector,
        keys: &[ch('4')],
        label: "4",
        action: A::Tab(3),
        help: "Recoveries",
    },
    Binding {
        context: C::Inspector,
        keys: &[ch('5')],
        label: "5",
        action: A::Tab(4),
        help: "Owners",
    },
    Binding {
        context: C::Inspector,
        keys: &[ch('6')],
        label: "6",
        action: A::Tab(5),
        help: "MCP servers of this process",
    },
    Binding {
        context: C::Inspector,
        keys: &[ch('J')],
        label: "J",
        action: A::DetailDown,
        help: "scroll the detail pane down",
    },
    Binding {
        context: C::Inspector,
        keys: &[ch('K')],
        label: "K",
        action: A::DetailUp,
        help: "scroll the detail pane up",
    },
    Binding {
        context: C::Inspector,
        keys: &[ch('/')],
        label: "/",
        action: A::Filter,
        help: "filter the table",
    },
    Binding {
        context: C::Inspector,
        keys: &[ch('s')],
        label: "s",
        action: A::CycleSort,
        help: "sort: oldest or newest first (Claims: also by session)",
    },
    Binding {
        context: C::Inspector,
        keys: &[ch('w')],
        label: "w",
        action: A::Wake,
        help: "wake now (chat only; confirm with y)",
    },
    Binding {
        context: C::Inspector,
        keys: &[ch('d')],
        label: "d",
        action: A::Discard,
        help: "discard (chat only; confirm with y)",
    },
    Binding {
        context: C::Inspector,
        keys: &[ch('r')],
        label: "r",
        action: A::Retry,
        help: "retry a quarantined claim (chat only; confirm with y)",
    },
    Binding {
        context: C::Inspector,
        keys: &[ch('i'), key(KeyCode::Esc)],
        label: "i Esc",
        action: A::ToggleInspector,
        help: "back to the chat (in `steward`)",
    },
    Binding {
        context: C::Sessions,
        keys: &[ch('n')],
        label: "n",
        action: A::NewSession,
        help: "new session in the current directory",
    },
    Binding {
        context: C::Sessions,
        keys: &[key(KeyCode::Enter)],
        label: "Enter",
        action: A::Open,
        help: "open the session and write to it",
    },
    Binding {
        context: C::Sessions,
        keys: &[ch('/')],
        label: "/",
        action: A::Filter,
        help: "filter by title or directory as you type",
    },
    Binding {
        context: C::Sessions,
        keys: &[ch('r')],
        label: "r",
        action: A::Rename,
        help: "rename the session",
    },
    Binding {
        context: C::Sessions,
        keys: &[ch('a')],
        label: "a",
        action: A::Archive,
        help: "archive the session (or bring an archived one back)",
    },
    Binding {
        context: C::Sessions,
        keys: &[ch('d')],
        label: "d",
        action: A::Delete,
        help: "delete the session (asks first)",
    },
    Binding {
        context: C::Sessions,
        keys: &[ch('A')],
        label: "A",
        action: A::ShowArchived,
        help: "show or hide archived sessions",
    },
    Binding {
        context: C::Transcript,
        keys: &[key(KeyCode::Enter)],
        label: "Enter",
        action: A::Open,
        help: "expand or collapse tool output",
    },
    Binding {
        context: C::Transcript,
        keys: &[ch('/')],
        label: "/",
        action: A::Search,
        help: "search the transcript",
    },
    Binding {
        context: C::Transcript,
        keys: &[ch('n')],
        label: "n",
        action: A::NextMatch,
        help: "next match (down)",
    },
    Binding {
        context: C::Transcript,
        keys: &[ch('N')],
        label: "N",
        action: A::PrevMatch,
        help: "previous match (up)",
    },
    Binding {
        context: C::Transcript,
        keys: &[ch('y')],
        label: "y",
        action: A::Copy,
        help: "copy the message in view (the newest, or the one at the top when scrolled) to the clipboard (OSC 52)",
    },
    Binding {
        context: C::Transcript,
        keys: &[ch('Y')],
        label: "Y",
        action: A::CopyBlock,
        help: "copy that message's last code block, or its last tool output",
    },
    Binding {
        context: C::Chat,
        keys: &[ch('i')],
        label: "i",
        action: A::ToggleInspector,
        help: "toggle the inspector",
    },
    Binding {
        context: C::Chat,
        keys: &[ch('M')],
        label: "M",
        action: A::ChooseModel,
        help: "run this session on this process's provider and model from here",
    },
    Binding {
        context: C::Chat,
        keys: &[key(KeyCode::Esc)],
        label: "Esc",
        action: A::CancelTurn,
        help: "cancel the running turn",
    },
    Binding {
        context: C::Chat,
        keys: &[key(KeyCode::Tab)],
        label: "Tab",
        action: A::NextPane,
        help: "next pane",
    },
    Binding {
        context: C::Chat,
        keys: &[key(KeyCode::BackTab)],
        label: "Shift-Tab",
        action: A::PrevPane,
        help: "previous pane",
    },
    Binding {
        context: C::Always,
        keys: &[ctrl('c')],
        label: "Ctrl-C",
        action: A::Interrupt,
        help: "cancel the running turn, or quit when idle",
    },
    Binding {
        context: C::Always,
        keys: &[key(KeyCode::F(1))],
        label: "F1",
        action: A::Help,
        help: "help",
    },
    Binding {
        context: C::Global,
        keys: &[ch('q')],
        label: "q",
        action: A::Quit,
        help: "quit (asks first while a turn runs)",
    },
    Binding {
        context: C::Global,
        keys: &[ch('?')],
        label: "?",
        action: A::Help,
        help: "help",
    },
    Binding {
        context: C::Global,
        keys: &[ch('j'), key(KeyCode::Down)],
        label: "j ↓",
        action: A::Down,
        help: "move down",
    },
    Binding {
        context: C::Global,
        keys: &[ch('k'), key(KeyCode::Up)],
        label: "k ↑",
        action: A::Up,
        help: "move up",
    },
    Binding {
        context: C::Global,
        keys: &[ch('g'), key(KeyCode::Home)],
        label: "g Home",
        action: A::Top,
        help: "first row (transcript: top of what is loaded, loading older)",
    },
    Binding {
        context: C::Global,
        keys: &[ch('G'), key(KeyCode::End)],
        label: "G End",
        action: A::Bottom,
        help: "last row (transcript: follow the newest line)",
    },
    Binding {
        context: C::Global,
        keys: &[key(KeyCode::PageUp)],
        label: "PgUp",
        action: A::PageUp,
        help: "a page up (as many rows or lines as the pane shows)",
    },
    Binding {
        context: C::Global,
        keys: &[key(KeyCode::PageDown)],
        label: "PgDn",
        action: A::PageDown,
        help: "a page down",
    },
];

impl Key {
    fn matches(&self, event: &KeyEvent) -> bool {
        // Shift is part of an uppercase character, not a modifier to match.
        let modifiers = match event.code {
            KeyCode::Char(_) => event.modifiers - KeyModifiers::SHIFT,
            KeyCode::BackTab => event.modifiers - KeyModifiers::SHIFT,
            _ => event.modifiers,
        };
        self.code == event.code && self.modifiers == modifiers
    }
}

/// The action of `event` in `contexts` (most specific first), if any binds it.
pub fn lookup(contexts: &[Context], event: &KeyEvent) -> Option<KeyAction> {
    contexts.iter().find_map(|context| {
        KEYMAP
            .iter()
            .find(|b| b.context == *context && b.keys.iter().any(|k| k.matches(event)))
            .map(|b| b.action)
    })
}

/// The help overlay: every binding of the screen, grouped by where it applies —
/// for `steward inspect` (`read_only`), only the inspector's.
pub fn help_lines(read_only: bool) -> Vec<(Context, &'static str, &'static str)> {
    let order: &[Context] = if read_only {
        &[C::Always, C::Global, C::Inspector, C::Filter, C::Help]
    } else {
        &[
            C::Always,
            C::Global,
            C::Prompt,
            C::Chat,
            C::Sessions,
            C::Transcript,
            C::Search,
            C::Rename,
            C::Inspector,
            C::Filter,
            C::Panel,
            C::Permission,
            C::Confirm,
            C::Help,
        ]
    };
    order
        .iter()
        .flat_map(|context| {
            KEYMAP
                .iter()
                .filter(move |b| b.context == *context)
                .filter_map(move |b| {
                    let help = if read_only {
                        read_only_help(b)?
                    } else {
                        b.help
                    };
                    Some((b.context, b.label, help))
                })
        })
        .collect()
}

/// What a key does in `steward inspect`, which runs nothing and has no chat: its
/// actions and the chat's keys are not there, and no turn is ever running.
fn read_only_help(binding: &Binding) -> Option<&'static str> {
    match binding.action {
        A::Wake | A::Discard | A::Retry | A::ToggleInspector => None,
        A::Interrupt | A::Quit => Some("quit"),
        A::Top if binding.context == C::Global => Some("first row"),
        A::Bottom if binding.context == C::Global => Some("last row"),
        _ => Some(binding.help),
    }
}
