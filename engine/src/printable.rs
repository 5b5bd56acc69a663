//! Text from models and tools made safe to show on a terminal: line breaks as `\n`
//! (CR and CRLF too), tabs as spaces to the next stop of 4, and terminal escape
//! sequences (colours, titles, links, screen clears) and other control characters
//! removed — a tool's output or a model's answer can never drive the user's
//! terminal. [`Printable`] keeps its state between pieces, so a sequence split
//! across two streamed chunks is removed whole.

/// Where the filter is in an escape sequence.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum State {
    #[default]
    Text,
    /// After `ESC`.
    Escape,
    /// In `ESC [ …`, until its final byte.
    Csi,
    /// In `ESC ] …` (or DCS, APC, PM), until BEL or `ESC \`.
    String,
    /// After `ESC` inside such a string.
    StringEscape,
}

/// A streaming filter; see the module.
#[derive(Debug, Clone, Default)]
pub struct Printable {
    state: State,
    column: usize,
    /// A CR was seen last: a LF right after it is the same line break.
    after_cr: bool,
}

impl Printable {
    /// Filters the next piece of text.
    pub fn push(&mut self, text: &str) -> String {
        let mut out = String::with_capacity(text.len());
        for c in text.chars() {
            let after_cr = std::mem::take(&mut self.after_cr);
            match self.state {
                State::Text => match c {
                    '\r' => {
                        out.push('\n');
                        self.column = 0;
                        self.after_cr = true;
                    }
                    '\n' if after_cr => {}
                    '\n' => {
                        out.push('\n');
                        self.column = 0;
                    }
                    '\t' => {
                        let spaces = 4 - self.column % 4;
                        out.extend(std::iter::repeat_n(' ', spaces));
                        self.column += spaces;
                    }
                    '\u{1b}' => self.state = State::Escape,
                    c if c.is_control() => {}
                    c => {
                        out.push(c);
                        self.column += 1;
                    }
                },
                State::Escape => {
                    self.state = match c {
                        '[' => State::Csi,
                        ']' | 'P' | '_' | '^' => State::String,
                        // A two-character escape: it is over.
                        _ => State::Text,
                    }
                }
                State::Csi => {
                    if ('\u{40}'..='\u{7e}').contains(&c) {
                        self.state = State::Text;
                    }
                }
                State::String => match c {
                    '\u{7}' => self.state = State::Text,
                    '\u{1b}' => self.state = State::StringEscape,
                    _ => {}
                },
                State::StringEscape => {
                    // `ESC \` ends the string; any other escape ends it too.
                    self.state = if c == '\\' {
                        State::Text
                    } else {
                        State::Escape
                    };
                    if c != '\\' {
                        // `ESC` then `c`: `c` opens the next sequence.
                        self.state = match c {
                            '[' => State::Csi,
                            ']' | 'P' | '_' | '^' => State::String,
                            _ => State::Text,
                        };
                    }
                }
            }
        }
        out
    }
}

/// `text` filtered whole (see the module).
pub fn clean(text: &str) -> String {
    Printable::default().push(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_breaks_tabs_and_escapes_are_made_showable() {
        assert_eq!(clean("a\tb\r\nc\rd"), "a   b\nc\nd");
        assert_eq!(clean("ab\tc"), "ab  c");
        assert_eq!(clean("\u{1b}[31mred\u{1b}[0m\u{7}!"), "red!");
        assert_eq!(clean("\u{1b}]0;TITLE\u{7}a"), "a");
        assert_eq!(
            clean("\u{1b}]8;;http://x.example\u{1b}\\link\u{1b}]8;;\u{1b}\\"),
            "link"
        );
        assert_eq!(clean("\u{1b}[2J\u{1b}[Hclear"), "clear");
    }

    #[test]
    fn a_sequence_split_across_pieces_is_removed_whole() {
        let mut filter = Printable::default();
        let pieces = ["one \u{1b}", "]0;PWNED", "-TITLE\u{7} two\r", "\nthree"];
        let out: String = pieces.iter().map(|p| filter.push(p)).collect();
        assert_eq!(out, "one  two\nthree");
    }
}
