//! Where a file tool reaches, and opening exactly that (protocol §4.13).
//!
//! A path is first *located*: made absolute against the session's directory and
//! resolved after every symbolic link, so that it is judged by where it lands. A
//! located path is **guarded** — asked about every time, whatever `tools.allow`
//! says — when it lies outside the session's directory (a directory of `/`, a home
//! directory or any of its ancestors is no boundary at all), in a credential
//! location, Steward's own data directory or its configuration, or is a file with
//! other hard links (the same file may be reachable from anywhere). The home
//! directories are `$HOME` and the user's home in the password database: either
//! may hold the credentials, and `$HOME` may be unset or point elsewhere.
//!
//! A run then opens exactly what was located, or nothing: the directory the target
//! lies in is opened one component at a time from `/` without following any link
//! (`cap-fs-ext`'s `open_dir_nofollow`: every link was resolved when the path was
//! located, so a component that is a link now was swapped since) and, where the
//! kernel can tell, checked to be the very directory located; the target itself is
//! then opened in it by name, without following a link. A path that resolves
//! elsewhere at run time than when the user was asked is refused, and so is one
//! whose directories were
//! swapped for links since it was located. An approval binds the file the user was
//! asked about: the same file (device, inode) if it existed then, and a file created
//! by the run itself (never one that appeared since) if it did not.

use std::ffi::OsString;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use cap_std::ambient_authority;
use cap_std::fs::Dir;

use crate::tools::ToolContext;

/// Why a path is asked about every time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guard {
    /// Outside the session's directory (or the session's directory is no boundary).
    Outside,
    /// In a credential location: `~/.ssh`, `~/.gnupg`, `~/.aws`, a keychain, ….
    Credentials,
    /// In Steward's own data directory.
    DataDirectory,
    /// Steward's own configuration: it decides which tools run without asking.
    Settings,
    /// A file with other hard links: the same file may be reachable from anywhere.
    HardLinks,
}

impl Guard {
    /// What the question says about the path.
    pub fn describe(self) -> &'static str {
        match self {
            Guard::Outside => "outside the session directory",
            Guard::Credentials => "in a credential location",
            Guard::DataDirectory => "in Steward's own data directory",
            Guard::Settings => {
                "Steward's own configuration (it decides which tools run without asking)"
            }
            Guard::HardLinks => {
                "a file with other hard links (it may also be reached from elsewhere)"
            }
        }
    }
}

/// A guarded path a call would touch, resolved: what the user is asked about, and
/// what an approval is bound to — the path, and the very file (device, inode) it
/// named when the user was asked, when it existed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Guarded {
    pub path: PathBuf,
    pub guard: Guard,
    pub file: Option<(u64, u64)>,
}

/// A path a file tool would touch, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    /// Absolute, with every symbolic link followed (for a path that does not exist
    /// yet: its nearest existing ancestor's, plus the rest).
    pub path: PathBuf,
    /// Why it is asked about every time, if it is.
    pub guard: Option<Guard>,
    /// The file it names now (device, inode), when it exists.
    pub file: Option<(u64, u64)>,
}

impl Located {
    pub fn guarded(&self) -> Option<Guarded> {
        self.guard.map(|guard| Guarded {
            path: self.path.clone(),
            guard,
            file: self.file,
        })
    }
}

/// Credential locations under the home directory: asked about every time, wherever
/// the session is.
pub const CREDENTIALS: &[&str] = &[
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".kube",
    ".docker",
    ".password-store",
    ".local/share/keyrings",
    "Library/Keychains",
    ".netrc",
    ".git-credentials",
    ".npmrc",
    ".pypirc",
];

/// `path` with every symbolic link followed, as far as it can be ([`real_path`],
/// which follows dangling links too); as given where even that fails.
fn canonical(path: &Path) -> PathBuf {
    real_path(path, 0).unwrap_or_else(|_| path.to_path_buf())
}

/// Where a protected place leads: `None` when that cannot be told (a link that
/// climbs with `..` out of a directory that does not exist yet, say) — it may lead
/// anywhere, so everything counts as inside it.
fn leads_to(place: &Path) -> Option<PathBuf> {
    real_path(place, 0).ok()
}

/// The user's home directories: `$HOME` (when set, non-empty and absolute) and the
/// home the password database records, which may differ (`sudo`, sandboxes) or be
/// all there is (`$HOME` unset).
pub fn homes() -> Vec<PathBuf> {
    let mut homes = Vec::new();
    if let Some(home) = std::env::var_os("HOME").map(PathBuf::from)
        && home.is_absolute()
    {
        homes.push(home);
    }
    if let Some(home) = passwd_home()
        && !homes.contains(&home)
    {
        homes.push(home);
    }
    homes
}

/// The current user's home directory in the password database.
#[allow(unsafe_code)]
fn passwd_home() -> Option<PathBuf> {
    use std::ffi::CStr;
    use std::os::unix::ffi::OsStrExt;
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    // SAFETY: `passwd` is plain data; `getpwuid_r` fills it with pointers into
    // `buf`, which outlives every read of them below.
    unsafe {
        let mut pwd: libc::passwd = std::mem::zeroed();
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        let rc = libc::getpwuid_r(
            libc::getuid(),
            &mut pwd,
            buf.as_mut_ptr(),
            buf.len(),
            &mut result,
        );
        if rc != 0 || result.is_null() || pwd.pw_dir.is_null() {
            return None;
        }
        let dir = CStr::from_ptr(pwd.pw_dir).to_bytes();
        (!dir.is_empty())
            .then(|| PathBuf::from(std::ffi::OsStr::from_bytes(dir)))
            .filter(|d| d.is_absolute())
    }
}

/// Every place [`locate`] guards wherever the session is — the credential
/// locations, Steward's data directory and its settings — as named and as
/// resolved (`/` for one that leads who knows where): for a search, which judges
/// the many paths it finds beneath one located root by prefix alone.
pub fn guarded_places(ctx: &ToolContext) -> Vec<PathBuf> {
    let mut places = Vec::new();
    let mut add = |place: &Path| match leads_to(place) {
        Some(real) => {
            places.push(lexical(place));
            places.push(real);
        }
        None => places.push(PathBuf::from("/")),
    };
    for home in homes() {
        for home in [lexical(&home), canonical(&home)] {
            for c in CREDENTIALS {
                add(&home.join(c));
            }
        }
    }
    if let Some(data) = &ctx.data_dir {
        add(data);
    }
    for settings in &ctx.config.settings {
        add(settings);
    }
    places
}

/// Locates `path` for a call in `ctx` (see the module's documentation).
pub fn locate(ctx: &ToolContext, path: &str) -> Result<Located, String> {
    locate_in(ctx, path, &homes())
}

/// [`locate`] with the home directories given.
fn locate_in(ctx: &ToolContext, path: &str, homes: &[PathBuf]) -> Result<Located, String> {
    if path.contains('\0') {
        return Err("the path contains a NUL byte".into());
    }
    // What it names, and where it lands (links followed, `..` taken physically).
    let asked = lexical(&ctx.resolve(path));
    let path = real_path(&ctx.resolve(path), 0)?;
    let base = canonical(&ctx.directory);
    // `/`, a home directory and every ancestor of one hold that home's credentials:
    // no boundary at all.
    let boundless = base.parent().is_none()
        || homes
            .iter()
            .any(|h| canonical(h).starts_with(&base) || lexical(h).starts_with(&base));
    // A protected place is judged both as named and as resolved (dangling links
    // followed: it may not exist yet), and so is the path: `~/.ssh` may be a link
    // (into a dotfiles folder inside the session, say), and the path may reach it
    // through one.
    let within = |place: &Path| {
        let Some(real) = leads_to(place) else {
            return true;
        };
        [lexical(place), real]
            .iter()
            .any(|d| path.starts_with(d) || asked.starts_with(d))
    };
    let in_credentials = homes.iter().any(|home| {
        [lexical(home), canonical(home)]
            .iter()
            .any(|h| CREDENTIALS.iter().any(|c| within(&h.join(c))))
    });
    let in_data_dir = ctx.data_dir.as_deref().is_some_and(within);
    let in_settings = ctx.config.settings.iter().any(|p| within(p));
    let meta = std::fs::metadata(&path).ok();
    let hard_linked = meta.as_ref().is_some_and(|m| m.is_file() && m.nlink() > 1);
    let file = meta.as_ref().map(|m| (m.dev(), m.ino()));
    // Credentials and Steward's own files are named as such wherever they are.
    let guard = if in_credentials {
        Some(Guard::Credentials)
    } else if in_data_dir {
        Some(Guard::DataDirectory)
    } else if in_settings {
        Some(Guard::Settings)
    } else if boundless || !path.starts_with(&base) {
        Some(Guard::Outside)
    } else if hard_linked {
        Some(Guard::HardLinks)
    } else {
        None
    };
    Ok(Located { path, guard, file })
}

/// `path` with `.` and `..` folded away lexically, links left as they are (what the
/// path names, as opposed to where it lands).
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// `wanted` with every symbolic link followed: the real path of its longest existing
/// part, plus the rest. A dangling link is followed to where it points, so a write
/// through it is judged by where it would land.
fn real_path(wanted: &Path, depth: usize) -> Result<PathBuf, String> {
    // The kernel's own limit (`MAXSYMLINKS` on Linux): a longer chain cannot lead
    // anywhere.
    const MAX_LINKS: usize = 40;
    if depth > MAX_LINKS {
        return Err(format!("{}: too many symbolic links", wanted.display()));
    }
    let mut existing = wanted;
    let mut rest = Vec::new();
    let real = loop {
        if let Ok(real) = std::fs::canonicalize(existing) {
            break real;
        }
        if std::fs::symlink_metadata(existing).is_ok_and(|m| m.file_type().is_symlink()) {
            let target = std::fs::read_link(existing)
                .map_err(|e| format!("cannot resolve {}: {e}", existing.display()))?;
            let target = match existing.parent() {
                Some(parent) if target.is_relative() => parent.join(target),
                _ => target,
            };
            break real_path(&target, depth + 1)?;
        }
        if existing.components().next_back() == Some(Component::ParentDir) {
            // `missing/..`: what it climbs out of does not exist, so where it lands
            // cannot be told.
            return Err(format!(
                "{} climbs with `..` through a directory that does not exist",
                wanted.display()
            ));
        }
        let (Some(parent), Some(name)) = (existing.parent(), existing.file_name()) else {
            return Err(format!("cannot resolve {}", wanted.display()));
        };
        rest.push(name.to_os_string());
        existing = parent;
    };
    Ok(rest.into_iter().rev().fold(real, |p, name| p.join(name)))
}

/// Locates `path` for a run and checks it may be touched: unguarded and not bound
/// to an approval, or exactly what the user approved — the same resolved path, and
/// the same file when one existed then, or still no file when none did. A path that
/// now resolves elsewhere than what the user approved is refused, wherever it lands
/// (inside the session too: the approval was for the other path).
pub fn located_for_run(ctx: &ToolContext, path: &str) -> Result<Located, String> {
    let located = locate(ctx, path)?;
    match (&ctx.approved, located.guard) {
        (Some(approved), _) if approved.path != located.path => Err(format!(
            "{} now resolves to {}, not to {}, which was allowed: refused",
            path,
            located.path.display(),
            approved.path.display()
        )),
        (Some(approved), _) if approved.file.is_some() && approved.file != located.file => {
            Err(format!(
                "{} is no longer the file that was allowed (it was replaced since): refused",
                located.path.display()
            ))
        }
        (Some(approved), _) if approved.file.is_none() && located.file.is_some() => Err(format!(
            "{} did not exist when it was allowed and does now (it was created since): refused",
            located.path.display()
        )),
        (Some(_), _) | (None, None) => Ok(located),
        (None, Some(guard)) => Err(format!(
            "{} is {} and was not allowed",
            located.path.display(),
            guard.describe()
        )),
    }
}

/// The path the kernel has for an open descriptor (`/proc/self/fd`), where it can
/// tell.
fn fd_path(fd: &impl AsRawFd) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok()
}

/// Checks that the directory opened is `expected` itself.
fn check_is(dir: &Dir, expected: &Path) -> Result<(), String> {
    match fd_path(dir) {
        Some(actual) if actual != expected => Err(format!(
            "{} changed since it was checked (it now leads to {}): refused",
            expected.display(),
            actual.display()
        )),
        _ => Ok(()),
    }
}

/// Opens the directory `path` (a located path, or its parent) exactly: one
/// component at a time from `/`, following no link at all — every link was
/// resolved when the path was located, so a component that is a link now was
/// swapped since, and is refused — and creating what is missing when `create`
/// says so. Where the kernel can tell (`/proc/self/fd`), what is opened is also
/// checked to be `path` itself.
pub fn open_dir(_ctx: &ToolContext, path: &Path, create: bool) -> Result<Dir, String> {
    use cap_fs_ext::DirExt;
    let cannot = |e: std::io::Error| format!("cannot open {}: {e}", path.display());
    let changed = || {
        format!(
            "{} changed since it was checked (a directory on the way is a link now): refused",
            path.display()
        )
    };
    let mut dir = Dir::open_ambient_dir("/", ambient_authority()).map_err(cannot)?;
    for component in path.components() {
        let name = match component {
            Component::RootDir => continue,
            Component::Normal(name) => name,
            _ => {
                return Err(format!(
                    "cannot open {}: it is not resolved",
                    path.display()
                ));
            }
        };
        let opened = match dir.open_dir_nofollow(name) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => {
                match dir.create_dir(name) {
                    Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                        return Err(format!("cannot create {}: {e}", path.display()));
                    }
                    _ => dir.open_dir_nofollow(name),
                }
            }
            other => other,
        };
        dir = match opened {
            Ok(next) => next,
            // A link (ELOOP) or a file (ENOTDIR) where a directory was located.
            Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) => {
                return Err(changed());
            }
            Err(e) => return Err(cannot(e)),
        };
    }
    check_is(&dir, path)?;
    Ok(dir)
}

/// The directory a located file lies in, opened exactly ([`open_dir`]), and the
/// file's name in it.
pub fn open_parent(
    ctx: &ToolContext,
    located: &Located,
    create: bool,
) -> Result<(Dir, OsString), String> {
    let (Some(parent), Some(name)) = (located.path.parent(), located.path.file_name()) else {
        return Err(format!("{} is not a file", located.path.display()));
    };
    Ok((open_dir(ctx, parent, create)?, name.to_os_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ToolsConfig;
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

    fn guard(ctx: &ToolContext, path: &str, home: &Path) -> Option<Guard> {
        locate_in(ctx, path, &[home.to_path_buf()]).unwrap().guard
    }

    #[test]
    fn r4_13_a_session_directory_above_home_is_no_boundary() {
        let root = tempfile::tempdir().unwrap();
        let parent = root.path().join("parent");
        let home = parent.join("user");
        std::fs::create_dir_all(home.join(".ssh")).unwrap();
        std::fs::write(home.join(".ssh/id_rsa"), "key").unwrap();
        std::fs::write(parent.join("notes.txt"), "n").unwrap();
        // Above the home directory, and the home directory itself: everything asks.
        for session in [&parent, &home, &root.path().to_path_buf()] {
            let ctx = ctx_in(session);
            assert_eq!(
                guard(&ctx, parent.join("notes.txt").to_str().unwrap(), &home),
                Some(Guard::Outside),
                "{}",
                session.display()
            );
        }
        // The key is named for what it is, wherever it is asked from.
        let ctx = ctx_in(&parent);
        assert_eq!(
            guard(&ctx, "user/.ssh/id_rsa", &home),
            Some(Guard::Credentials)
        );
    }

    #[test]
    fn r4_13_credential_locations_and_the_data_directory_ask_wherever_the_session_is() {
        let root = tempfile::tempdir().unwrap();
        let home = root.path().join("home");
        std::fs::create_dir_all(home.join(".aws")).unwrap();
        std::fs::write(home.join(".aws/credentials"), "k").unwrap();
        std::fs::create_dir_all(home.join("project")).unwrap();
        std::os::unix::fs::symlink(home.join(".aws"), home.join("project/aws")).unwrap();
        // A session inside a credential location asks for its own files.
        let ctx = ctx_in(&home.join(".aws"));
        assert_eq!(guard(&ctx, "credentials", &home), Some(Guard::Credentials));
        // A link inside the session into one is judged by where it lands.
        let ctx = ctx_in(&home.join("project"));
        assert_eq!(
            guard(&ctx, "aws/credentials", &home),
            Some(Guard::Credentials)
        );
        // Steward's data directory inside a session directory asks too.
        let data = home.join("project/data");
        std::fs::create_dir_all(&data).unwrap();
        let ctx = ToolContext {
            data_dir: Some(data.clone()),
            ..ctx_in(&home.join("project"))
        };
        assert_eq!(
            guard(&ctx, "data/steward.db", &home),
            Some(Guard::DataDirectory)
        );
        assert_eq!(guard(&ctx, "src/main.rs", &home), None);
    }

    #[test]
    fn r4_13_a_credential_location_that_is_a_link_into_the_session_is_still_guarded() {
        // The dotfiles layout: `~/.ssh` links into a folder the session works in.
        let root = tempfile::tempdir().unwrap();
        let home = root.path().join("home");
        std::fs::create_dir_all(home.join("dotfiles/ssh")).unwrap();
        std::fs::write(home.join("dotfiles/ssh/id_rsa"), "key").unwrap();
        std::os::unix::fs::symlink("dotfiles/ssh", home.join(".ssh")).unwrap();
        let ctx = ctx_in(&home.join("dotfiles"));
        let by_name = home.join(".ssh/id_rsa");
        for path in [by_name.to_str().unwrap(), "ssh/id_rsa"] {
            assert_eq!(guard(&ctx, path, &home), Some(Guard::Credentials), "{path}");
        }
        assert_eq!(guard(&ctx, "README.md", &home), None);
    }

    #[test]
    fn r4_13_a_credential_location_not_there_yet_is_guarded_through_a_link() {
        // `~/.ssh` links into the session's dotfiles folder, which has no `ssh` yet;
        // `~/.config` likewise, with no `gcloud` below it.
        let root = tempfile::tempdir().unwrap();
        let home = root.path().join("home");
        std::fs::create_dir_all(home.join("dotfiles/config")).unwrap();
        std::os::unix::fs::symlink("dotfiles/ssh", home.join(".ssh")).unwrap();
        std::os::unix::fs::symlink("dotfiles/config", home.join(".config")).unwrap();
        let ctx = ctx_in(&home.join("dotfiles"));
        for path in [
            "ssh/authorized_keys",
            "config/gcloud/application_default_credentials.json",
        ] {
            assert_eq!(guard(&ctx, path, &home), Some(Guard::Credentials), "{path}");
        }
        assert_eq!(guard(&ctx, "config/other/settings.json", &home), None);
    }

    #[test]
    fn r4_13_a_credential_link_that_cannot_be_followed_yet_guards_everything() {
        // `~/.docker` climbs out of a directory that does not exist yet: where it
        // will lead cannot be told, so every path asks.
        let root = tempfile::tempdir().unwrap();
        let home = root.path().join("home");
        std::fs::create_dir_all(home.join("dotfiles")).unwrap();
        std::os::unix::fs::symlink("dotfiles/nothere/../docker", home.join(".docker")).unwrap();
        let ctx = ctx_in(&home.join("dotfiles"));
        assert_eq!(
            guard(&ctx, "docker/config.json", &home),
            Some(Guard::Credentials)
        );
        // A chain of links longer than the old limit but within the kernel's is
        // followed to where it lands.
        let root = tempfile::tempdir().unwrap();
        let home = root.path().join("home");
        std::fs::create_dir_all(home.join("dotfiles")).unwrap();
        for i in 0..19 {
            let next = if i == 18 {
                "ssh".to_string()
            } else {
                format!("l{}", i + 1)
            };
            std::os::unix::fs::symlink(next, home.join(format!("dotfiles/l{i}"))).unwrap();
        }
        std::os::unix::fs::symlink("dotfiles/l0", home.join(".ssh")).unwrap();
        let ctx = ctx_in(&home.join("dotfiles"));
        assert_eq!(
            guard(&ctx, "ssh/authorized_keys", &home),
            Some(Guard::Credentials)
        );
        assert_eq!(guard(&ctx, "notes.txt", &home), None);
    }

    #[test]
    fn r4_13_the_home_in_the_password_database_is_a_home_too() {
        let passwd = passwd_home().expect("the password database names a home");
        assert!(passwd.is_absolute());
        assert!(homes().contains(&passwd), "{:?}", homes());
        // Judged against both homes, a session in either is no boundary, and each
        // one's credentials ask.
        let root = tempfile::tempdir().unwrap();
        let env_home = root.path().join("env-home");
        let db_home = root.path().join("db-home");
        std::fs::create_dir_all(db_home.join(".ssh")).unwrap();
        std::fs::create_dir_all(&env_home).unwrap();
        let homes = [env_home.clone(), db_home.clone()];
        let ctx = ctx_in(&db_home);
        let located = locate_in(&ctx, "notes.txt", &homes).unwrap();
        assert_eq!(located.guard, Some(Guard::Outside));
        let ctx = ctx_in(&db_home.join(".ssh"));
        let located = locate_in(&ctx, "authorized_keys", &homes).unwrap();
        assert_eq!(located.guard, Some(Guard::Credentials));
    }

    #[test]
    fn r4_13_stewards_own_configuration_asks_wherever_the_session_is() {
        let root = tempfile::tempdir().unwrap();
        let home = root.path().join("home");
        std::fs::create_dir_all(home.join("dotfiles/config/steward")).unwrap();
        std::os::unix::fs::symlink("dotfiles/config", home.join(".config")).unwrap();
        let ctx = ToolContext {
            config: ToolsConfig {
                settings: vec![
                    home.join(".config/steward/config.toml"),
                    home.join(".config/steward"),
                ],
                ..ToolsConfig::default()
            },
            ..ctx_in(&home.join("dotfiles"))
        };
        for path in ["config/steward/config.toml", "config/steward/other.toml"] {
            assert_eq!(guard(&ctx, path, &home), Some(Guard::Settings), "{path}");
        }
        assert_eq!(guard(&ctx, "config/other.toml", &home), None);
    }

    #[test]
    fn r4_13_a_file_with_other_hard_links_is_guarded() {
        let root = tempfile::tempdir().unwrap();
        let work = root.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        std::fs::write(root.path().join("outside.txt"), "keep").unwrap();
        std::fs::hard_link(root.path().join("outside.txt"), work.join("inside.txt")).unwrap();
        let ctx = ctx_in(&work);
        assert_eq!(
            guard(&ctx, "inside.txt", Path::new("/nonexistent")),
            Some(Guard::HardLinks)
        );
    }

    #[test]
    fn r4_13_a_directory_swapped_for_a_link_after_it_was_located_is_never_opened() {
        let root = tempfile::tempdir().unwrap();
        let work = root.path().join("work");
        let outside = root.path().join("outside");
        std::fs::create_dir_all(work.join("sub")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        let ctx = ctx_in(&work);
        let located = locate_in(&ctx, "sub/deeper/file.txt", &[]).unwrap();
        assert_eq!(located.guard, None);
        // Between the check and the write, `sub` becomes a link out.
        std::fs::remove_dir(work.join("sub")).unwrap();
        std::os::unix::fs::symlink(&outside, work.join("sub")).unwrap();
        let refused = open_parent(&ctx, &located, true).unwrap_err();
        assert!(refused.contains("is a link now"), "{refused}");
        assert!(
            !outside.join("deeper").exists(),
            "a directory was created outside the session"
        );
        // Swapped for a link that stays inside, it is no longer what was located.
        std::fs::remove_file(work.join("sub")).unwrap();
        std::fs::create_dir_all(work.join("other/deeper")).unwrap();
        std::os::unix::fs::symlink("other", work.join("sub")).unwrap();
        let refused = open_parent(&ctx, &located, true).unwrap_err();
        // Refused by the walk itself, which follows no link: no `/proc` needed.
        assert!(refused.contains("is a link now"), "{refused}");
        assert!(!work.join("other/deeper/file.txt").exists());
    }
}
