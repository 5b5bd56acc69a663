//! `grep {pattern, path?, glob?, case_insensitive?}` and `glob {pattern, path?}`
//! (protocol §4.19): read-only searches beneath the session's directory, with
//! ripgrep's own crates — `.gitignore` (and `.ignore`) honoured, hidden files
//! skipped, links not followed — results sorted and capped.
//!
//! A search never reaches what a file tool would have to ask about: a path outside
//! the session's directory is refused, and a file in a credential location,
//! Steward's data directory or its configuration, or with other hard links, is
//! skipped (each file is located as a file tool locates it, and opened exactly as
//! `read_file` opens it).

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::provider::ToolSpec;
use crate::tools::{
    Assessment, BoxFuture, Prepared, Tool, ToolContext, ToolOutput, reach, string_arg,
};

/// The most matching lines `grep` reports.
pub const MAX_MATCHES: usize = 200;
/// The most files `glob` reports.
pub const MAX_FILES: usize = 1_000;
/// The most files a search looks at.
pub const MAX_SEARCHED: usize = 20_000;
/// Files larger than this are not searched.
pub const MAX_FILE_BYTES: u64 = 4 << 20;
/// A matching line is shown up to this many characters.
const MAX_LINE_CHARS: usize = 300;

/// `grep`.
#[derive(Debug)]
pub struct Grep;

/// `glob`.
#[derive(Debug)]
pub struct Glob;

/// The directory (or file) a search starts from: `path`, or the session's
/// directory, which it must lie beneath.
fn start(ctx: &ToolContext, path: Option<&str>) -> Result<reach::Located, String> {
    let located = reach::locate(ctx, path.unwrap_or("."))?;
    match located.guard {
        None => Ok(located),
        Some(guard) => Err(format!(
            "{} is {}: searches stay beneath the session directory (read_file and list_dir ask for more)",
            located.path.display(),
            guard.describe()
        )),
    }
}

/// The files beneath `root` a search may look at, sorted: `.gitignore`d, hidden
/// and linked ones left out, and so is anything a file tool would have to ask
/// about.
fn files(ctx: &ToolContext, root: &Path) -> (Vec<PathBuf>, bool) {
    let mut walk = ignore::WalkBuilder::new(root);
    walk.standard_filters(true)
        .require_git(false)
        .follow_links(false)
        .sort_by_file_path(|a, b| a.cmp(b));
    let mut out = Vec::new();
    let mut capped = false;
    for entry in walk.build().flatten() {
        if !entry.file_type().is_some_and(|t| t.is_file()) {
            continue;
        }
        if out.len() == MAX_SEARCHED {
            capped = true;
            break;
        }
        let path = entry.into_path();
        match reach::locate(ctx, &path.to_string_lossy()) {
            Ok(located) if located.guard.is_none() => out.push(located.path),
            _ => {}
        }
    }
    (out, capped)
}

/// `path` as the results show it: relative to the session's directory.
fn shown(ctx: &ToolContext, path: &Path) -> String {
    let base = std::fs::canonicalize(&ctx.directory).unwrap_or_else(|_| ctx.directory.clone());
    path.strip_prefix(&base)
        .unwrap_or(path)
        .to_string_lossy()
        .into_owned()
}

/// An optional string argument.
fn optional<'a>(input: &'a Value, name: &str) -> Result<Option<&'a str>, String> {
    match input.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(format!("invalid arguments: `{name}` must be a string")),
    }
}

fn assess_search(ctx: &ToolContext, input: &Value) -> Result<Assessment, String> {
    string_arg(input, "pattern")?;
    start(ctx, optional(input, "path")?)?;
    Ok(Assessment::default())
}

/// Runs `f` on a thread of its own, off the async threads (a search walks and
/// reads files, which can hang on a stuck mount).
fn off_thread(f: impl FnOnce() -> Result<ToolOutput, String> + Send + 'static) -> Prepared {
    Prepared::new(None, move |_stop| {
        Box::pin(async move {
            tokio::task::spawn_blocking(f)
                .await
                .unwrap_or_else(|_| Err("the tool panicked".into()))
                .unwrap_or_else(ToolOutput::Failed)
        })
    })
}

impl Tool for Grep {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "grep".into(),
            description: "Search file contents for a regular expression, beneath the session \
                 directory (ignoring what .gitignore ignores). Answers path:line:text, sorted."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "description": "A regular expression (Rust regex syntax)"},
                    "path": {"type": "string", "description": "A directory or file to search (default: the session directory)"},
                    "glob": {"type": "string", "description": "Only files whose path matches this glob, e.g. *.rs"},
                    "case_insensitive": {"type": "boolean"}
                },
                "required": ["pattern"]
            }),
        }
    }

    fn assess(&self, ctx: &ToolContext, input: &Value) -> Result<Assessment, String> {
        assess_search(ctx, input)
    }

    fn prepare(&self, ctx: &ToolContext, input: &Value) -> BoxFuture<Result<Prepared, String>> {
        let (ctx, owned) = (ctx.clone(), input.clone());
        let prepared = string_arg(input, "pattern").map(|_| off_thread(move || grep(&ctx, &owned)));
        Box::pin(async move { prepared })
    }
}

fn grep(ctx: &ToolContext, input: &Value) -> Result<ToolOutput, String> {
    use grep_searcher::{BinaryDetection, SearcherBuilder, sinks::UTF8};
    let pattern = string_arg(input, "pattern")?;
    let insensitive = input
        .get("case_insensitive")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let matcher = grep_regex::RegexMatcherBuilder::new()
        .case_insensitive(insensitive)
        .build(pattern)
        .map_err(|e| format!("invalid pattern: {e}"))?;
    let only = optional(input, "glob")?
        .map(|g| {
            globset::GlobBuilder::new(g)
                .literal_separator(false)
                .build()
                .map(|g| g.compile_matcher())
                .map_err(|e| format!("invalid glob: {e}"))
        })
        .transpose()?;
    let root = start(ctx, optional(input, "path")?)?;
    let (files, capped_files) = files(ctx, &root.path);
    let mut searcher = SearcherBuilder::new()
        .binary_detection(BinaryDetection::quit(0))
        .line_number(true)
        .build();
    let mut lines = Vec::new();
    let mut capped = false;
    let mut searched = 0usize;
    'files: for file in files {
        let name = shown(ctx, &file);
        if let Some(only) = &only
            && !only.is_match(&name)
            && !only.is_match(file.file_name().unwrap_or_default())
        {
            continue;
        }
        let Ok(located) = reach::located_for_run(ctx, &file.to_string_lossy()) else {
            continue;
        };
        let Ok(text) = super::fs::current_text(ctx, &located, MAX_FILE_BYTES) else {
            continue;
        };
        searched += 1;
        let mut found = Vec::new();
        let _ = searcher.search_slice(
            &matcher,
            text.unwrap_or_default().as_bytes(),
            UTF8(|line, text| {
                found.push((line, text.trim_end_matches(['\n', '\r']).to_string()));
                Ok(found.len() <= MAX_MATCHES)
            }),
        );
        for (line, text) in found {
            if lines.len() == MAX_MATCHES {
                capped = true;
                break 'files;
            }
            let mut short: String = text.chars().take(MAX_LINE_CHARS).collect();
            if short.len() < text.len() {
                short.push('…');
            }
            lines.push(format!("{name}:{line}:{short}"));
        }
    }
    let count = lines.len();
    let mut output = if lines.is_empty() {
        format!("no match for {pattern:?}")
    } else {
        lines.join("\n")
    };
    if capped {
        output.push_str(&format!("\n[stopped after {MAX_MATCHES} matches]"));
    }
    if capped_files {
        output.push_str(&format!("\n[searched the first {MAX_SEARCHED} files only]"));
    }
    let (output, truncated) = crate::tools::cap_output(output, ctx.config.output_limit_bytes);
    Ok(ToolOutput::Completed {
        output,
        structured: Some(json!({
            "matches": count, "files_searched": searched, "capped": capped || capped_files,
            "truncated": truncated
        })),
    })
}

impl Tool for Glob {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "glob".into(),
            description: "List files whose path (relative to the search root) matches a glob, \
                 e.g. **/*.rs, beneath the session directory (ignoring what .gitignore ignores). \
                 Sorted."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "description": "A glob: * within a name, ** across directories"},
                    "path": {"type": "string", "description": "The directory to list from (default: the session directory)"}
                },
                "required": ["pattern"]
            }),
        }
    }

    fn assess(&self, ctx: &ToolContext, input: &Value) -> Result<Assessment, String> {
        assess_search(ctx, input)
    }

    fn prepare(&self, ctx: &ToolContext, input: &Value) -> BoxFuture<Result<Prepared, String>> {
        let (ctx, owned) = (ctx.clone(), input.clone());
        let prepared = string_arg(input, "pattern").map(|_| off_thread(move || glob(&ctx, &owned)));
        Box::pin(async move { prepared })
    }
}

fn glob(ctx: &ToolContext, input: &Value) -> Result<ToolOutput, String> {
    let pattern = string_arg(input, "pattern")?;
    let matcher = globset::GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()
        .map_err(|e| format!("invalid glob: {e}"))?
        .compile_matcher();
    let root = start(ctx, optional(input, "path")?)?;
    let (files, capped_files) = files(ctx, &root.path);
    let mut found = Vec::new();
    let mut capped = false;
    for file in files {
        let relative = file.strip_prefix(&root.path).unwrap_or(&file);
        if matcher.is_match(relative) {
            if found.len() == MAX_FILES {
                capped = true;
                break;
            }
            found.push(shown(ctx, &file));
        }
    }
    let count = found.len();
    let mut output = if found.is_empty() {
        format!("no file matches {pattern:?}")
    } else {
        found.join("\n")
    };
    if capped {
        output.push_str(&format!("\n[stopped after {MAX_FILES} files]"));
    }
    if capped_files {
        output.push_str(&format!(
            "\n[looked at the first {MAX_SEARCHED} files only]"
        ));
    }
    let (output, truncated) = crate::tools::cap_output(output, ctx.config.output_limit_bytes);
    Ok(ToolOutput::Completed {
        output,
        structured: Some(
            json!({"files": count, "capped": capped || capped_files, "truncated": truncated}),
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ToolsConfig;
    use crate::tools::StopSignals;
    use pretty_assertions::assert_eq;

    fn ctx_in(dir: &Path) -> ToolContext {
        ToolContext {
            directory: dir.to_path_buf(),
            config: ToolsConfig::default(),
            data_dir: None,
            approved: None,
            client: None,
        }
    }

    async fn call(tool: &dyn Tool, ctx: &ToolContext, input: Value) -> String {
        let prepared = tool.prepare(ctx, &input).await.unwrap();
        match prepared.run(StopSignals::default()).await {
            ToolOutput::Completed { output, .. } => output,
            ToolOutput::Failed(e) => format!("FAILED: {e}"),
            ToolOutput::Stopped => "STOPPED".into(),
        }
    }

    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let w = dir.path();
        std::fs::create_dir_all(w.join("src/deep")).unwrap();
        std::fs::create_dir_all(w.join("target")).unwrap();
        std::fs::write(w.join(".gitignore"), "target/\n*.log\n").unwrap();
        std::fs::write(w.join("src/main.rs"), "fn main() {\n    run();\n}\n").unwrap();
        std::fs::write(w.join("src/deep/lib.rs"), "pub fn run() {}\n// RUN twice\n").unwrap();
        std::fs::write(w.join("target/out.rs"), "fn run() {}\n").unwrap();
        std::fs::write(w.join("debug.log"), "run\n").unwrap();
        std::fs::write(w.join(".hidden.rs"), "run\n").unwrap();
        dir
    }

    #[tokio::test]
    async fn r4_19_grep_honours_ignore_files_and_answers_sorted() {
        let dir = tree();
        let ctx = ctx_in(dir.path());
        let out = call(&Grep, &ctx, json!({"pattern": "run"})).await;
        assert_eq!(
            out,
            "src/deep/lib.rs:1:pub fn run() {}\nsrc/main.rs:2:    run();"
        );
        let out = call(
            &Grep,
            &ctx,
            json!({"pattern": "run", "case_insensitive": true}),
        )
        .await;
        assert!(out.contains("src/deep/lib.rs:2:// RUN twice"), "{out}");
        let out = call(&Grep, &ctx, json!({"pattern": "run", "glob": "main.rs"})).await;
        assert_eq!(out, "src/main.rs:2:    run();");
        let out = call(&Grep, &ctx, json!({"pattern": "(unclosed"})).await;
        assert!(out.starts_with("FAILED: invalid pattern"), "{out}");
    }

    #[tokio::test]
    async fn r4_19_glob_lists_matching_files_sorted() {
        let dir = tree();
        let ctx = ctx_in(dir.path());
        let out = call(&Glob, &ctx, json!({"pattern": "**/*.rs"})).await;
        assert_eq!(out, "src/deep/lib.rs\nsrc/main.rs");
        let out = call(&Glob, &ctx, json!({"pattern": "*.rs", "path": "src"})).await;
        assert_eq!(out, "src/main.rs");
    }

    #[tokio::test]
    async fn r4_19_searches_stay_beneath_the_session_and_skip_what_would_ask() {
        let root = tempfile::tempdir().unwrap();
        let work = root.path().join("work");
        let outside = root.path().join("outside");
        std::fs::create_dir_all(&work).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret.txt"), "token=abc\n").unwrap();
        std::fs::write(work.join("notes.txt"), "token=mine\n").unwrap();
        // A link out, a hard link to the secret, and the data directory inside.
        std::os::unix::fs::symlink(&outside, work.join("out")).unwrap();
        std::os::unix::fs::symlink(outside.join("secret.txt"), work.join("link.txt")).unwrap();
        std::fs::hard_link(outside.join("secret.txt"), work.join("hard.txt")).unwrap();
        std::fs::create_dir_all(work.join("data")).unwrap();
        std::fs::write(work.join("data/steward.log"), "token=steward\n").unwrap();
        let ctx = ToolContext {
            data_dir: Some(work.join("data")),
            ..ctx_in(&work)
        };
        let out = call(&Grep, &ctx, json!({"pattern": "token"})).await;
        assert_eq!(out, "notes.txt:1:token=mine");
        let out = call(&Grep, &ctx, json!({"pattern": "token", "path": "out"})).await;
        assert!(out.contains("outside the session directory"), "{out}");
        let out = call(
            &Glob,
            &ctx,
            json!({"pattern": "*", "path": outside.to_str().unwrap()}),
        )
        .await;
        assert!(out.starts_with("FAILED"), "{out}");
    }

    #[tokio::test]
    async fn r4_19_results_are_capped() {
        let dir = tempfile::tempdir().unwrap();
        let many: String = (0..500).map(|i| format!("hit {i}\n")).collect();
        std::fs::write(dir.path().join("many.txt"), many).unwrap();
        let ctx = ctx_in(dir.path());
        let out = call(&Grep, &ctx, json!({"pattern": "hit"})).await;
        assert_eq!(
            out.lines().filter(|l| l.starts_with("many.txt:")).count(),
            MAX_MATCHES
        );
        assert!(
            out.ends_with(&format!("[stopped after {MAX_MATCHES} matches]")),
            "{out}"
        );
    }
}
