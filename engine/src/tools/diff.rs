//! What an edit changes in a file (protocol §4.19): the region of the file that
//! differs, with a few lines of context on each side, before and after — what the
//! permission question shows, the transcript keeps (a completed call's
//! `structured.diff`) and ACP sends as a tool call's `diff` content.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// Lines of context kept around what changed.
pub const CONTEXT: usize = 3;

/// The most bytes of each side a diff keeps.
pub const MAX_SIDE: usize = 64 * 1024;

/// A change to one file's text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileDiff {
    /// The file, absolute.
    pub path: String,
    /// The changed region before (`None`: the file is new).
    pub old_text: Option<String>,
    /// The changed region after.
    pub new_text: String,
    /// The first line of the region in the file (1-based).
    pub line: u32,
    /// A side was longer than [`MAX_SIDE`] and was cut.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    /// The whole text the diff was taken from: what a run the user approved after
    /// seeing this diff must still find (protocol §4.19). Kept in memory only.
    #[serde(skip)]
    pub basis: Option<Basis>,
}

/// What a file held when its diff was taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Basis {
    /// There was no file.
    Absent,
    /// Its whole text.
    Text(Arc<str>),
}

impl Basis {
    /// Whether `now` (`None`: no file) is what was there.
    pub fn holds(&self, now: Option<&str>) -> bool {
        match (self, now) {
            (Basis::Absent, None) => true,
            (Basis::Text(text), Some(now)) => **text == *now,
            _ => false,
        }
    }
}

impl FileDiff {
    /// The diff of `old` (`None`: no file yet) becoming `new` at `path`: only the
    /// lines that differ, with [`CONTEXT`] lines around them.
    pub fn between(path: &str, old: Option<&str>, new: &str) -> FileDiff {
        let Some(old) = old else {
            let (new_text, truncated) = cap(new);
            return FileDiff {
                path: path.to_string(),
                old_text: None,
                new_text,
                line: 1,
                truncated,
                basis: Some(Basis::Absent),
            };
        };
        let a: Vec<&str> = old.split_inclusive('\n').collect();
        let b: Vec<&str> = new.split_inclusive('\n').collect();
        let same_start = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
        let same_end = a[same_start..]
            .iter()
            .rev()
            .zip(b[same_start..].iter().rev())
            .take_while(|(x, y)| x == y)
            .count();
        let start = same_start.saturating_sub(CONTEXT);
        let old_end = (a.len() - same_end + CONTEXT).min(a.len());
        let new_end = (b.len() - same_end + CONTEXT).min(b.len());
        let (old_text, cut_old) = cap(&a[start..old_end].concat());
        let (new_text, cut_new) = cap(&b[start..new_end].concat());
        FileDiff {
            path: path.to_string(),
            old_text: Some(old_text),
            new_text,
            line: u32::try_from(start + 1).unwrap_or(u32::MAX),
            truncated: cut_old || cut_new,
            basis: Some(Basis::Text(old.into())),
        }
    }

    /// The first line that changes (1-based): past the context [`FileDiff::line`]
    /// starts with.
    pub fn changed_line(&self) -> u32 {
        let Some(old) = &self.old_text else {
            return self.line;
        };
        let same = old
            .split_inclusive('\n')
            .zip(self.new_text.split_inclusive('\n'))
            .take_while(|(a, b)| a == b)
            .count();
        self.line
            .saturating_add(u32::try_from(same).unwrap_or(u32::MAX))
    }

    /// Whether anything changes.
    pub fn is_empty(&self) -> bool {
        self.old_text.as_deref() == Some(self.new_text.as_str())
    }

    /// A unified diff (`--- a/…`, `+++ b/…`, hunks with their line numbers).
    pub fn unified(&self) -> String {
        let old = self.old_text.as_deref().unwrap_or("");
        let diff = similar::TextDiff::from_lines(old, &self.new_text);
        let mut out = String::new();
        let (from, to) = match &self.old_text {
            Some(_) => (format!("a{}", self.path), format!("b{}", self.path)),
            None => ("/dev/null".to_string(), format!("b{}", self.path)),
        };
        out.push_str(&format!("--- {from}\n+++ {to}\n"));
        let offset = self.line.saturating_sub(1) as usize;
        for hunk in diff.unified_diff().context_radius(CONTEXT).iter_hunks() {
            let ops = hunk.ops();
            let (Some(first), Some(last)) = (ops.first(), ops.last()) else {
                continue;
            };
            let old_range = first.old_range().start..last.old_range().end;
            let new_range = first.new_range().start..last.new_range().end;
            out.push_str(&format!(
                "@@ -{},{} +{},{} @@\n",
                old_range.start + offset + usize::from(self.old_text.is_some()),
                old_range.len(),
                new_range.start + offset + 1,
                new_range.len()
            ));
            for change in hunk.iter_changes() {
                let sign = match change.tag() {
                    similar::ChangeTag::Delete => '-',
                    similar::ChangeTag::Insert => '+',
                    similar::ChangeTag::Equal => ' ',
                };
                out.push(sign);
                let value = change.value();
                out.push_str(value);
                // A line may end in a lone `\r`: it ends there, but is not the last.
                if !value.ends_with('\n') {
                    out.push('\n');
                    if !value.ends_with('\r') {
                        out.push_str("\\ No newline at end of file\n");
                    }
                }
            }
        }
        if self.truncated {
            out.push_str("[diff truncated]\n");
        }
        out
    }
}

/// `text` cut at [`MAX_SIDE`] bytes, on a character boundary.
fn cap(text: &str) -> (String, bool) {
    if text.len() <= MAX_SIDE {
        return (text.to_string(), false);
    }
    let mut end = MAX_SIDE;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (text[..end].to_string(), true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn r4_19_a_diff_keeps_the_changed_region_with_its_context() {
        let old: String = (1..=20).map(|i| format!("line {i}\n")).collect();
        let new = old.replace("line 10\n", "line ten\n");
        let diff = FileDiff::between("/w/a.txt", Some(&old), &new);
        assert_eq!(diff.line, 7);
        assert_eq!(diff.changed_line(), 10, "the change, past its context");
        assert_eq!(
            diff.old_text.as_deref(),
            Some("line 7\nline 8\nline 9\nline 10\nline 11\nline 12\nline 13\n")
        );
        assert_eq!(
            diff.unified(),
            "--- a/w/a.txt\n+++ b/w/a.txt\n@@ -7,7 +7,7 @@\n line 7\n line 8\n line 9\n-line 10\n+line ten\n line 11\n line 12\n line 13\n"
        );
        // A new file is all additions.
        let created = FileDiff::between("/w/new.txt", None, "one\ntwo\n");
        assert_eq!(
            created.unified(),
            "--- /dev/null\n+++ b/w/new.txt\n@@ -0,0 +1,2 @@\n+one\n+two\n"
        );
        // No trailing newline is said so.
        let last = FileDiff::between("/w/b.txt", Some("a\nb"), "a\nc");
        assert!(
            last.unified()
                .contains("-b\n\\ No newline at end of file\n+c\n"),
            "{}",
            last.unified()
        );
        assert!(FileDiff::between("/w/c", Some("x\n"), "x\n").is_empty());
    }
}
