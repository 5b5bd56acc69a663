//! `read_file`, `list_dir` and `write_file`. Relative paths resolve against the
//! session's directory.
//!
//! Paths are located ([`reach`]): resolved after symbolic links, and guarded —
//! asked about every time — outside the session's directory, in a credential location
//! or Steward's data directory, or for a file with other hard links. A run opens
//! exactly what was located and approved, or nothing. The tools take regular files
//! and directories only — a FIFO, device or socket could block for ever or never end
//! — open files without blocking, read at most the output limit, and list at most
//! [`MAX_ENTRIES`] entries.

use std::fs::{File, Metadata};
use std::io::{Read, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use cap_std::fs::OpenOptionsExt;

use serde_json::{Value, json};

use crate::provider::ToolSpec;
use crate::tools::{
    Assessment, BoxFuture, FileDiff, Prepared, Tool, ToolContext, ToolOutput, cap_output, reach,
    string_arg,
};

/// The most entries `list_dir` reads from one directory.
pub const MAX_ENTRIES: usize = 2_000;

fn path_schema(extra: Value) -> Value {
    let mut properties = json!({"path": {"type": "string", "description": "File path, relative to the session directory or absolute"}});
    if let Value::Object(extra) = extra {
        properties.as_object_mut().unwrap().extend(extra);
    }
    let required: Vec<&String> = properties.as_object().unwrap().keys().collect();
    json!({"type": "object", "properties": properties, "required": required})
}

/// The assessment of a file tool's `path` argument.
fn assess_path(ctx: &ToolContext, input: &Value) -> Result<Assessment, String> {
    let located = reach::locate(ctx, string_arg(input, "path")?)?;
    Ok(Assessment {
        guarded: located.guarded(),
        diff: None,
    })
}

/// The largest file an edit (or a write's diff) reads whole.
pub const MAX_EDIT_BYTES: u64 = 8 << 20;

/// The text of the file `located` names as it is on disk now — `None` when there is
/// none — read exactly as a run reads it; an error for one that is not text or is
/// larger than `limit`.
pub(crate) fn current_text(
    ctx: &ToolContext,
    located: &reach::Located,
    limit: u64,
) -> Result<Option<String>, String> {
    if std::fs::symlink_metadata(&located.path).is_err() {
        return Ok(None);
    }
    let (file, meta) = open_regular(ctx, located)?;
    if meta.len() > limit {
        return Err(format!(
            "{} is {} bytes, more than the {limit} an edit reads",
            located.path.display(),
            meta.len()
        ));
    }
    match text_of(file, &located.path, limit) {
        Ok(text) => Ok(Some(text)),
        Err(TextError::Larger) => Err(format!(
            "{} is more than the {limit} bytes an edit reads",
            located.path.display()
        )),
        Err(TextError::Other(e)) => Err(e),
    }
}

/// The largest file a prompt's link brings into the model's context (protocol
/// §4.20).
pub const MAX_LINKED_BYTES: u64 = 256 << 10;

/// The text of the file a prompt links to (`file:` URI), for the model's context
/// (protocol §4.20): located and opened exactly as `read_file` opens it, and not
/// read where `read_file` would ask first (outside the session's directory, a
/// credential location, …: no one is asked here), nor when it is larger than
/// `room` (at most [`MAX_LINKED_BYTES`]; less when the request's other files took
/// the rest) or not UTF-8 text. The values Steward hides (the provider's API key)
/// are redacted from it as from what `read_file` hands back. The error says why.
pub fn linked_text(ctx: &ToolContext, uri: &str, room: u64) -> Result<String, String> {
    let path = file_path(uri).ok_or_else(|| "it is not a file:// URI".to_string())?;
    let located = reach::locate(ctx, &path)?;
    if let Some(guard) = located.guard {
        return Err(format!(
            "it is {} (read_file asks before it reads there)",
            guard.describe()
        ));
    }
    if std::fs::symlink_metadata(&located.path).is_err() {
        return Err("it does not exist".into());
    }
    let (file, meta) = open_regular(ctx, &located)?;
    // `size` is `None` when the file holds more than its size said.
    let too_large = |size: Option<u64>| {
        let is = size.map_or("it holds more".to_string(), |n| {
            format!("it is {n} bytes, more")
        });
        if room < MAX_LINKED_BYTES {
            format!(
                "{is} than the {room} left of the {MAX_LINKED_TOTAL} the prompts' files of one request may hold"
            )
        } else {
            format!("{is} than the {MAX_LINKED_BYTES} a prompt's file may be")
        }
    };
    let room = room.min(MAX_LINKED_BYTES);
    if meta.len() > room {
        return Err(too_large(Some(meta.len())));
    }
    let text = text_of(file, &located.path, room).map_err(|e| match e {
        TextError::Larger => too_large(None),
        TextError::Other(e) => e,
    })?;
    Ok(crate::tools::scrub_secrets(text, &ctx.config.hidden_env))
}

/// The most text the files of all the prompts one request is built from bring
/// into it (protocol §4.20).
pub const MAX_LINKED_TOTAL: u64 = 256 << 10;

/// The path of a `file:` URI (`file:///a%20b` is `/a b`; the scheme in any case; a
/// query or fragment, `?…` or `#…`, is not part of it); `None` for another scheme,
/// a host other than `localhost`, or a bad escape.
fn file_path(uri: &str) -> Option<String> {
    let scheme = uri.get(..7)?;
    if !scheme.eq_ignore_ascii_case("file://") {
        return None;
    }
    let rest = &uri[7..];
    let rest = match rest.get(..9) {
        Some(host) if host.eq_ignore_ascii_case("localhost") => &rest[9..],
        _ => rest,
    };
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    if !rest.starts_with('/') {
        return None;
    }
    let bytes = rest.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Why [`text_of`] gave no text.
pub(crate) enum TextError {
    /// The file holds more than the limit (it grew since its size was checked, or
    /// its size says nothing: `/proc`).
    Larger,
    /// It cannot be read, or is not UTF-8 text; the message says which.
    Other(String),
}

/// All of `file`, as UTF-8 text, when it holds at most `limit` bytes: no more than
/// `limit + 1` is read, whatever its size said.
pub(crate) fn text_of(file: File, path: &Path, limit: u64) -> Result<String, TextError> {
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| TextError::Other(format!("cannot read {}: {e}", path.display())))?;
    if bytes.len() as u64 > limit {
        return Err(TextError::Larger);
    }
    String::from_utf8(bytes)
        .map_err(|_| TextError::Other(format!("{} is not UTF-8 text", path.display())))
}

/// The preview of a write for the question: what it would change, when the file
/// can be read (a file that cannot shows no diff; the run says why).
fn write_preview(ctx: &ToolContext, input: &Value) -> Result<Assessment, String> {
    let located = reach::locate(ctx, string_arg(input, "path")?)?;
    let content = string_arg(input, "content")?;
    let mut probe = ctx.clone();
    probe.approved = located.guarded();
    let diff = current_text(&probe, &located, MAX_EDIT_BYTES)
        .ok()
        .map(|old| FileDiff::between(&located.path.to_string_lossy(), old.as_deref(), content));
    Ok(Assessment {
        guarded: located.guarded(),
        diff,
    })
}

/// Locates `path` for a run on a thread of its own (resolving touches the file
/// system, which can hang).
pub(crate) async fn located_off_thread(
    ctx: &ToolContext,
    path: &str,
) -> Result<reach::Located, String> {
    let (ctx, path) = (ctx.clone(), path.to_string());
    tokio::task::spawn_blocking(move || reach::located_for_run(&ctx, &path))
        .await
        .map_err(|_| "the tool panicked".to_string())?
}

/// Runs a filesystem call on a thread of its own, off the async threads. A call that
/// hangs (a stuck network mount) is abandoned by the runner after its timeout or a
/// cancellation; its thread is detached, so it holds neither the execution nor the
/// process's exit.
fn blocking(f: impl FnOnce() -> ToolOutput + Send + 'static) -> Prepared {
    Prepared::new(None, move |_stop| {
        Box::pin(async move {
            let (done, result) = tokio::sync::oneshot::channel();
            let spawned = std::thread::Builder::new()
                .name("steward-file-tool".into())
                .spawn(move || {
                    let _ = done.send(f());
                });
            if let Err(e) = spawned {
                return ToolOutput::Failed(format!("cannot start the tool: {e}"));
            }
            result
                .await
                .unwrap_or_else(|_| ToolOutput::Failed("the tool panicked".into()))
        })
    })
}

/// What kind of file `meta` describes, for errors.
fn kind(meta: &Metadata) -> &'static str {
    let t = meta.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_symlink() {
        "a symbolic link"
    } else {
        "a regular file"
    }
}

/// Refuses the database this process uses and its `-wal`/`-shm`: closing a
/// descriptor of one would drop the process's SQLite locks (protocol §2.8).
fn refuse_own_database(path: &Path, meta: &Metadata, verb: &str) -> Result<(), String> {
    if crate::store::pinned::is_open_here(meta) {
        return Err(format!(
            "cannot {verb} {}: it is the database Steward is using (or its log); file tools never open it — `steward show` and `steward inspect` read it",
            path.display()
        ));
    }
    Ok(())
}

/// [`refuse_own_database`] on a descriptor already opened: one that names the
/// database is kept open for the life of the process instead of being closed.
fn refuse_opened_database(path: &Path, file: File, verb: &str) -> Result<(File, Metadata), String> {
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot {verb} {}: {e}", path.display()))?;
    if let Err(e) = refuse_own_database(path, &meta, verb) {
        crate::store::pinned::keep(file);
        return Err(e);
    }
    Ok((file, meta))
}

/// Opens the located file for reading — exactly it, by name in its checked
/// directory, without following a link or blocking — and checks what was opened.
fn open_regular(ctx: &ToolContext, located: &reach::Located) -> Result<(File, Metadata), String> {
    let (_, _, file, meta) = open_exactly(ctx, located, "read")?;
    Ok((file, meta))
}

/// Opens the located file to edit it — read and write (a file the user may not
/// write is refused), exactly it, by name in its checked directory, without
/// following a link or blocking, never creating it — and checks what was opened as
/// a write's is. Returns the directory and name too, to put the edited text in
/// place ([`replace_whole`]).
pub(crate) fn open_for_edit(
    ctx: &ToolContext,
    located: &reach::Located,
) -> Result<(cap_std::fs::Dir, std::ffi::OsString, File), String> {
    let (dir, name, file, _) = open_exactly(ctx, located, "edit")?;
    Ok((dir, name, file))
}

/// Opens the located regular file — to `read` it, or also to write it for any
/// other `verb` — by name in its checked directory, never creating it, without
/// following a link or blocking; refuses the database this process uses; checks
/// what was opened.
fn open_exactly(
    ctx: &ToolContext,
    located: &reach::Located,
    verb: &str,
) -> Result<(cap_std::fs::Dir, std::ffi::OsString, File, Metadata), String> {
    let path = &located.path;
    let meta =
        std::fs::metadata(path).map_err(|e| format!("cannot {verb} {}: {e}", path.display()))?;
    if !meta.is_file() {
        return Err(format!(
            "cannot {verb} {}: it is {}, not a regular file",
            path.display(),
            kind(&meta)
        ));
    }
    refuse_own_database(path, &meta, verb)?;
    let (dir, name) = reach::open_parent(ctx, located, false)?;
    let file = dir
        .open_with(
            &name,
            cap_std::fs::OpenOptions::new()
                .read(true)
                .write(verb != "read")
                .custom_flags(NO_FOLLOW),
        )
        .map_err(|e| format!("cannot {verb} {}: {e}", path.display()))?
        .into_std();
    let (file, meta) = refuse_opened_database(path, file, verb)?;
    check_opened(ctx, located, &meta, verb)?;
    Ok((dir, name, file, meta))
}

/// Puts `content` at `name` in `dir` whole or not at all (protocol §4.19): written
/// to a new file beside it, with the replaced file's permissions and owner, synced,
/// then renamed over the old one, so a crash leaves the old text or the new, never
/// a part of either. `original` is the replaced file, opened for writing, and what
/// it was; `None` when there was none: the new file is then put in place only
/// while the name is still free (a file that appeared there since is not
/// replaced).
///
/// The original is written in place instead — a crash may then leave it partly
/// written — where a new file cannot stand for it: when it has other hard links
/// (they must see the change), when its owner cannot be kept, or when its
/// directory takes no new file.
pub(crate) fn replace_whole(
    dir: &cap_std::fs::Dir,
    name: &std::ffi::OsStr,
    content: &[u8],
    original: Option<(&mut File, &Metadata)>,
) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let in_place = |file: &mut File| -> std::io::Result<()> {
        use std::io::Seek;
        file.seek(std::io::SeekFrom::Start(0))?;
        file.set_len(0)?;
        file.write_all(content)?;
        file.sync_all()
    };
    let mut original = original;
    if let Some((file, meta)) = &mut original
        && (meta.nlink() > 1 || has_extended_attributes(file))
    {
        return in_place(file);
    }
    let temp = format!(".steward-{}.tmp", uuid::Uuid::now_v7().simple());
    let created = dir.open_with(
        &temp,
        cap_std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(NO_FOLLOW),
    );
    let mut new = match created {
        Ok(new) => new.into_std(),
        Err(e) => {
            let refused = matches!(
                e.kind(),
                std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem
            );
            return match &mut original {
                Some((file, _)) if refused => in_place(file),
                _ => Err(e),
            };
        }
    };
    // The replaced file's owner, then its permissions (a change of owner clears
    // set-user-ID), or the original written in place.
    if let Some((file, meta)) = &mut original {
        let kept = new
            .metadata()
            .map(|made| {
                (made.uid(), made.gid()) == (meta.uid(), meta.gid())
                    || std::os::unix::fs::fchown(&new, Some(meta.uid()), Some(meta.gid())).is_ok()
            })
            .and_then(|owned| {
                new.set_permissions(std::fs::Permissions::from_mode(meta.mode() & 0o7777))
                    .map(|()| owned)
            });
        match kept {
            Ok(true) => {}
            Ok(false) => {
                drop(new);
                let _ = dir.remove_file(&temp);
                return in_place(file);
            }
            Err(e) => {
                drop(new);
                let _ = dir.remove_file(&temp);
                return Err(e);
            }
        }
    }
    let placed = new
        .write_all(content)
        .and_then(|()| new.sync_all())
        .and_then(|()| {
            crate::failpoint!("tools.before_replace");
            match original {
                None => rename_no_replace(dir, &temp, name),
                Some(_) => dir.rename(&temp, dir, name),
            }
        });
    if placed.is_err() {
        let _ = dir.remove_file(&temp);
    }
    placed?;
    // The new name lasts through a power cut too. The file is in place whatever
    // the sync says, so a failure is logged, not reported as the tool's.
    if let Err(e) = sync_dir(dir) {
        tracing::warn!(error = %e, "could not sync the directory of a replaced file");
    }
    Ok(())
}

/// Syncs `dir`'s entries to disk (protocol §4.19). A directory handle that is only
/// walked by (`O_PATH`, as cap-std opens them) cannot be synced: the directory is
/// opened again, for reading, and that is synced.
fn sync_dir(dir: &cap_std::fs::Dir) -> std::io::Result<()> {
    let mut options = cap_std::fs::OpenOptions::new();
    options.read(true).custom_flags(libc::O_DIRECTORY);
    dir.open_with(".", &options)?.into_std().sync_all()
}

/// Whether `file` carries extended attributes a new file would not — an access
/// control list, a user's attributes — so that it is written in place. A security
/// label (`security.*`, which the system gives a new file itself) does not count.
/// Where that cannot be told, it is assumed it does not.
#[allow(unsafe_code)]
fn has_extended_attributes(file: &File) -> bool {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let fd = file.as_raw_fd();
        // SAFETY: with a null buffer of size 0, `flistxattr` only reports the size
        // of the list.
        let size = unsafe { libc::flistxattr(fd, std::ptr::null_mut(), 0) };
        if size <= 0 {
            return false;
        }
        let mut names = vec![0u8; size as usize + 256];
        // SAFETY: the buffer is as long as the length given.
        let got = unsafe { libc::flistxattr(fd, names.as_mut_ptr().cast(), names.len()) };
        if got <= 0 {
            // The list grew in between: something is there.
            return got < 0;
        }
        names[..got as usize]
            .split(|b| *b == 0)
            .any(|name| !name.is_empty() && !name.starts_with(b"security."))
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = file;
        false
    }
}

/// Renames `from` to `to` in `dir` only if nothing is at `to` (`AlreadyExists`
/// otherwise): in one step where the system can (Linux's `RENAME_NOREPLACE`),
/// else by a hard link and the removal of `from`.
#[allow(unsafe_code)]
fn rename_no_replace(
    dir: &cap_std::fs::Dir,
    from: &str,
    to: &std::ffi::OsStr,
) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        use std::os::unix::ffi::OsStrExt;
        let (from_c, to_c) = (
            std::ffi::CString::new(from).map_err(std::io::Error::other)?,
            std::ffi::CString::new(to.as_bytes()).map_err(std::io::Error::other)?,
        );
        let fd = dir.as_raw_fd();
        // SAFETY: plain syscall on a descriptor we hold and two NUL-terminated
        // names that outlive it.
        let rc = unsafe {
            libc::renameat2(
                fd,
                from_c.as_ptr(),
                fd,
                to_c.as_ptr(),
                libc::RENAME_NOREPLACE,
            )
        };
        if rc == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        // A file system without the flag falls back to the link.
        if !matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOSYS)) {
            return Err(e);
        }
    }
    dir.hard_link(from, dir, to)?;
    dir.remove_file(from)
}

/// Refuses a run that finds the file other than the permission question showed it
/// (`now`: its text, `None` for no file): the user approved that change, not
/// another (protocol §4.19).
pub(crate) fn still_as_shown(
    ctx: &ToolContext,
    path: &Path,
    now: Option<&str>,
) -> Result<(), String> {
    match &ctx.shown {
        Some(shown) if !shown.holds(now) => Err(changed_since_shown(path)),
        _ => Ok(()),
    }
}

fn changed_since_shown(path: &Path) -> String {
    format!(
        "{} changed after the permission question showed its diff: nothing was written (read it again and retry)",
        path.display()
    )
}

/// Flags every file tool opens with: no link followed at the end, never blocking.
const NO_FOLLOW: i32 = libc::O_NOFOLLOW | libc::O_NONBLOCK;

/// What was opened must still be what was located: a regular file, and one with
/// no other hard links unless the user allowed exactly this file (an approval of a
/// path with no file yet allows no hard-linked file that appears there).
fn check_opened(
    ctx: &ToolContext,
    located: &reach::Located,
    meta: &Metadata,
    verb: &str,
) -> Result<(), String> {
    let path = &located.path;
    if !meta.is_file() {
        return Err(format!(
            "cannot {verb} {}: it is {}, not a regular file",
            path.display(),
            kind(meta)
        ));
    }
    let approved = ctx.approved.as_ref().filter(|a| a.path == *path);
    if let Some(file) = approved.and_then(|a| a.file)
        && file != (meta.dev(), meta.ino())
    {
        return Err(format!(
            "cannot {verb} {}: it is no longer the file that was allowed (it was replaced since)",
            path.display()
        ));
    }
    if meta.nlink() > 1 && approved.and_then(|a| a.file).is_none() {
        return Err(format!(
            "cannot {verb} {}: it is {} and was not allowed",
            path.display(),
            reach::Guard::HardLinks.describe()
        ));
    }
    Ok(())
}

/// `read_file`: a regular file's text, up to the output limit.
#[derive(Debug)]
pub struct ReadFile;

impl Tool for ReadFile {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "read_file".into(),
            description: "Read a text file.".into(),
            parameters: path_schema(json!({})),
        }
    }

    fn assess(&self, ctx: &ToolContext, input: &Value) -> Result<Assessment, String> {
        assess_path(ctx, input)
    }

    fn prepare(&self, ctx: &ToolContext, input: &Value) -> BoxFuture<Result<Prepared, String>> {
        let prepared = string_arg(input, "path").map(|path| {
            let (ctx, path) = (ctx.clone(), path.to_string());
            match ctx.client.clone().filter(|c| c.reads()) {
                // Through the editor: its buffer, unsaved changes included.
                Some(client) => Prepared::new(None, move |_stop| {
                    Box::pin(async move {
                        match read_through(&ctx, client.as_ref(), &path).await {
                            Ok(output) => output,
                            Err(e) => ToolOutput::Failed(e),
                        }
                    })
                }),
                None => blocking(move || match read_capped(&ctx, &path) {
                    Ok(output) => output,
                    Err(e) => ToolOutput::Failed(e),
                }),
            }
        });
        Box::pin(async move { prepared })
    }
}

/// `read_file` through the client: located and checked as on disk, read as the
/// editor has it, capped at the output limit.
async fn read_through(
    ctx: &ToolContext,
    client: &dyn crate::tools::ClientFiles,
    path: &str,
) -> Result<ToolOutput, String> {
    names_a_file(path, "read")?;
    let located = located_off_thread(ctx, path).await?;
    let text = client.read(&located.path).await?;
    let bytes = text.len();
    let (output, truncated) = cap_output(text, ctx.config.output_limit_bytes);
    Ok(ToolOutput::Completed {
        output,
        structured: Some(json!({"bytes": bytes, "truncated": truncated, "through": "client"})),
    })
}

/// Refuses a path ending in `/` or `/.` (or `.` itself) for a tool that takes a
/// file: it names a directory.
fn names_a_file(path: &str, verb: &str) -> Result<(), String> {
    let last = path.rsplit('/').next().unwrap_or("");
    if path.ends_with('/') || last == "." || last == ".." {
        return Err(format!(
            "cannot {verb} {path}: a path ending in `/`, `.` or `..` names a directory, not a file"
        ));
    }
    Ok(())
}

/// Reads at most the output limit of a regular file: the rest is never read.
fn read_capped(ctx: &ToolContext, path: &str) -> Result<ToolOutput, String> {
    names_a_file(path, "read")?;
    let located = reach::located_for_run(ctx, path)?;
    let path = located.path.clone();
    let (file, meta) = open_regular(ctx, &located)?;
    let limit = ctx.config.output_limit_bytes;
    let mut bytes = Vec::with_capacity(limit.min(64 * 1024) + 1);
    file.take(limit as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let over = bytes.len() > limit;
    bytes.truncate(limit);
    let (mut output, cut) = cap_output(String::from_utf8_lossy(&bytes).into_owned(), limit);
    let truncated = over || cut;
    if over && !cut {
        output.push_str("\n[output truncated]");
    }
    Ok(ToolOutput::Completed {
        output,
        structured: Some(json!({"bytes": meta.len(), "truncated": truncated})),
    })
}

/// `list_dir`: a directory's entries, sorted, up to the cap.
#[derive(Debug)]
pub struct ListDir;

impl Tool for ListDir {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "list_dir".into(),
            description: "List a directory's entries (directories end with /).".into(),
            parameters: path_schema(json!({})),
        }
    }

    fn assess(&self, ctx: &ToolContext, input: &Value) -> Result<Assessment, String> {
        assess_path(ctx, input)
    }

    fn prepare(&self, ctx: &ToolContext, input: &Value) -> BoxFuture<Result<Prepared, String>> {
        let prepared = string_arg(input, "path").map(|path| {
            let (ctx, path) = (ctx.clone(), path.to_string());
            blocking(move || match list(&ctx, &path) {
                Ok(output) => output,
                Err(e) => ToolOutput::Failed(e),
            })
        });
        Box::pin(async move { prepared })
    }
}

/// Lists at most [`MAX_ENTRIES`] entries, sorted.
fn list(ctx: &ToolContext, path: &str) -> Result<ToolOutput, String> {
    let located = reach::located_for_run(ctx, path)?;
    let path = located.path.clone();
    let meta =
        std::fs::metadata(&path).map_err(|e| format!("cannot list {}: {e}", path.display()))?;
    if !meta.is_dir() {
        return Err(format!(
            "cannot list {}: it is {}, not a directory",
            path.display(),
            kind(&meta)
        ));
    }
    let dir = reach::open_dir(ctx, &path, false)?;
    let entries = dir
        .entries()
        .map_err(|e| format!("cannot list {}: {e}", path.display()))?;
    let mut names = Vec::new();
    let mut capped = false;
    for entry in entries.flatten() {
        if names.len() == MAX_ENTRIES {
            capped = true;
            break;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        names.push(if entry.file_type().is_ok_and(|t| t.is_dir()) {
            format!("{name}/")
        } else {
            name
        });
    }
    names.sort();
    let count = names.len();
    let mut text = names.join("\n");
    if capped {
        text.push_str(&format!(
            "\n[listing stopped after {MAX_ENTRIES} entries; the directory has more]"
        ));
    }
    let (output, truncated) = cap_output(text, ctx.config.output_limit_bytes);
    Ok(ToolOutput::Completed {
        output,
        structured: Some(json!({"entries": count, "capped": capped, "truncated": truncated})),
    })
}

/// `write_file`: writes (or replaces) a regular file, creating its parents.
#[derive(Debug)]
pub struct WriteFile;

impl Tool for WriteFile {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "write_file".into(),
            description:
                "Write a text file, creating parent directories; replaces an existing file.".into(),
            parameters: path_schema(json!({"content": {"type": "string"}})),
        }
    }

    fn assess(&self, ctx: &ToolContext, input: &Value) -> Result<Assessment, String> {
        write_preview(ctx, input)
    }

    /// Through a client that reads for Steward, the question shows the write over
    /// its buffer.
    fn preview(
        &self,
        ctx: &ToolContext,
        input: &Value,
    ) -> BoxFuture<Result<Option<FileDiff>, String>> {
        let client = ctx.client.clone().filter(|c| c.reads() && c.writes());
        let ctx = ctx.clone();
        let path = string_arg(input, "path").ok().map(str::to_string);
        let content = string_arg(input, "content").ok().map(str::to_string);
        Box::pin(async move {
            Ok(async move {
                let (client, path, content) = (client?, path?, content?);
                let located = located_off_thread(&ctx, &path).await.ok()?;
                let old = if std::fs::symlink_metadata(&located.path).is_ok() {
                    Some(client.read(&located.path).await.ok()?)
                } else {
                    None
                };
                Some(FileDiff::between(
                    &located.path.to_string_lossy(),
                    old.as_deref(),
                    &content,
                ))
            }
            .await)
        })
    }

    fn prepare(&self, ctx: &ToolContext, input: &Value) -> BoxFuture<Result<Prepared, String>> {
        let prepared = string_arg(input, "path").and_then(|path| {
            let content = string_arg(input, "content")?.to_string();
            let (ctx, path) = (ctx.clone(), path.to_string());
            Ok(match ctx.client.clone().filter(|c| c.writes()) {
                Some(client) => Prepared::new(None, move |_stop| {
                    Box::pin(async move {
                        match write_through(&ctx, client.as_ref(), &path, content).await {
                            Ok(output) => output,
                            Err(e) => ToolOutput::Failed(e),
                        }
                    })
                }),
                None => blocking(move || match write(&ctx, &path, &content) {
                    Ok(output) => output,
                    Err(e) => ToolOutput::Failed(e),
                }),
            })
        });
        Box::pin(async move { prepared })
    }
}

/// `write_file` through the client: located and checked as on disk, the old text
/// read as the editor has it (when it reads for Steward), written by the editor.
async fn write_through(
    ctx: &ToolContext,
    client: &dyn crate::tools::ClientFiles,
    path: &str,
    content: String,
) -> Result<ToolOutput, String> {
    names_a_file(path, "write")?;
    let located = located_off_thread(ctx, path).await?;
    // What it holds: as the editor has it, or on disk for a client that only
    // writes (`None`: it cannot be read as text).
    let old = if std::fs::symlink_metadata(&located.path).is_err() {
        Some(None)
    } else if client.reads() {
        client.read(&located.path).await.ok().map(Some)
    } else {
        let (probe, at) = (ctx.clone(), located.clone());
        tokio::task::spawn_blocking(move || current_text(&probe, &at, MAX_EDIT_BYTES))
            .await
            .ok()
            .and_then(Result::ok)
    };
    if ctx.shown.is_some() {
        let now = old
            .as_ref()
            .ok_or_else(|| changed_since_shown(&located.path))?;
        still_as_shown(ctx, &located.path, now.as_deref())?;
    }
    crate::tools::keeps_hidden_values(
        &ctx.config.hidden_env,
        old.as_ref().and_then(|o| o.as_deref()),
        &content,
        &located.path,
    )?;
    let bytes = content.len();
    let diff = old
        .as_ref()
        .map(|old| FileDiff::between(&located.path.to_string_lossy(), old.as_deref(), &content));
    client.write(&located.path, content).await?;
    let mut structured = json!({"bytes": bytes, "through": "client"});
    if let Some(diff) = diff {
        structured["diff"] = json!(diff);
    }
    Ok(ToolOutput::Completed {
        output: format!("wrote {bytes} bytes to {}", located.path.display()),
        structured: Some(structured),
    })
}

/// Writes a regular file (creating it and its parents), never blocking on whatever
/// the path names, and never anywhere but where it was located: its directories are
/// created beneath the session's directory (or the approved path's existing
/// ancestor), and the file is opened by name in the checked directory. A path the
/// user approved while no file was there is created afresh, never opened: a file
/// that appeared there since (a hard link to a key, say) was not what was approved.
fn write(ctx: &ToolContext, path: &str, content: &str) -> Result<ToolOutput, String> {
    names_a_file(path, "write")?;
    let located = reach::located_for_run(ctx, path)?;
    let path = located.path.clone();
    let existed = std::fs::symlink_metadata(&path).is_ok();
    if let Ok(meta) = std::fs::metadata(&path) {
        if !meta.is_file() {
            return Err(format!(
                "cannot write {}: it is {}, not a regular file",
                path.display(),
                kind(&meta)
            ));
        }
        refuse_own_database(&path, &meta, "write")?;
    }
    let (dir, name) = reach::open_parent(ctx, &located, true)?;
    // A path the user approved while no file was there binds to no file.
    let fresh = ctx.approved.as_ref().is_some_and(|a| a.file.is_none());
    if fresh && existed {
        return Err(format!(
            "cannot write {}: a file appeared there after it was allowed",
            path.display()
        ));
    }
    // The file replaced is opened first — read and write, as it is (a file the
    // user may not write is refused) — and checked as located and approved.
    let (old, mut opened) = if existed {
        let file = dir
            .open_with(
                &name,
                cap_std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .custom_flags(NO_FOLLOW),
            )
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?
            .into_std();
        let (mut file, meta) = refuse_opened_database(&path, file, "write")?;
        check_opened(ctx, &located, &meta, "write")?;
        // What it held, for the diff (a file too large, or not text, shows none).
        let text = if meta.len() <= MAX_EDIT_BYTES {
            let mut bytes = Vec::new();
            file.read_to_end(&mut bytes)
                .ok()
                .and_then(|_| String::from_utf8(bytes).ok())
        } else {
            None
        };
        (text.map(Some), Some((file, meta)))
    } else {
        (Some(None), None)
    };
    if ctx.shown.is_some() {
        let now = old.as_ref().ok_or_else(|| changed_since_shown(&path))?;
        still_as_shown(ctx, &path, now.as_deref())?;
    }
    crate::tools::keeps_hidden_values(
        &ctx.config.hidden_env,
        old.as_ref().and_then(|o| o.as_deref()),
        content,
        &path,
    )?;
    let original = opened.as_mut().map(|(file, meta)| (file, &*meta));
    replace_whole(&dir, &name, content.as_bytes(), original).map_err(|e| match e.kind() {
        std::io::ErrorKind::AlreadyExists => format!(
            "cannot write {}: a file appeared there while it was being written",
            path.display()
        ),
        _ => format!("cannot write {}: {e}", path.display()),
    })?;
    let mut structured = json!({"bytes": content.len()});
    if let Some(old) = old {
        let diff = FileDiff::between(&path.to_string_lossy(), old.as_deref(), content);
        structured["diff"] = json!(diff);
    }
    Ok(ToolOutput::Completed {
        output: format!("wrote {} bytes to {}", content.len(), path.display()),
        structured: Some(structured),
    })
}

#[cfg(test)]
mod tests;
