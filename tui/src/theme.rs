//! A small semantic palette in ANSI colours. Under `NO_COLOR` every role degrades
//! to bold, dim or reversed text, and the symbols and words beside them (`↻`,
//! `recovered`, `✗`) carry the meaning on their own.

use ratatui::style::{Color, Modifier, Style};

/// What a piece of text means on screen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Plain,
    Accent,
    Muted,
    Ok,
    Warn,
    Error,
    Recovered,
    Selected,
    Title,
}

/// The palette: with colour, or without (`NO_COLOR`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Theme {
    pub color: bool,
}

impl Theme {
    /// Colour unless `NO_COLOR` is set to anything non-empty (no-color.org).
    pub fn from_env() -> Theme {
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        Theme { color: !no_color }
    }

    pub fn style(&self, role: Role) -> Style {
        let plain = Style::default();
        if !self.color {
            return match role {
                Role::Plain | Role::Ok => plain,
                Role::Accent | Role::Title | Role::Error => plain.add_modifier(Modifier::BOLD),
                Role::Muted => plain.add_modifier(Modifier::DIM),
                Role::Warn | Role::Recovered => plain.add_modifier(Modifier::ITALIC),
                Role::Selected => plain.add_modifier(Modifier::REVERSED),
            };
        }
        match role {
            Role::Plain => plain,
            Role::Accent => plain.fg(Color::Cyan).add_modifier(Modifier::BOLD),
            Role::Title => plain.add_modifier(Modifier::BOLD),
            Role::Muted => plain.fg(Color::DarkGray),
            Role::Ok => plain.fg(Color::Green),
            Role::Warn => plain.fg(Color::Yellow),
            Role::Error => plain.fg(Color::Red),
            Role::Recovered => plain.fg(Color::Magenta),
            Role::Selected => plain.add_modifier(Modifier::REVERSED),
        }
    }
}
