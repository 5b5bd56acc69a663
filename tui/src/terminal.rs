//! Taking the terminal and giving it back on every exit path: a normal return, an
//! error, and a panic of the screen's thread (the hook restores before the panic
//! message is printed). A panic on another thread (an engine task, which the
//! engine survives) goes to the log instead, and the screen stays as it is.

use std::io::{self, Stdout, Write};

use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::event::{
    DisableBracketedPaste, DisableMouseCapture, EnableBracketedPaste, EnableMouseCapture,
    KeyboardEnhancementFlags, PopKeyboardEnhancementFlags, PushKeyboardEnhancementFlags,
};
use ratatui::crossterm::terminal::{
    EnterAlternateScreen, LeaveAlternateScreen, disable_raw_mode, enable_raw_mode,
};
use ratatui::crossterm::{cursor, execute};

pub type Term = Terminal<CrosstermBackend<Stdout>>;

/// The terminal, taken: raw mode, the alternate screen, bracketed paste, keys told
/// apart (Shift-Enter), and mouse capture only when asked for. Dropping it restores
/// everything.
#[derive(Debug)]
pub struct Taken {
    pub terminal: Term,
    mouse: bool,
}

impl Taken {
    pub fn take(mouse: bool) -> io::Result<Taken> {
        let _ = SCREEN_THREAD.set(std::thread::current().id());
        install_panic_hook();
        enable_raw_mode()?;
        let mut out = io::stdout();
        execute!(
            out,
            EnterAlternateScreen,
            EnableBracketedPaste,
            PushKeyboardEnhancementFlags(KeyboardEnhancementFlags::DISAMBIGUATE_ESCAPE_CODES)
        )?;
        if mouse {
            execute!(out, EnableMouseCapture)?;
        }
        let terminal = Terminal::new(CrosstermBackend::new(out))?;
        Ok(Taken { terminal, mouse })
    }
}

impl Taken {
    /// Takes the terminal back after [`restore`] handed it to another program (the
    /// editor), and redraws everything at the next frame.
    pub fn resume(&mut self) -> io::Result<()> {
        enable_raw_mode()?;
        execute!(
            io::stdout(),
            EnterAlternateScreen,
            EnableBracketedPaste,
            PushKeyboardEnhancementFlags(KeyboardEnhancementFlags::DISAMBIGUATE_ESCAPE_CODES)
        )?;
        if self.mouse {
            execute!(io::stdout(), EnableMouseCapture)?;
        }
        // Cleared without `Terminal::clear`, which asks the terminal where its cursor
        // is (and waits for the answer); both buffers emptied, so the next frame is
        // drawn whole.
        execute!(
            io::stdout(),
            ratatui::crossterm::terminal::Clear(ratatui::crossterm::terminal::ClearType::All)
        )?;
        self.terminal.swap_buffers();
        self.terminal.swap_buffers();
        Ok(())
    }
}

impl Drop for Taken {
    fn drop(&mut self) {
        restore();
    }
}

/// Leaves the alternate screen, shows the cursor and turns every mode back off.
/// Safe to call more than once.
pub fn restore() {
    let mut out = io::stdout();
    let _ = execute!(
        out,
        PopKeyboardEnhancementFlags,
        DisableMouseCapture,
        DisableBracketedPaste,
        LeaveAlternateScreen,
        cursor::Show
    );
    let _ = disable_raw_mode();
    let _ = out.flush();
}

/// The thread that draws the screen.
static SCREEN_THREAD: std::sync::OnceLock<std::thread::ThreadId> = std::sync::OnceLock::new();

fn install_panic_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if SCREEN_THREAD.get() == Some(&std::thread::current().id()) {
                restore();
                previous(info);
            } else {
                tracing::error!(
                    thread = std::thread::current().name().unwrap_or("unnamed"),
                    panic = %info,
                    "a background thread panicked"
                );
            }
        }));
    });
}
