//! `grep {pattern, path?, glob?, case_insensitive?}` and `glob {pattern, path?}`
//! (protocol §4.19): read-only searches beneath the session's directory, with
//! ripgrep's own crates — `.gitignore` (and `.ignore`) honoured, hidden files
//! skipped, links not followed — results sorted and capped.
//!
//! A search reaches nothing a file tool would have to ask about unasked: a root
//! outside the session's directory asks, as `read_file` would (the session's
//! directory itself, when it has no boundary — `/`, a home or above one); a root in
//! a credential location, Steward's data directory or its configuration is refused;
//! and beneath the root, a file in one of those, or with other hard links, is
//! skipped. The root is located and opened exactly as a file tool's path is; the
//! files beneath it are found without following a link, judged by their path, and
//! opened beneath the root's directory one component at a time, following none.

use std::fs::Metadata;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use cap_std::fs::{Dir, OpenOptionsExt};

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
/// directory. One outside the session's directory asks; one in a place guarded
/// wherever the session is, is refused.
fn start(ctx: &ToolContext, path: Option<&str>) -> Result<reach::Located, String> {
    let located = reach::locate(ctx, path.unwrap_or("."))?;
    match located.guard {
        None | Some(reach::Guard::Outside) => Ok(located),
        Some(guard) => Err(format!(
            "{} is {}: a search never looks there (read_file asks for one file)",
            located.path.display(),
            guard.describe()
        )),
    }
}

/// What a search may look at beneath its root, and how it opens it.
struct Beneath {
    root: PathBuf,
    /// The places guarded wherever the session is ([`reach::guarded_places`]).
    places: Vec<PathBuf>,
    /// The root's directory (its parent, for a file), opened exactly.
    top: (PathBuf, Dir),
    /// The directory of the last file opened.
    last: Option<(PathBuf, Dir)>,
    /// Files left out: larger than [`MAX_FILE_BYTES`], not text, or with other
    /// hard links.
    skipped: usize,
}

impl Beneath {
    /// `root` checked for a run (an approval binds it as a file tool's path), and
    /// opened.
    fn new(ctx: &ToolContext, path: Option<&str>) -> Result<Beneath, String> {
        start(ctx, path)?;
        let root = reach::located_for_run(ctx, path.unwrap_or("."))?;
        let meta = std::fs::metadata(&root.path)
            .map_err(|e| format!("cannot search {}: {e}", root.path.display()))?;
        let top = if meta.is_dir() {
            root.path.clone()
        } else {
            root.path
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_default()
        };
        let dir = reach::open_dir(ctx, &top, false)?;
        Ok(Beneath {
            root: root.path,
            places: reach::guarded_places(ctx),
            top: (top, dir),
            last: None,
            skipped: 0,
        })
    }

    fn guarded(&self, path: &Path) -> bool {
        self.places.iter().any(|p| path.starts_with(p))
    }

    /// The files beneath the root a search may look at, sorted: `.gitignore`d,
    /// hidden and linked ones left out, and so is anything in a guarded place. The
    /// walk follows no link, so every path it finds is where it lands.
    fn files(&self) -> (Vec<PathBuf>, bool) {
        let mut walk = ignore::WalkBuilder::new(&self.root);
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
            if !self.guarded(&path) {
                out.push(path);
            }
        }
        (out, capped)
    }

    /// The text of `path` (found beneath the root), opened beneath the root's
    /// directory following no link, or why it is left out.
    fn text(&mut self, path: &Path) -> Result<String, String> {
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            return Err(format!("{} is not a file", path.display()));
        };
        let dir = self.dir_of(path, parent)?;
        let file = dir
            .open_with(
                name,
                cap_std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK),
            )
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?
            .into_std();
        self.read(path, file)
    }

    /// Whether `path` (found by the walk) is a regular file beneath the root when
    /// looked up again without following a link: a directory swapped for a link
    /// while the walk listed it listed the names of another place.
    fn still_beneath(&mut self, path: &Path) -> bool {
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            return false;
        };
        self.dir_of(path, parent)
            .and_then(|dir| dir.symlink_metadata(name).map_err(|e| e.to_string()))
            .is_ok_and(|meta| meta.is_file())
    }

    /// The directory `parent` of `path`, opened beneath the root's directory one
    /// component at a time, following no link.
    fn dir_of(&mut self, path: &Path, parent: &Path) -> Result<&Dir, String> {
        let cached = self.last.as_ref().is_some_and(|(p, _)| p == parent);
        if !cached {
            let below = parent
                .strip_prefix(&self.top.0)
                .map_err(|_| format!("{} is not beneath the search", path.display()))?;
            let mut dir = self.top.1.try_clone().map_err(|e| e.to_string())?;
            for component in below.components() {
                let Component::Normal(name) = component else {
                    return Err(format!("{} is not resolved", path.display()));
                };
                dir = cap_fs_ext::DirExt::open_dir_nofollow(&dir, name)
                    .map_err(|e| format!("cannot open {}: {e}", parent.display()))?;
            }
            self.last = Some((parent.to_path_buf(), dir));
        }
        match &self.last {
            Some((_, dir)) => Ok(dir),
            None => Err(format!("cannot open {}", parent.display())),
        }
    }

    /// The text of `file`, opened as `path`, or why it is left out.
    fn read(&mut self, path: &Path, file: std::fs::File) -> Result<String, String> {
        let meta = file
            .metadata()
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let refused = refusal(path, &meta);
        if crate::store::pinned::is_open_here(&meta) {
            // Closing a descriptor of the database drops its locks (protocol §2.8).
            crate::store::pinned::keep(file);
            return Err(format!("{} is Steward's database", path.display()));
        }
        if let Some(refused) = refused {
            self.skipped += 1;
            return Err(refused);
        }
        let mut bytes = Vec::new();
        file.take(MAX_FILE_BYTES)
            .read_to_end(&mut bytes)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        String::from_utf8(bytes).map_err(|_| {
            self.skipped += 1;
            format!(
                "{} is not UTF-8 text: grep does not search it",
                path.display()
            )
        })
    }
}

/// Why a file opened for a search is left out, if it is.
fn refusal(path: &Path, meta: &Metadata) -> Option<String> {
    if !meta.is_file() {
        Some(format!("{} is not a regular file", path.display()))
    } else if meta.nlink() > 1 {
        Some(format!(
            "{} is {}: a search never reads it (read_file asks)",
            path.display(),
            reach::Guard::HardLinks.describe()
        ))
    } else if meta.len() > MAX_FILE_BYTES {
        Some(format!(
            "{} is {} bytes, more than the {MAX_FILE_BYTES} grep searches in one file",
            path.display(),
            meta.len()
        ))
    } else {
        None
    }
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

/// An optional boolean argument.
fn flag(input: &Value, name: &str) -> Result<bool, String> {
    match input.get(name) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(format!("invalid arguments: `{name}` must be true or false")),
    }
}

fn assess_search(ctx: &ToolContext, input: &Value) -> Result<Assessment, String> {
    string_arg(input, "pattern")?;
    let root = start(ctx, optional(input, "path")?)?;
    if std::fs::symlink_metadata(&root.path).is_err() {
        return Err(format!("{} does not exist", root.path.display()));
    }
    Ok(Assessment {
        guarded: root.guarded(),
        diff: None,
    })
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
    let insensitive = flag(input, "case_insensitive")?;
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
    let mut beneath = Beneath::new(ctx, optional(input, "path")?)?;
    let named_file = !beneath.root.is_dir();
    let (files, capped_files) = beneath.files();
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
        let text = match beneath.text(&file) {
            Ok(text) => text,
            // The one file asked for says why it was not searched.
            Err(why) if named_file => return Err(why),
            Err(_) => continue,
        };
        searched += 1;
        let mut found = Vec::new();
        let _ = searcher.search_slice(
            &matcher,
            text.as_bytes(),
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
            // Scrubbed before it is shortened: a hidden value cut short is still
            // most of it (§4.13).
            let text = crate::tools::scrub_secrets(text, &ctx.config.hidden_env);
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
    if beneath.skipped > 0 {
        output.push_str(&format!(
            "\n[{} file{} not searched: larger than {} MiB, not UTF-8 text, or with other hard links]",
            beneath.skipped,
            if beneath.skipped == 1 { "" } else { "s" },
            MAX_FILE_BYTES >> 20
        ));
    }
    let (output, truncated) = crate::tools::cap_output(output, ctx.config.output_limit_bytes);
    Ok(ToolOutput::Completed {
        output,
        structured: Some(json!({
            "matches": count, "files_searched": searched, "files_skipped": beneath.skipped,
            "capped": capped || capped_files, "truncated": truncated
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
    let mut beneath = Beneath::new(ctx, optional(input, "path")?)?;
    if !beneath.root.is_dir() {
        return Err(format!(
            "{} is a file: glob lists from a directory",
            beneath.root.display()
        ));
    }
    let (files, capped_files) = beneath.files();
    let mut found = Vec::new();
    let mut capped = false;
    for file in files {
        let relative = file.strip_prefix(&beneath.root).unwrap_or(&file);
        if matcher.is_match(relative) && beneath.still_beneath(&file) {
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
            shown: None,
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
        assert_eq!(
            out,
            "notes.txt:1:token=mine\n[1 file not searched: larger than 4 MiB, not UTF-8 text, or with other hard links]"
        );
        // Named, the hard link says why it is not searched.
        let out = call(&Grep, &ctx, json!({"pattern": "token", "path": "hard.txt"})).await;
        assert!(out.contains("other hard links"), "{out}");
        // A root outside asks (as read_file would); unasked, it is refused.
        let asked = Grep
            .assess(&ctx, &json!({"pattern": "token", "path": "out"}))
            .unwrap();
        assert_eq!(asked.guarded.unwrap().guard, reach::Guard::Outside);
        let out = call(&Grep, &ctx, json!({"pattern": "token", "path": "out"})).await;
        assert!(out.contains("outside the session directory"), "{out}");
        // A root in a guarded place is refused even when asked about.
        let refused = Grep
            .assess(&ctx, &json!({"pattern": "token", "path": "data"}))
            .unwrap_err();
        assert!(refused.contains("never looks there"), "{refused}");
        let missing = Grep
            .assess(&ctx, &json!({"pattern": "token", "path": "nowhere"}))
            .unwrap_err();
        assert!(missing.contains("does not exist"), "{missing}");
        let out = call(
            &Grep,
            &ctx,
            json!({"pattern": "t", "case_insensitive": "yes"}),
        )
        .await;
        assert!(out.contains("must be true or false"), "{out}");
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
