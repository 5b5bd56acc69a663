//! `edit_file {path, old_string, new_string, replace_all?}`: an exact-string
//! replacement (protocol §4.19). Confined and approved like `write_file`; the file's
//! line endings and its trailing newline are kept; zero matches, or more than one
//! without `replace_all`, is a tool error that says how many and where. The file is
//! read and written on one descriptor, and refused if it changed between the two.

use std::io::Read;
use std::os::unix::fs::MetadataExt;

use serde_json::{Value, json};

use super::fs::{MAX_EDIT_BYTES, current_text, located_off_thread};
use crate::provider::ToolSpec;
use crate::tools::{
    Assessment, BoxFuture, ClientFiles, FileDiff, Prepared, Tool, ToolContext, ToolOutput, reach,
    string_arg,
};

/// The most line numbers an error about many matches lists.
const LINES_LISTED: usize = 10;

/// `edit_file`.
#[derive(Debug)]
pub struct EditFile;

/// What an edit asks for.
#[derive(Debug, Clone)]
struct Ask {
    path: String,
    old: String,
    new: String,
    all: bool,
}

impl Ask {
    fn of(input: &Value) -> Result<Ask, String> {
        let all = match input.get("replace_all") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err("invalid arguments: `replace_all` must be true or false".into()),
        };
        Ok(Ask {
            path: string_arg(input, "path")?.to_string(),
            old: string_arg(input, "old_string")?.to_string(),
            new: string_arg(input, "new_string")?.to_string(),
            all,
        })
    }
}

/// `text` with the edit made, and how many replacements. `old` is matched exactly
/// first; in a file that uses `\r\n`, an `old` written with bare `\n` that does not
/// occur is matched with `\r\n`. `new` takes the line endings of what it
/// replaces: `\r\n` where that used them (or, for text without a line break, where
/// the file mostly does), never doubling an `\r` already there.
pub fn apply(
    text: &str,
    old: &str,
    new: &str,
    all: bool,
    path: &str,
) -> Result<(String, usize), String> {
    if old.is_empty() {
        return Err(
            "old_string is empty: give the exact text to replace (write_file writes a whole file)"
                .into(),
        );
    }
    if old == new {
        return Err("old_string and new_string are the same: nothing would change".into());
    }
    let crlf_lines = text.matches("\r\n").count();
    let mostly_crlf = crlf_lines > 0 && crlf_lines >= text.matches('\n').count() - crlf_lines;
    let (old, crlf) = if crlf_lines > 0 && has_bare_newline(old) && text.contains(&with_crlf(old)) {
        // Line breaks written with `\n` in a file that uses `\r\n`: never a bare
        // `\n` matched inside an `\r\n`.
        (with_crlf(old), true)
    } else if text.contains(old) {
        let crlf = if old.contains('\n') {
            old.contains("\r\n")
        } else {
            mostly_crlf
        };
        (old.to_string(), crlf)
    } else if crlf_lines > 0 && has_bare_newline(old) {
        (with_crlf(old), true)
    } else {
        (old.to_string(), false)
    };
    let new = if crlf {
        with_crlf(new)
    } else {
        new.to_string()
    };
    let at: Vec<usize> = text.match_indices(old.as_str()).map(|(i, _)| i).collect();
    match at.len() {
        0 => Err(format!(
            "old_string was not found in {path}: it must match the file exactly, whitespace and line endings included (read the file again if it may have changed)"
        )),
        1 => Ok((text.replacen(old.as_str(), &new, 1), 1)),
        n if all => Ok((text.replace(old.as_str(), &new), n)),
        n => {
            let lines: Vec<String> = at
                .iter()
                .take(LINES_LISTED)
                .map(|i| (text[..*i].matches('\n').count() + 1).to_string())
                .collect();
            let more = if n > LINES_LISTED { ", …" } else { "" };
            Err(format!(
                "old_string occurs {n} times in {path} (at lines {}{more}): add the text around it to make it unique, or set replace_all to replace every one",
                lines.join(", ")
            ))
        }
    }
}

/// Whether `text` has a `\n` without an `\r` before it.
fn has_bare_newline(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes
        .iter()
        .enumerate()
        .any(|(i, b)| *b == b'\n' && (i == 0 || bytes[i - 1] != b'\r'))
}

/// `text` with every bare `\n` made `\r\n` (an `\r\n` already there is kept).
fn with_crlf(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 16);
    let mut prev = '\0';
    for c in text.chars() {
        if c == '\n' && prev != '\r' {
            out.push('\r');
        }
        out.push(c);
        prev = c;
    }
    out
}

impl Tool for EditFile {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "edit_file".into(),
            description: "Replace an exact string in a text file. old_string must occur once \
                 (include surrounding lines to make it unique), unless replace_all is true. \
                 Keeps the file's line endings."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "File path, relative to the session directory or absolute"},
                    "old_string": {"type": "string", "description": "The exact text to replace"},
                    "new_string": {"type": "string", "description": "The text to put in its place"},
                    "replace_all": {"type": "boolean", "description": "Replace every occurrence (default false)"}
                },
                "required": ["path", "old_string", "new_string"]
            }),
        }
    }

    /// Confinement, and the preview of the change for the question (from the disk).
    fn assess(&self, ctx: &ToolContext, input: &Value) -> Result<Assessment, String> {
        let ask = Ask::of(input)?;
        let located = reach::locate(ctx, &ask.path)?;
        let mut probe = ctx.clone();
        probe.approved = located.guarded();
        let shown = located.path.to_string_lossy().into_owned();
        let through_client = ctx.client.as_ref().is_some_and(|c| c.reads() && c.writes());
        let diff = match current_text(&probe, &located, MAX_EDIT_BYTES)
            .ok()
            .flatten()
        {
            Some(text) => match apply(&text, &ask.old, &ask.new, ask.all, &shown) {
                Ok((after, _)) => Some(FileDiff::between(&shown, Some(&text), &after)),
                // An edit that cannot apply fails at once, unasked (the editor's
                // buffer, which may differ, is read when the call runs).
                Err(e) if !through_client => return Err(e),
                Err(_) => None,
            },
            None => None,
        };
        Ok(Assessment {
            guarded: located.guarded(),
            diff,
        })
    }

    /// Through the client, the question shows the edit of its buffer; an edit that
    /// cannot apply to the buffer fails unasked.
    fn preview(
        &self,
        ctx: &ToolContext,
        input: &Value,
    ) -> BoxFuture<Result<Option<FileDiff>, String>> {
        let client = ctx.client.clone().filter(|c| c.reads() && c.writes());
        let (ctx, ask) = (ctx.clone(), Ask::of(input).ok());
        Box::pin(async move {
            let (Some(client), Some(ask)) = (client, ask) else {
                return Ok(None);
            };
            let Ok(located) = located_off_thread(&ctx, &ask.path).await else {
                return Ok(None);
            };
            let shown = located.path.to_string_lossy().into_owned();
            let Ok(text) = client.read(&located.path).await else {
                return Ok(None);
            };
            let (after, _) = apply(&text, &ask.old, &ask.new, ask.all, &shown)?;
            Ok(Some(FileDiff::between(&shown, Some(&text), &after)))
        })
    }

    fn prepare(&self, ctx: &ToolContext, input: &Value) -> BoxFuture<Result<Prepared, String>> {
        let prepared = Ask::of(input).map(|ask| {
            let ctx = ctx.clone();
            let client = ctx.client.clone().filter(|c| c.reads() && c.writes());
            Prepared::new(None, move |_stop| {
                Box::pin(async move {
                    let edited = match client {
                        Some(client) => edit_through(&ctx, client.as_ref(), ask).await,
                        None => {
                            let ctx = ctx.clone();
                            tokio::task::spawn_blocking(move || edit_on_disk(&ctx, &ask))
                                .await
                                .unwrap_or_else(|_| Err("the tool panicked".into()))
                        }
                    };
                    edited.unwrap_or_else(ToolOutput::Failed)
                })
            })
        });
        Box::pin(async move { prepared })
    }
}

/// The result of an edit made.
fn edited(diff: FileDiff, n: usize, through: Option<&str>) -> ToolOutput {
    let mut structured = json!({"replacements": n, "diff": diff});
    if let Some(through) = through {
        structured["through"] = json!(through);
    }
    ToolOutput::Completed {
        output: format!(
            "edited {}: {n} replacement{} (from line {})",
            diff.path,
            if n == 1 { "" } else { "s" },
            diff.changed_line()
        ),
        structured: Some(structured),
    }
}

/// The edit on disk: the file located and opened exactly (read and write, no link
/// followed, checked as a write's is), read, changed, and written on the same
/// descriptor — refused if it changed in between.
fn edit_on_disk(ctx: &ToolContext, ask: &Ask) -> Result<ToolOutput, String> {
    let located = reach::located_for_run(ctx, &ask.path)?;
    let path = located.path.clone();
    let shown = path.to_string_lossy().into_owned();
    let (dir, name, mut file) = super::fs::open_for_edit(ctx, &located)?;
    let before = file
        .metadata()
        .map_err(|e| format!("cannot read {shown}: {e}"))?;
    if before.len() > MAX_EDIT_BYTES {
        return Err(format!(
            "{shown} is {} bytes, more than the {MAX_EDIT_BYTES} an edit reads",
            before.len()
        ));
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {shown}: {e}"))?;
    let text = String::from_utf8(bytes).map_err(|_| format!("{shown} is not UTF-8 text"))?;
    super::fs::still_as_shown(ctx, &path, Some(&text))?;
    let (after, n) = apply(&text, &ask.old, &ask.new, ask.all, &shown)?;
    let now = file
        .metadata()
        .map_err(|e| format!("cannot read {shown}: {e}"))?;
    if (now.len(), now.mtime(), now.mtime_nsec())
        != (before.len(), before.mtime(), before.mtime_nsec())
    {
        return Err(format!(
            "{shown} changed while it was being edited: nothing was written; read it again"
        ));
    }
    super::fs::replace_whole(&dir, &name, after.as_bytes(), Some((&mut file, &now)))
        .map_err(|e| format!("cannot write {shown}: {e}"))?;
    Ok(edited(
        FileDiff::between(&shown, Some(&text), &after),
        n,
        None,
    ))
}

/// The edit through the client: located and checked as on disk, read and written
/// as the editor has the file.
async fn edit_through(
    ctx: &ToolContext,
    client: &dyn ClientFiles,
    ask: Ask,
) -> Result<ToolOutput, String> {
    let located = located_off_thread(ctx, &ask.path).await?;
    let shown = located.path.to_string_lossy().into_owned();
    let text = client.read(&located.path).await?;
    super::fs::still_as_shown(ctx, &located.path, Some(&text))?;
    let (after, n) = apply(&text, &ask.old, &ask.new, ask.all, &shown)?;
    let diff = FileDiff::between(&shown, Some(&text), &after);
    client.write(&located.path, after).await?;
    Ok(edited(diff, n, Some("client")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ToolsConfig;
    use crate::tools::StopSignals;
    use pretty_assertions::assert_eq;
    use std::path::Path;

    fn ctx_in(dir: &Path) -> ToolContext {
        ToolContext {
            directory: dir.to_path_buf(),
            config: ToolsConfig::default(),
            data_dir: None,
            approved: None,
            shown: None,
            client: None,
        }
    }

    async fn edit(ctx: &ToolContext, input: Value) -> ToolOutput {
        match EditFile.prepare(ctx, &input).await {
            Ok(prepared) => prepared.run(StopSignals::default()).await,
            Err(e) => ToolOutput::Failed(e),
        }
    }

    fn failure(output: ToolOutput) -> String {
        match output {
            ToolOutput::Failed(e) => e,
            other => panic!("expected a failure, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn r4_19_a_unique_string_is_replaced_and_the_diff_kept() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.rs"), "fn main() {\n    old();\n}\n").unwrap();
        let ctx = ctx_in(dir.path());
        let output = edit(
            &ctx,
            json!({"path": "a.rs", "old_string": "old()", "new_string": "new()"}),
        )
        .await;
        let ToolOutput::Completed { output, structured } = output else {
            panic!("{output:?}");
        };
        assert!(output.contains("1 replacement"), "{output}");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a.rs")).unwrap(),
            "fn main() {\n    new();\n}\n"
        );
        let diff: FileDiff = serde_json::from_value(structured.unwrap()["diff"].clone()).unwrap();
        assert!(
            diff.unified().contains("-    old();\n+    new();\n"),
            "{}",
            diff.unified()
        );
    }

    #[tokio::test]
    async fn r4_19_none_or_many_matches_are_errors_that_say_how_many_and_where() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "x\ny\nx\nz\nx\n").unwrap();
        let ctx = ctx_in(dir.path());
        let none = failure(
            edit(
                &ctx,
                json!({"path": "a.txt", "old_string": "w", "new_string": "v"}),
            )
            .await,
        );
        assert!(none.contains("was not found"), "{none}");
        let many = failure(
            edit(
                &ctx,
                json!({"path": "a.txt", "old_string": "x", "new_string": "v"}),
            )
            .await,
        );
        assert!(many.contains("occurs 3 times"), "{many}");
        assert!(many.contains("at lines 1, 3, 5"), "{many}");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a.txt")).unwrap(),
            "x\ny\nx\nz\nx\n",
            "a refused edit writes nothing"
        );
        let all = edit(
            &ctx,
            json!({"path": "a.txt", "old_string": "x", "new_string": "v", "replace_all": true}),
        )
        .await;
        assert!(matches!(all, ToolOutput::Completed { .. }), "{all:?}");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a.txt")).unwrap(),
            "v\ny\nv\nz\nv\n"
        );
    }

    #[tokio::test]
    async fn r4_19_line_endings_and_a_missing_trailing_newline_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("w.txt"), "one\r\ntwo\r\nthree").unwrap();
        let ctx = ctx_in(dir.path());
        let output = edit(
            &ctx,
            json!({"path": "w.txt", "old_string": "one\ntwo", "new_string": "1\n2\n2b"}),
        )
        .await;
        assert!(matches!(output, ToolOutput::Completed { .. }), "{output:?}");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("w.txt")).unwrap(),
            "1\r\n2\r\n2b\r\nthree"
        );
    }

    #[test]
    fn r4_19_crlf_is_matched_exactly_first_and_never_doubled() {
        // `new` already in CRLF keeps one `\r`.
        let (out, _) = apply(
            "one\r\ntwo\r\nthree\r\n",
            "three",
            "3\r\nthree",
            false,
            "/w",
        )
        .unwrap();
        assert_eq!(out, "one\r\ntwo\r\n3\r\nthree\r\n");
        // Bare `\n` in `new` takes the file's CRLF.
        let (out, _) = apply("one\r\ntwo\r\n", "two", "2\nzwei", false, "/w").unwrap();
        assert_eq!(out, "one\r\n2\r\nzwei\r\n");
        // A mixed file: what occurs exactly is matched as it is, and keeps its `\n`.
        let (out, _) = apply("a\r\nb\nc\r\nd\n", "b\nc", "B\nC", false, "/w").unwrap();
        assert_eq!(out, "a\r\nB\nC\r\nd\n");
        // A file with `\n` only is left alone.
        let (out, _) = apply("x\ny\n", "y", "1\n2", false, "/w").unwrap();
        assert_eq!(out, "x\n1\n2\n");
        // A bare `\n` never matches inside an `\r\n`.
        let (out, n) = apply("1\r\n2\r\n", "\n", "\n\n", true, "/w").unwrap();
        assert_eq!((out.as_str(), n), ("1\r\n\r\n2\r\n\r\n", 2));
    }

    #[test]
    fn r4_19_a_file_that_changed_since_it_was_read_is_not_matched() {
        // The model read "a = 1" earlier; the file says "a = 2" now.
        let refused = apply("a = 2\n", "a = 1", "a = 3", false, "/w/c.txt").unwrap_err();
        assert!(refused.contains("read the file again"), "{refused}");
        assert!(apply("a\n", "", "b", false, "/w").is_err());
        assert!(apply("a\n", "a", "a", false, "/w").is_err());
    }

    #[tokio::test]
    async fn r4_19_an_approved_edit_runs_only_on_the_text_its_diff_was_taken_from() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.txt");
        std::fs::write(&file, "a\nfoo\nb\n").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let input =
            json!({"path": "a.txt", "old_string": "foo", "new_string": "bar", "replace_all": true});
        let asked = EditFile.assess(&ctx_in(dir.path()), &input).unwrap();
        let ctx = ToolContext {
            shown: asked.diff.unwrap().basis,
            ..ctx_in(dir.path())
        };
        // More `foo`s since the question: the user saw one replacement, not three.
        std::fs::write(&file, "foo\nfoo\nSECRET foo\n").unwrap();
        let refused = failure(edit(&ctx, input.clone()).await);
        assert!(
            refused.contains("changed after the permission question"),
            "{refused}"
        );
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            "foo\nfoo\nSECRET foo\n"
        );
        std::fs::write(&file, "a\nfoo\nb\n").unwrap();
        let done = edit(&ctx, input).await;
        assert!(matches!(done, ToolOutput::Completed { .. }), "{done:?}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "a\nbar\nb\n");
        // Put in place whole, with the file's permissions, nothing left beside it.
        let meta = std::fs::metadata(&file).unwrap();
        assert_eq!(meta.permissions().mode() & 0o7777, 0o600);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[tokio::test]
    async fn r4_19_an_edit_is_confined_like_a_write() {
        let root = tempfile::tempdir().unwrap();
        let work = root.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        std::fs::write(root.path().join("outside.txt"), "secret\n").unwrap();
        let ctx = ctx_in(&work);
        let outside = root.path().join("outside.txt");
        let refused = failure(
            edit(
                &ctx,
                json!({"path": outside.to_str().unwrap(), "old_string": "secret", "new_string": "x"}),
            )
            .await,
        );
        assert!(
            refused.contains("outside the session directory"),
            "{refused}"
        );
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "secret\n");
        // The question shows what the edit would do.
        std::fs::write(work.join("in.txt"), "a\nb\n").unwrap();
        let assessed = EditFile
            .assess(
                &ctx,
                &json!({"path": "in.txt", "old_string": "b", "new_string": "c"}),
            )
            .unwrap();
        assert!(
            assessed.diff.unwrap().unified().contains("-b\n+c\n"),
            "the question shows the diff"
        );
    }
}
