//! Where a working tree's engine lives and how it is known to be alive: an exclusive
//! `flock` on `<git dir>/rein/engine.lock` (the kernel drops it when the process dies, so
//! liveness is never guessed from files or timestamps) and a Unix socket beside it, owner-only,
//! whose peers must be this user (`SO_PEERCRED`). A linked worktree has its own git dir, so
//! its own engine.

use std::fs::{File, OpenOptions};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};

use super::EngineError;
use crate::checkpoint;

/// `sockaddr_un.sun_path` holds 108 bytes on Linux, the terminating NUL included.
const SUN_PATH_MAX: usize = 107;

/// The files of one working tree's engine.
#[derive(Debug, Clone)]
pub struct Place {
    /// The working tree's root.
    pub root: PathBuf,
    /// Its git dir (`.git`, or `.git/worktrees/<name>` for a linked worktree).
    pub git_dir: PathBuf,
    /// The file the engine holds its lock on.
    pub lock: PathBuf,
    /// The socket clients join on.
    pub socket: PathBuf,
    /// Where a spawned engine's standard error goes.
    pub log: PathBuf,
    /// For a git dir that does not live in its work tree (`GIT_DIR`, `core.worktree`): the
    /// file naming the work tree its tasks belong to. Such a git dir may be given any work
    /// tree, and Rein keeps one task state per git dir.
    pub claim: Option<PathBuf>,
}

impl Place {
    /// The engine's place for the working tree containing `workdir`.
    pub fn of(workdir: &Path) -> Result<Place, EngineError> {
        // The real git dir and work tree, by git's rules (`GIT_DIR`, `core.worktree`): a
        // client of a tree whose git dir is elsewhere finds the same engine as one inside it.
        let checkpoint::layout::Layout {
            work_tree: root,
            git_dir,
            separate,
        } = checkpoint::layout::locate(workdir)?;
        let dir = git_dir.join("rein");
        // `locate` refused a work tree other than the one this names.
        let claim = separate.then(|| checkpoint::layout::claim_file(&git_dir));
        let socket = dir.join("engine.sock");
        let socket = if socket.as_os_str().len() <= SUN_PATH_MAX {
            socket
        } else {
            short_socket(&git_dir)?
        };
        Ok(Place {
            lock: dir.join("engine.lock"),
            log: dir.join("engine.log"),
            socket,
            git_dir,
            root,
            claim,
        })
    }

    /// Records that this git dir's tasks belong to this work tree (the engine does, once it
    /// holds the lock), so a client given another work tree is refused rather than served
    /// this one's task.
    pub fn claim(&self) -> Result<(), EngineError> {
        let Some(claim) = &self.claim else {
            return Ok(());
        };
        std::fs::write(claim, self.root.as_os_str().as_bytes()).map_err(|e| EngineError::Io {
            what: format!("cannot write {}", claim.display()),
            source: e,
        })
    }

    /// Makes `<git dir>/rein`, where the lock and (usually) the socket live.
    pub fn make_dir(&self) -> Result<(), EngineError> {
        std::fs::create_dir_all(self.git_dir.join("rein")).map_err(|e| EngineError::Io {
            what: format!("cannot create {}", self.git_dir.join("rein").display()),
            source: e,
        })
    }
}

/// A socket path that fits `sun_path` when the git dir's does not: a file named by a hash of
/// the git dir in a directory only this user can enter (`$XDG_RUNTIME_DIR/rein`, else
/// `/tmp/rein-<uid>`).
fn short_socket(git_dir: &Path) -> Result<PathBuf, EngineError> {
    let uid = nix::unistd::getuid().as_raw();
    let dir = match std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from) {
        Some(d) if d.is_absolute() && d.is_dir() => d.join("rein"),
        _ => PathBuf::from(format!("/tmp/rein-{uid}")),
    };
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => {
            return Err(EngineError::Io {
                what: format!("cannot create {}", dir.display()),
                source: e,
            })
        }
    }
    // Someone else's directory, or one others can write, could hold a socket that is not ours.
    let meta = std::fs::symlink_metadata(&dir).map_err(|e| EngineError::Io {
        what: format!("cannot read {}", dir.display()),
        source: e,
    })?;
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o077 != 0 {
        return Err(EngineError::Unsafe(format!(
            "{} is not a private directory of yours (owner only, mode 700): remove it, or set XDG_RUNTIME_DIR",
            dir.display()
        )));
    }
    let digest = ring::digest::digest(
        &ring::digest::SHA256,
        git_dir.as_os_str().as_encoded_bytes(),
    );
    let name: String = digest.as_ref()[..12]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    Ok(dir.join(format!("{name}.sock")))
}

/// The engine's lock, held while this value lives.
#[derive(Debug)]
pub struct Lock {
    _held: Flock<File>,
}

impl Lock {
    /// Takes the lock without waiting; None when another process holds it. The file is
    /// opened close-on-exec (Rust's default), so no command or agent the engine starts
    /// inherits it: the lock dies with the engine, never outlives it in a child.
    pub fn try_take(place: &Place) -> Result<Option<Lock>, EngineError> {
        place.make_dir()?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&place.lock)
            .map_err(|e| EngineError::Io {
                what: format!("cannot open {}", place.lock.display()),
                source: e,
            })?;
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(mut held) => {
                // For people and tests (`kill -9 $(cat …/engine.lock)`); the lock, not this
                // number, says whether the engine lives.
                use std::io::Write;
                let _ = held.set_len(0);
                let _ = write!(held, "{}", std::process::id());
                Ok(Some(Lock { _held: held }))
            }
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => Ok(None),
            Err((_, e)) => Err(EngineError::Io {
                what: format!("cannot lock {}", place.lock.display()),
                source: e.into(),
            }),
        }
    }
}

/// Binds the socket, owner-only from its first moment (the umask is narrowed around the
/// bind, before any other thread exists to create files meanwhile). A socket file left by a
/// dead engine is removed first: only the lock's holder binds, so it cannot be a live one's.
pub fn bind(place: &Place) -> Result<std::os::unix::net::UnixListener, EngineError> {
    let io = |what: String| move |source| EngineError::Io { what, source };
    match std::fs::remove_file(&place.socket) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(format!("cannot remove {}", place.socket.display()))(e)),
    }
    let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o177));
    let bound = std::os::unix::net::UnixListener::bind(&place.socket);
    nix::sys::stat::umask(old);
    let listener = bound.map_err(io(format!("cannot listen on {}", place.socket.display())))?;
    std::fs::set_permissions(&place.socket, std::fs::Permissions::from_mode(0o600))
        .map_err(io(format!("cannot restrict {}", place.socket.display())))?;
    Ok(listener)
}

/// Whether a peer of this uid may use the engine of a process running as `ours`: only the
/// same user (root included: root is not let into another user's engine either).
pub fn peer_allowed(peer: u32, ours: u32) -> Result<(), String> {
    if peer == ours {
        Ok(())
    } else {
        Err(format!(
            "refused: this Rein engine belongs to user {ours} and the connection came from user {peer}; each user runs their own Rein on a working tree"
        ))
    }
}

/// The uid of the process at the other end of `stream` (`SO_PEERCRED`).
pub fn peer_uid(stream: &impl std::os::fd::AsFd) -> Result<u32, EngineError> {
    nix::sys::socket::getsockopt(stream, nix::sys::socket::sockopt::PeerCredentials)
        .map(|c| c.uid())
        .map_err(|e| EngineError::Io {
            what: "cannot read the connecting process's credentials".into(),
            source: e.into(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_same_user_is_let_in() {
        assert!(peer_allowed(1000, 1000).is_ok());
        let err = peer_allowed(1001, 1000).unwrap_err();
        assert!(
            err.contains("user 1000") && err.contains("user 1001"),
            "{err}"
        );
        assert!(peer_allowed(0, 1000).is_err(), "root is another user too");
    }

    #[test]
    fn a_long_git_dir_gets_a_short_private_socket_named_by_its_hash() {
        let long = PathBuf::from(format!("/x/{}/.git", "d".repeat(200)));
        let a = short_socket(&long).unwrap();
        assert!(a.as_os_str().len() <= SUN_PATH_MAX, "{}", a.display());
        assert_eq!(
            a,
            short_socket(&long).unwrap(),
            "the same git dir, the same socket"
        );
        let other = short_socket(&PathBuf::from(format!("{}x", long.display()))).unwrap();
        assert_ne!(a, other);
        let mode = std::fs::metadata(a.parent().unwrap()).unwrap().mode();
        assert_eq!(mode & 0o777, 0o700);
    }

    #[test]
    fn the_lock_is_held_once() {
        let dir = tempfile::tempdir().unwrap();
        let place = Place {
            root: dir.path().into(),
            git_dir: dir.path().into(),
            lock: dir.path().join("rein/engine.lock"),
            socket: dir.path().join("rein/engine.sock"),
            log: dir.path().join("rein/engine.log"),
            claim: None,
        };
        let first = Lock::try_take(&place).unwrap();
        assert!(first.is_some());
        assert!(Lock::try_take(&place).unwrap().is_none(), "held");
        drop(first);
        assert!(
            Lock::try_take(&place).unwrap().is_some(),
            "free once dropped"
        );
    }
}
