//! `Sandbox`: every file read, write and removal, confined to one working tree.
//!
//! Paths first pass a purely lexical check (`normalize`), then the work is done through
//! directory file descriptors: the root is opened once, and each component is opened with
//! `openat(O_NOFOLLOW | O_DIRECTORY)` from its parent. A directory swapped for a symlink
//! between a check and its use therefore makes the operation fail instead of escaping the
//! tree, because no step ever resolves a symlink.
//!
//! Rein refuses *every* symlink on the way, not only those pointing outside: a write
//! through an in-tree link would change a file under a different name than the one the
//! agent gave, which the person reviewing the change would not see.
//!
//! Reads, writes and removals take paths as bytes: a file name need not be UTF-8 on Unix,
//! and a checkpoint that holds such a file must be able to put it back or take it out.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use nix::errno::Errno;
use nix::fcntl::{open, openat, readlinkat, renameat, AtFlags, OFlag};
use nix::sys::stat::{fchmod, fstat, fstatat, mkdirat, FileStat, Mode, SFlag};
use nix::unistd::{fsync, symlinkat, unlinkat, UnlinkatFlags};

use super::ExecError;

/// Longest path Rein accepts, in bytes (Linux `PATH_MAX`).
pub const MAX_PATH_BYTES: usize = 4096;
/// Longest path component Rein accepts, in bytes (Linux `NAME_MAX`).
pub const MAX_COMPONENT_BYTES: usize = 255;
/// Name prefix of the temporary files `Sandbox::write` renames into place; watchers may ignore them.
pub const TEMP_PREFIX: &str = ".rein-tmp-";

/// Paths in errors are shortened to this many bytes so a hostile path cannot flood a message.
const SHOWN_PATH_BYTES: usize = 200;
/// Attempts at finding an unused temporary name before giving up.
const TEMP_ATTEMPTS: u32 = 64;

/// Distinguishes temporary files made by concurrent writes in this process.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Confines every path to one working tree.
#[derive(Debug)]
pub struct Sandbox {
    root: PathBuf,
    dir: OwnedFd,
}

/// What a path in the tree holds, as a checkpoint records it: a file's bytes or a link's
/// target, and which of the three it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    /// A regular file, an executable one, or a symbolic link.
    pub kind: NodeKind,
    /// The file's content, or the link's target.
    pub bytes: Vec<u8>,
}

/// The kinds of [`Node`]: git's three file modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeKind {
    /// A regular file without an executable bit.
    File,
    /// A regular file with the owner's executable bit.
    Executable,
    /// A symbolic link, never followed.
    Link,
}

/// What sits at the final component of a path.
enum Entry {
    Missing,
    File(Mode),
}

impl Sandbox {
    /// Opens the working tree at `root` (canonicalized) as the sandbox's only reachable directory.
    pub fn new(root: &Path) -> Result<Self, ExecError> {
        let io_err = |source| ExecError::Io {
            path: root.display().to_string(),
            source,
        };
        let root = root.canonicalize().map_err(io_err)?;
        let dir = open(
            &root,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| io_err(e.into()))?;
        Ok(Self { root, dir })
    }

    /// The canonical path of the working tree.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Validates `rel` and returns it as a clean '/'-separated repo-relative path ("./a//b" -> "a/b").
    pub fn check(&self, rel: &str) -> Result<String, ExecError> {
        let clean = normalize(rel).map_err(|why| ExecError::PathRefused {
            path: shown(rel.as_bytes()),
            why,
        })?;
        let (parents, name) = split(clean.as_bytes());
        if let Some(dir) = self.walk(clean.as_bytes(), &parents, false)? {
            self.entry(&dir, clean.as_bytes(), name)?;
        }
        Ok(clean)
    }

    /// [`Sandbox::check`] for a path an agent writes: also refused inside a submodule or any
    /// repository of its own, whose files no checkpoint of this repository holds (abort could
    /// not take such a write back, nor tell it from the person's).
    pub fn check_writable(&self, rel: &str) -> Result<String, ExecError> {
        let clean = self.check(rel)?;
        self.outside_nested(clean.as_bytes())?;
        Ok(clean)
    }

    /// Refuses a path under a directory (below the root) that holds a `.git`.
    fn outside_nested(&self, clean: &[u8]) -> Result<(), ExecError> {
        let mut cut = 0;
        while let Some(at) = clean[cut..].iter().position(|&b| b == b'/') {
            let dir = &clean[..cut + at];
            let git = self.root.join(OsStr::from_bytes(dir)).join(".git");
            if std::fs::symlink_metadata(git).is_ok() {
                return Err(ExecError::PathRefused {
                    path: shown(clean),
                    why: format!(
                        "{} is a submodule or a repository of its own, which Rein's checkpoints do not hold (an abort could not take the change back); leave it to the person, or start a task in {} itself",
                        shown(dir),
                        shown(dir)
                    ),
                });
            }
            cut += at + 1;
        }
        Ok(())
    }

    /// Validates `rel` as a directory in the tree (every component a real directory, no
    /// symlinks) and returns it clean; a missing directory is an error naming it.
    pub fn check_dir(&self, rel: &str) -> Result<String, ExecError> {
        let clean = normalize(rel).map_err(|why| ExecError::PathRefused {
            path: shown(rel.as_bytes()),
            why,
        })?;
        let all: Vec<&[u8]> = clean.as_bytes().split(|b| *b == b'/').collect();
        match self.walk(clean.as_bytes(), &all, false)? {
            Some(_) => Ok(clean),
            None => Err(ExecError::PathRefused {
                path: shown(clean.as_bytes()),
                why: "there is no such directory in the working tree".into(),
            }),
        }
    }

    /// Reads a file in the tree; `None` when it does not exist.
    pub fn read(&self, rel: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>, ExecError> {
        let rel = rel.as_ref();
        let clean = lexical(rel)?;
        let (parents, name) = split(&clean);
        let Some(dir) = self.walk(&clean, &parents, false)? else {
            return Ok(None);
        };
        // O_NONBLOCK keeps a FIFO planted in the tree from blocking the open forever.
        let flags = OFlag::O_RDONLY
            | OFlag::O_NOFOLLOW
            | OFlag::O_NONBLOCK
            | OFlag::O_NOCTTY
            | OFlag::O_CLOEXEC;
        let fd = match openat(&dir, name, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::ENOENT | Errno::ENOTDIR) => return Ok(None),
            Err(Errno::ELOOP) => return Err(symlink_refusal(rel, &clean)),
            Err(e) => return Err(io_error(&clean, e)),
        };
        let stat = fstat(&fd).map_err(|e| io_error(&clean, e))?;
        if let Some(what) = not_a_file(&stat) {
            return Err(ExecError::NotAFile {
                path: shown(&clean),
                what,
            });
        }
        let mut content = Vec::new();
        File::from(fd)
            .read_to_end(&mut content)
            .map_err(|source| ExecError::Io {
                path: shown(&clean),
                source,
            })?;
        Ok(Some(content))
    }

    /// Replaces a file's content atomically (temp file, fsync, rename), keeping its permission bits
    /// and creating missing parent directories inside the tree.
    pub fn write(&self, rel: impl AsRef<[u8]>, content: &[u8]) -> Result<(), ExecError> {
        let clean = lexical(rel.as_ref())?;
        self.outside_nested(&clean)?;
        let (parents, name) = split(&clean);
        let Some(dir) = self.walk(&clean, &parents, true)? else {
            return Err(io_error(&clean, Errno::ENOENT));
        };
        let mode = match self.entry(&dir, &clean, name)? {
            Entry::Missing => None,
            Entry::File(mode) => Some(mode),
        };
        let (temp, fd) = create_temp(&dir, mode.is_none()).map_err(|e| io_error(&clean, e))?;
        let mut file = File::from(fd);
        let placed = (|| -> io::Result<()> {
            file.write_all(content)?;
            if let Some(mode) = mode {
                fchmod(&file, mode)?;
            }
            file.sync_all()?;
            // Renaming replaces whatever is at `name` now, even a symlink swapped in since the
            // check, without following it: the write cannot land outside the tree.
            renameat(&dir, temp.as_str(), &dir, name)?;
            Ok(())
        })();
        if let Err(source) = placed {
            // Best effort: the temp file is ours and useless now; a failure here changes nothing.
            let _ = unlinkat(&dir, temp.as_str(), UnlinkatFlags::NoRemoveDir);
            return Err(ExecError::Io {
                path: shown(&clean),
                source,
            });
        }
        sync_dir(&dir, &clean)
    }

    /// Removes a file from the tree; succeeds if it is already absent. A symlink is removed
    /// itself (its target is never touched), so links an agent made can be cleaned up.
    pub fn remove(&self, rel: impl AsRef<[u8]>) -> Result<(), ExecError> {
        let clean = lexical(rel.as_ref())?;
        let (parents, name) = split(&clean);
        let Some(dir) = self.walk(&clean, &parents, false)? else {
            return Ok(());
        };
        match unlinkat(&dir, name, UnlinkatFlags::NoRemoveDir) {
            Ok(()) => sync_dir(&dir, &clean),
            Err(Errno::ENOENT) => Ok(()),
            Err(Errno::EISDIR | Errno::EPERM) if is_dir(&dir, name) => Err(ExecError::NotAFile {
                path: shown(&clean),
                what: "a directory",
            }),
            Err(e) => Err(io_error(&clean, e)),
        }
    }

    /// What `rel` holds, without following a link at its end (nor anywhere on the way):
    /// `None` when nothing is there; an error for a directory or a special file.
    pub fn read_node(&self, rel: impl AsRef<[u8]>) -> Result<Option<Node>, ExecError> {
        let rel = rel.as_ref();
        let clean = lexical(rel)?;
        let (parents, name) = split(&clean);
        let Some(dir) = self.walk(&clean, &parents, false)? else {
            return Ok(None);
        };
        let stat = match fstatat(&dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(stat) => stat,
            Err(Errno::ENOENT | Errno::ENOTDIR) => return Ok(None),
            Err(e) => return Err(io_error(&clean, e)),
        };
        if file_type(&stat) == SFlag::S_IFLNK {
            return match readlinkat(&dir, name) {
                Ok(target) => Ok(Some(Node {
                    kind: NodeKind::Link,
                    bytes: std::os::unix::ffi::OsStringExt::into_vec(target),
                })),
                Err(Errno::ENOENT) => Ok(None),
                Err(e) => Err(io_error(&clean, e)),
            };
        }
        let kind = if stat.st_mode & 0o100 != 0 {
            NodeKind::Executable
        } else {
            NodeKind::File
        };
        Ok(self.read(rel)?.map(|bytes| Node { kind, bytes }))
    }

    /// Puts `node` at `rel` exactly: a file's bytes with its executable bits set or cleared
    /// (the other permission bits kept from the file it replaces), or a link to its target.
    /// Whatever is at `rel` (a file or a link, never followed) is replaced atomically by a
    /// rename; missing parent directories are made inside the tree. A link is written as the
    /// checkpoint holds it, wherever it points: it is never followed here.
    pub fn put(&self, rel: impl AsRef<[u8]>, node: &Node) -> Result<(), ExecError> {
        let clean = lexical(rel.as_ref())?;
        let (parents, name) = split(&clean);
        let Some(dir) = self.walk(&clean, &parents, true)? else {
            return Err(io_error(&clean, Errno::ENOENT));
        };
        let now = match fstatat(&dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(stat) => Some(stat),
            Err(Errno::ENOENT) => None,
            Err(e) => return Err(io_error(&clean, e)),
        };
        // A file or a link is replaced; a directory or a special file is not.
        if let Some(what) = now
            .as_ref()
            .filter(|st| file_type(st) != SFlag::S_IFLNK)
            .and_then(not_a_file)
        {
            return Err(ExecError::NotAFile {
                path: shown(&clean),
                what,
            });
        }
        let old_mode = now
            .filter(|st| file_type(st) == SFlag::S_IFREG)
            .map(|st| st.st_mode & 0o7777);
        let temp = match node.kind {
            NodeKind::Link => self.temp_link(&dir, &clean, &node.bytes)?,
            NodeKind::File | NodeKind::Executable => {
                let (temp, fd) =
                    create_temp(&dir, old_mode.is_none()).map_err(|e| io_error(&clean, e))?;
                let mut file = File::from(fd);
                let written = (|| -> io::Result<()> {
                    file.write_all(&node.bytes)?;
                    let base = match old_mode {
                        Some(mode) => mode,
                        None => fstat(&file)?.st_mode & 0o7777,
                    };
                    let mode = if node.kind == NodeKind::Executable {
                        // As `chmod +x` does: executable wherever readable.
                        base | ((base & 0o444) >> 2)
                    } else {
                        base & !0o111
                    };
                    fchmod(&file, Mode::from_bits_truncate(mode))?;
                    file.sync_all()
                })();
                if let Err(source) = written {
                    let _ = unlinkat(&dir, temp.as_str(), UnlinkatFlags::NoRemoveDir);
                    return Err(ExecError::Io {
                        path: shown(&clean),
                        source,
                    });
                }
                temp
            }
        };
        // Replaces a file or a link at `name` without following it.
        if let Err(e) = renameat(&dir, temp.as_str(), &dir, name) {
            let _ = unlinkat(&dir, temp.as_str(), UnlinkatFlags::NoRemoveDir);
            return Err(io_error(&clean, e));
        }
        sync_dir(&dir, &clean)
    }

    /// A new link to `target` under an unused temporary name in `dir`.
    fn temp_link(&self, dir: &OwnedFd, clean: &[u8], target: &[u8]) -> Result<String, ExecError> {
        let target = std::ffi::OsStr::from_bytes(target);
        let mut last = Errno::EEXIST;
        for _ in 0..TEMP_ATTEMPTS {
            let name = format!(
                "{TEMP_PREFIX}{}-{}",
                std::process::id(),
                TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
            );
            match symlinkat(target, dir, name.as_str()) {
                Ok(()) => return Ok(name),
                Err(Errno::EEXIST) => last = Errno::EEXIST,
                Err(e) => return Err(io_error(clean, e)),
            }
        }
        Err(io_error(clean, last))
    }

    /// Removes the directory `rel` if it is empty and was made at or after `born` (its birth
    /// time; where the file system keeps none, it stays), never following a link; whether it
    /// did. Anything else at `rel`, or nothing, is left as it is.
    pub fn remove_empty_dir(
        &self,
        rel: impl AsRef<[u8]>,
        born: std::time::SystemTime,
    ) -> Result<bool, ExecError> {
        let clean = lexical(rel.as_ref())?;
        let (parents, name) = split(&clean);
        let Some(dir) = self.walk(&clean, &parents, false)? else {
            return Ok(false);
        };
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let Ok(opened) = openat(&dir, name, flags, Mode::empty()) else {
            return Ok(false);
        };
        // Through the descriptor: statx, which knows the birth time.
        let made = File::from(opened).metadata().and_then(|m| m.created());
        if !made.is_ok_and(|made| made >= born) {
            return Ok(false);
        }
        match unlinkat(&dir, name, UnlinkatFlags::RemoveDir) {
            Ok(()) => sync_dir(&dir, &clean).map(|()| true),
            Err(Errno::ENOTEMPTY | Errno::EEXIST | Errno::ENOENT | Errno::ENOTDIR) => Ok(false),
            Err(e) => Err(io_error(&clean, e)),
        }
    }

    /// Opens the directory holding the final component, one real directory at a time.
    /// `None` when a parent is missing (or is a file) and `create` is false.
    fn walk(
        &self,
        clean: &[u8],
        parents: &[&[u8]],
        create: bool,
    ) -> Result<Option<OwnedFd>, ExecError> {
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let mut current = self.dir.try_clone().map_err(|source| ExecError::Io {
            path: shown(clean),
            source,
        })?;
        for (depth, component) in parents.iter().enumerate() {
            let prefix = parents[..=depth].join(&b'/');
            let mut opened = openat(&current, *component, flags, Mode::empty());
            if create && matches!(opened, Err(Errno::ENOENT)) {
                match mkdirat(&current, *component, Mode::from_bits_truncate(0o777)) {
                    Ok(()) | Err(Errno::EEXIST) => {}
                    Err(e) => return Err(io_error(&prefix, e)),
                }
                opened = openat(&current, *component, flags, Mode::empty());
            }
            current = match opened {
                Ok(fd) => fd,
                Err(Errno::ENOENT) if !create => return Ok(None),
                Err(Errno::ELOOP) => return Err(symlink_refusal(clean, &prefix)),
                // Linux reports a symlink opened with O_DIRECTORY as "not a directory", so
                // look at what is there, without following it.
                Err(Errno::ENOTDIR) => {
                    let kind = fstatat(&current, *component, AtFlags::AT_SYMLINK_NOFOLLOW)
                        .map(|stat| file_type(&stat));
                    return match kind {
                        Ok(kind) if kind == SFlag::S_IFLNK => Err(symlink_refusal(clean, &prefix)),
                        Ok(kind) if kind == SFlag::S_IFDIR => Err(ExecError::PathRefused {
                            path: shown(clean),
                            why: format!("`{}` changed while Rein was using it (swapped with a link?); retry once the tree is stable", shown(&prefix)),
                        }),
                        _ if !create => Ok(None),
                        _ => Err(io_error(&prefix, Errno::ENOTDIR)),
                    };
                }
                Err(e) => return Err(io_error(&prefix, e)),
            };
        }
        Ok(Some(current))
    }

    /// Inspects the final component without following it.
    fn entry(&self, dir: &OwnedFd, clean: &[u8], name: &[u8]) -> Result<Entry, ExecError> {
        match fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Err(Errno::ENOENT) => Ok(Entry::Missing),
            Err(e) => Err(io_error(clean, e)),
            Ok(stat) if file_type(&stat) == SFlag::S_IFLNK => Err(symlink_refusal(clean, clean)),
            Ok(stat) => match not_a_file(&stat) {
                Some(what) => Err(ExecError::NotAFile {
                    path: shown(clean),
                    what,
                }),
                None => Ok(Entry::File(Mode::from_bits_truncate(stat.st_mode & 0o777))),
            },
        }
    }
}

/// Lexically validates and normalizes a repo-relative path, explaining any refusal.
pub(crate) fn normalize(rel: &str) -> Result<String, String> {
    let clean = normalize_bytes(rel.as_bytes())?;
    // Splitting a str at '/' (one ASCII byte) and joining the pieces with '/' keeps it UTF-8.
    Ok(String::from_utf8(clean).expect("a normalized UTF-8 path stays UTF-8"))
}

/// `normalize` for a path whose bytes need not be UTF-8.
fn normalize_bytes(rel: &[u8]) -> Result<Vec<u8>, String> {
    if rel.is_empty() {
        return Err("the path is empty; name a file inside the working tree".into());
    }
    if rel.len() > MAX_PATH_BYTES {
        return Err(format!(
            "the path is {} bytes long, over the {MAX_PATH_BYTES}-byte limit",
            rel.len()
        ));
    }
    if rel.contains(&0) {
        return Err("the path contains a NUL byte".into());
    }
    if rel.contains(&b'\\') {
        return Err(
            "the path contains a backslash; use '/' to separate components (Windows paths are not accepted)"
                .into(),
        );
    }
    if rel.starts_with(b"/") {
        return Err("the path is absolute; give a path relative to the working tree root".into());
    }
    if has_drive_prefix(rel) {
        return Err(
            "the path starts with a Windows drive letter; give a path relative to the working tree root"
                .into(),
        );
    }
    // A shell would expand `~` to a home directory, so the agent most likely means a place
    // outside the tree; taking it literally would silently create a directory named `~`.
    if rel.starts_with(b"~") {
        return Err(
            "the path starts with `~`, which Rein does not expand; give a path relative to the working tree root"
                .into(),
        );
    }
    let mut parts = Vec::new();
    for component in rel.split(|b| *b == b'/') {
        match component {
            b"" | b"." => continue,
            b".." => {
                return Err(
                    "the path has a `..` component; give a path that stays inside the working tree"
                        .into(),
                )
            }
            _ => {}
        }
        if component.len() > MAX_COMPONENT_BYTES {
            return Err(format!(
                "a component is {} bytes long, over the {MAX_COMPONENT_BYTES}-byte limit",
                component.len()
            ));
        }
        if is_git_dir_name(component) {
            return Err(
                "the path goes through `.git`; the repository's own data is off limits".into(),
            );
        }
        parts.push(component);
    }
    if parts.is_empty() {
        return Err("the path names the working tree root itself; name a file inside it".into());
    }
    Ok(parts.join(&b'/'))
}

/// `normalize_bytes`, with refusals as `ExecError`.
fn lexical(rel: &[u8]) -> Result<Vec<u8>, ExecError> {
    normalize_bytes(rel).map_err(|why| ExecError::PathRefused {
        path: shown(rel),
        why,
    })
}

/// Splits a clean path into its parent components and final name.
fn split(clean: &[u8]) -> (Vec<&[u8]>, &[u8]) {
    let mut parents: Vec<&[u8]> = clean.split(|b| *b == b'/').collect();
    // `normalize` never returns an empty path, so there is always a last component.
    let name = parents.pop().unwrap_or_default();
    (parents, name)
}

/// Whether the first component looks like `C:` (a drive-relative or absolute Windows path).
fn has_drive_prefix(rel: &[u8]) -> bool {
    rel.len() >= 2 && rel[0].is_ascii_alphabetic() && rel[1] == b':'
}

/// Whether a component would name the git directory on some filesystem: any case (`.GIT`),
/// trailing dots or spaces (ignored by NTFS), the 8.3 short name `git~1`, and characters
/// HFS+ ignores (the same spellings git itself refuses).
fn is_git_dir_name(component: &[u8]) -> bool {
    // Every such spelling is UTF-8; a name that is not cannot be one.
    let Ok(component) = std::str::from_utf8(component) else {
        return false;
    };
    let visible: String = component
        .chars()
        .filter(|c| !is_hfs_ignorable(*c))
        .collect();
    let trimmed = visible.trim_end_matches(['.', ' ']);
    trimmed.eq_ignore_ascii_case(".git") || trimmed.eq_ignore_ascii_case("git~1")
}

/// Code points HFS+ drops when comparing names.
fn is_hfs_ignorable(c: char) -> bool {
    matches!(c, '\u{200c}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{206a}'..='\u{206f}' | '\u{feff}')
}

/// Shortens a path for an error message without splitting a character; bytes that are not
/// UTF-8 show as U+FFFD.
fn shown(rel: &[u8]) -> String {
    let rel = String::from_utf8_lossy(rel);
    if rel.len() <= SHOWN_PATH_BYTES {
        return rel.into_owned();
    }
    let mut end = SHOWN_PATH_BYTES;
    while !rel.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &rel[..end])
}

fn symlink_refusal(rel: &[u8], link: &[u8]) -> ExecError {
    ExecError::PathRefused {
        path: shown(rel),
        why: format!(
            "`{}` is a symbolic link; Rein only goes through real files and directories, so use the path the link points to",
            shown(link)
        ),
    }
}

fn io_error(path: &[u8], errno: Errno) -> ExecError {
    ExecError::Io {
        path: shown(path),
        source: errno.into(),
    }
}

fn file_type(stat: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(stat.st_mode & SFlag::S_IFMT.bits())
}

/// Describes a non-regular file, or `None` for a regular one.
fn not_a_file(stat: &FileStat) -> Option<&'static str> {
    let kind = file_type(stat);
    let names = [
        (SFlag::S_IFREG, None),
        (SFlag::S_IFDIR, Some("a directory")),
        (SFlag::S_IFLNK, Some("a symbolic link")),
        (SFlag::S_IFIFO, Some("a named pipe")),
        (SFlag::S_IFSOCK, Some("a socket")),
        (SFlag::S_IFCHR, Some("a device")),
        (SFlag::S_IFBLK, Some("a device")),
    ];
    names
        .into_iter()
        .find(|(flag, _)| *flag == kind)
        .map_or(Some("an unknown kind of file"), |(_, name)| name)
}

fn is_dir(dir: &OwnedFd, name: &[u8]) -> bool {
    fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW)
        .is_ok_and(|stat| file_type(&stat) == SFlag::S_IFDIR)
}

/// Creates an unused temporary file in `dir`. A new file gets the umask's default mode; a
/// replacement starts private and receives the old file's mode before it is renamed in.
fn create_temp(dir: &OwnedFd, new_file: bool) -> Result<(String, OwnedFd), Errno> {
    let mode = Mode::from_bits_truncate(if new_file { 0o666 } else { 0o600 });
    let flags =
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let mut last = Errno::EEXIST;
    for _ in 0..TEMP_ATTEMPTS {
        let name = format!(
            "{TEMP_PREFIX}{}-{}",
            std::process::id(),
            TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        match openat(dir, name.as_str(), flags, mode) {
            Ok(fd) => return Ok((name, fd)),
            // A stale temp file from a crashed run with the same pid: try the next name.
            Err(Errno::EEXIST) => last = Errno::EEXIST,
            Err(e) => return Err(e),
        }
    }
    Err(last)
}

/// Makes a rename or unlink in `dir` durable.
fn sync_dir(dir: &OwnedFd, clean: &[u8]) -> Result<(), ExecError> {
    match fsync(dir) {
        // Some filesystems cannot fsync a directory; the data itself is already synced.
        Ok(()) | Err(Errno::EINVAL) => Ok(()),
        Err(e) => Err(io_error(clean, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::fs;
    use std::os::unix::fs::{symlink, PermissionsExt};
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    /// A working tree at `base/root` with a sentinel directory `base/outside` beside it.
    struct Fixture {
        _base: tempfile::TempDir,
        root: PathBuf,
        outside: PathBuf,
        sandbox: Sandbox,
    }

    fn fixture() -> Fixture {
        let base = tempfile::tempdir().expect("temp dir");
        let root = base.path().join("root");
        let outside = base.path().join("outside");
        fs::create_dir_all(root.join("sub")).expect("mkdir sub");
        fs::create_dir_all(root.join(".git")).expect("mkdir .git");
        fs::write(root.join(".git/config"), "[core]\n").expect("write config");
        fs::create_dir_all(root.join("vendor/.git")).expect("mkdir nested .git");
        fs::write(root.join("sub/file.txt"), "inside\n").expect("write file");
        fs::create_dir_all(&outside).expect("mkdir outside");
        fs::write(outside.join("secret"), "secret\n").expect("write secret");
        symlink(&outside, root.join("out")).expect("dir symlink");
        symlink(outside.join("secret"), root.join("secret_link")).expect("file symlink");
        symlink("sub", root.join("inlink")).expect("in-tree symlink");
        symlink("../outside", root.join("relout")).expect("relative symlink");
        let sandbox = Sandbox::new(&root).expect("sandbox");
        Fixture {
            _base: base,
            root,
            outside,
            sandbox,
        }
    }

    /// Every file and directory under `dir` with its content, to prove nothing changed.
    fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Option<Vec<u8>>> {
        let mut out = BTreeMap::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for entry in fs::read_dir(&d).expect("read_dir") {
                let path = entry.expect("entry").path();
                let meta = fs::symlink_metadata(&path).expect("metadata");
                if meta.is_symlink() {
                    let target = fs::read_link(&path).expect("read_link");
                    out.insert(path, Some(target.into_os_string().into_encoded_bytes()));
                } else if meta.is_dir() {
                    stack.push(path.clone());
                    out.insert(path, None);
                } else {
                    out.insert(path.clone(), Some(fs::read(&path).expect("read")));
                }
            }
        }
        out
    }

    fn refused(result: Result<impl std::fmt::Debug, ExecError>) -> bool {
        matches!(result, Err(ExecError::PathRefused { .. }))
    }

    #[test]
    fn hostile_paths_are_refused_and_touch_nothing() {
        let f = fixture();
        let long_component = "a".repeat(MAX_COMPONENT_BYTES + 1);
        let long_path = "a/".repeat(MAX_PATH_BYTES / 2 + 1);
        let hostile: Vec<&str> = vec![
            "",
            ".",
            "./",
            "/etc/passwd",
            "/",
            "..",
            "../outside/secret",
            "sub/../../outside/secret",
            "sub/..",
            "a\0b",
            ".git/config",
            ".GIT/config",
            ".Git",
            "sub/.git/x",
            "vendor/.git/HEAD",
            ".git./config",
            ".git /config",
            "git~1/config",
            ".g\u{200c}it/config",
            "out/secret",
            "out/new_file",
            "out/deeper/new_file",
            "relout/secret",
            "secret_link",
            "inlink/file.txt",
            "~/x",
            "~",
            "C:\\Windows\\x",
            "c:/x",
            "\\\\server\\share\\x",
            "..\\outside\\secret",
            "sub\\file.txt",
            &long_component,
            &long_path,
        ];
        assert!(hostile.len() >= 20);
        let before_outside = snapshot(&f.outside);
        let before_root = snapshot(&f.root);
        for path in &hostile {
            assert!(refused(f.sandbox.check(path)), "check accepted {path:?}");
            assert!(refused(f.sandbox.read(path)), "read accepted {path:?}");
            assert!(
                refused(f.sandbox.write(path, b"pwned")),
                "write accepted {path:?}"
            );
        }
        // Removing a final symlink is allowed (it removes only the link), so it is left out here.
        for path in hostile.iter().filter(|p| **p != "secret_link") {
            assert!(refused(f.sandbox.remove(path)), "remove accepted {path:?}");
        }
        assert_eq!(snapshot(&f.outside), before_outside);
        assert_eq!(snapshot(&f.root), before_root);
    }

    #[test]
    fn refusals_explain_themselves() {
        let f = fixture();
        let err = f.sandbox.write("out/x", b"").expect_err("symlink refused");
        let message = err.to_string();
        assert!(message.contains("`out` is a symbolic link"), "{message}");
        let err = f.sandbox.check("../x").expect_err("dotdot refused");
        assert!(err.to_string().contains("`..`"), "{err}");
    }

    #[test]
    fn check_normalizes() {
        let f = fixture();
        let cases = [
            ("./a//b", "a/b"),
            ("a/./b/", "a/b"),
            ("sub/file.txt", "sub/file.txt"),
            ("new/dir/file", "new/dir/file"),
            ("a~b", "a~b"),
            ("dir/~x", "dir/~x"),
            (".gitignore", ".gitignore"),
            ("sub/.github/x", "sub/.github/x"),
            ("ab:c", "ab:c"),
            ("ünïcode/файл", "ünïcode/файл"),
        ];
        for (input, want) in cases {
            assert_eq!(f.sandbox.check(input).expect(input), want, "{input:?}");
        }
    }

    #[test]
    fn read_write_remove_round_trip() {
        let f = fixture();
        assert_eq!(f.sandbox.read("missing.txt").expect("read"), None);
        assert_eq!(f.sandbox.read("no/such/dir/file").expect("read"), None);
        assert_eq!(f.sandbox.read("sub/file.txt/x").expect("read"), None);
        f.sandbox
            .write("new/deep/file.txt", b"hello")
            .expect("write");
        assert_eq!(
            fs::read(f.root.join("new/deep/file.txt")).expect("read back"),
            b"hello"
        );
        assert_eq!(
            f.sandbox.read("./new//deep/file.txt").expect("read"),
            Some(b"hello".to_vec())
        );
        f.sandbox
            .write("new/deep/file.txt", b"bye")
            .expect("overwrite");
        assert_eq!(
            f.sandbox.read("new/deep/file.txt").expect("read"),
            Some(b"bye".to_vec())
        );
        f.sandbox.remove("new/deep/file.txt").expect("remove");
        assert_eq!(f.sandbox.read("new/deep/file.txt").expect("read"), None);
        f.sandbox.remove("new/deep/file.txt").expect("remove again");
        f.sandbox.remove("absent/dir/file").expect("remove absent");
        let leftovers: Vec<_> = fs::read_dir(f.root.join("new/deep"))
            .expect("read_dir")
            .collect();
        assert!(leftovers.is_empty(), "temp files left: {leftovers:?}");
    }

    #[test]
    fn names_that_are_not_utf8_are_read_written_and_removed_as_they_are() {
        use std::os::unix::ffi::OsStrExt;
        let f = fixture();
        let name: &[u8] = b"sub/caf\xe9.txt";
        let on_disk = f.root.join(std::ffi::OsStr::from_bytes(name));
        f.sandbox.write(name, b"agent").expect("write");
        assert_eq!(fs::read(&on_disk).expect("read back"), b"agent");
        assert_eq!(f.sandbox.read(name).expect("read"), Some(b"agent".to_vec()));
        // The lossy spelling names another file, which must not be taken for this one.
        assert_eq!(f.sandbox.read("sub/caf\u{fffd}.txt").expect("read"), None);
        f.sandbox.remove(name).expect("remove");
        assert!(!on_disk.exists());
        let before = snapshot(&f.outside);
        for hostile in [
            &b"\xff/../../outside/secret"[..],
            b"out/\xff",
            b".git/\xff",
            b"/\xff",
            b"\xff\\x",
        ] {
            assert!(refused(f.sandbox.write(hostile, b"pwned")), "{hostile:?}");
            assert!(refused(f.sandbox.read(hostile)), "{hostile:?}");
        }
        assert_eq!(snapshot(&f.outside), before);
    }

    #[test]
    fn write_keeps_permission_bits() {
        let f = fixture();
        let path = f.root.join("script.sh");
        fs::write(&path, "#!/bin/sh\n").expect("write");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o751)).expect("chmod");
        f.sandbox
            .write("script.sh", b"#!/bin/sh\necho hi\n")
            .expect("write");
        let mode = fs::metadata(&path).expect("metadata").permissions().mode();
        assert_eq!(mode & 0o777, 0o751);
        assert_eq!(fs::read(&path).expect("read"), b"#!/bin/sh\necho hi\n");
    }

    #[test]
    fn directories_and_fifos_are_not_files() {
        let f = fixture();
        assert!(matches!(
            f.sandbox.read("sub"),
            Err(ExecError::NotAFile { .. })
        ));
        assert!(matches!(
            f.sandbox.write("sub", b"x"),
            Err(ExecError::NotAFile { .. })
        ));
        assert!(matches!(
            f.sandbox.remove("sub"),
            Err(ExecError::NotAFile { .. })
        ));
        nix::unistd::mkfifo(&f.root.join("pipe"), Mode::from_bits_truncate(0o644)).expect("mkfifo");
        assert!(matches!(
            f.sandbox.read("pipe"),
            Err(ExecError::NotAFile { .. })
        ));
        assert!(matches!(
            f.sandbox.write("sub/file.txt/x", b"x"),
            Err(ExecError::Io { .. })
        ));
    }

    #[test]
    fn remove_takes_away_a_symlink_not_its_target() {
        let f = fixture();
        f.sandbox.remove("secret_link").expect("remove link");
        assert!(fs::symlink_metadata(f.root.join("secret_link")).is_err());
        assert_eq!(
            fs::read(f.outside.join("secret")).expect("secret"),
            b"secret\n"
        );
    }

    #[test]
    fn sandbox_keeps_its_tree_when_the_root_path_is_moved() {
        let f = fixture();
        let moved = f.root.with_file_name("moved");
        fs::rename(&f.root, &moved).expect("rename root");
        f.sandbox.write("after-move.txt", b"x").expect("write");
        assert!(moved.join("after-move.txt").exists());
    }

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn swapping_a_directory_for_a_symlink_never_escapes() {
        let f = fixture();
        symlink(&f.outside, f.root.join("swap_link")).expect("symlink");
        let stop = Arc::new(AtomicBool::new(false));
        let swapper = {
            let stop = Arc::clone(&stop);
            let root = f.root.clone();
            std::thread::spawn(move || {
                let mut swaps = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    // RENAME_EXCHANGE keeps `sub` always present: either the real directory
                    // or the symlink to the outside.
                    nix::fcntl::renameat2(
                        nix::fcntl::AT_FDCWD,
                        &root.join("sub"),
                        nix::fcntl::AT_FDCWD,
                        &root.join("swap_link"),
                        nix::fcntl::RenameFlags::RENAME_EXCHANGE,
                    )
                    .expect("exchange");
                    swaps += 1;
                }
                swaps
            })
        };
        let (mut written, mut refused_count) = (0u32, 0u32);
        for i in 0..2000 {
            match f.sandbox.write(format!("sub/race-{i}.txt"), b"race") {
                Ok(()) => written += 1,
                Err(ExecError::PathRefused { .. }) => refused_count += 1,
                Err(other) => panic!("unexpected error: {other}"),
            }
            // Reads race the same swaps: they may be refused but never see the outside file.
            match f.sandbox.read("sub/secret") {
                Ok(None) | Err(ExecError::PathRefused { .. }) => {}
                other => panic!("read escaped the tree: {other:?}"),
            }
        }
        stop.store(true, Ordering::Relaxed);
        let swaps = swapper.join().expect("swapper thread");
        assert!(swaps > 0);
        let outside: Vec<_> = fs::read_dir(&f.outside)
            .expect("read_dir")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(outside, vec![std::ffi::OsString::from("secret")]);
        assert_eq!(written + refused_count, 2000);
    }
}
