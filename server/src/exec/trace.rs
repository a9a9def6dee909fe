//! What the agent's processes change in the tree, seen as they ask for it: every process Rein
//! starts for an agent (its commands, its terminals, an ACP harness and everything those
//! start, daemons that `setsid` or double-fork away included) runs under a seccomp filter
//! whose notifications Rein answers, so each call that can change a file is recorded
//! *before* the kernel carries it out.
//!
//! The filter notifies only the calls that change the tree: `open`/`openat`/`creat` with a
//! write, create or truncate flag, `openat2`, the `rename`, `unlink`, `mkdir`, `rmdir`,
//! `symlink`, `link` and `mknod` families, `truncate`, `chmod`/`fchmodat`/`fchmod`, and
//! `utimensat`; everything else runs at full speed. `io_uring_setup` fails with `ENOSYS`
//! (its opens would not pass the filter; programs fall back to plain calls). A listener
//! thread per started process reads each call's path from the caller's memory, resolves it
//! against the caller's cwd or directory descriptor (`/proc/<pid>`), records it, and only
//! then lets the call go on (`SECCOMP_USER_NOTIF_FLAG_CONTINUE`). So a scan that sees a
//! change the agent made always finds its record already there.
//!
//! This is authorship evidence, not a security boundary (the kernel's own warning about
//! `CONTINUE`: a multi-threaded caller could change the path after it was read). Where it
//! cannot hold, it says so (`Traced::gaps`): a kernel or container without seccomp
//! notifications, a process that already has a listener above it, a call from another
//! architecture's ABI, a path that could not be read while its caller still lived. A window
//! with a gap is judged by the older rules.
//!
//! Must never: refuse or change a call the filter lets through (only `io_uring_setup` is
//! refused), or record a path outside the roots it was given.

use std::collections::{HashMap, HashSet};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

use nix::libc;

/// Open flags that make an `open` a change: write, read-write, create, truncate.
const WRITE_FLAGS: u32 = (libc::O_WRONLY | libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC) as u32;

#[cfg(target_arch = "x86_64")]
const NATIVE_ARCH: u32 = 0xC000_003E; // AUDIT_ARCH_X86_64
#[cfg(target_arch = "aarch64")]
const NATIVE_ARCH: u32 = 0xC000_00B7; // AUDIT_ARCH_AARCH64

/// The x32 ABI's calls carry this bit in their number (x86_64 only).
#[cfg(target_arch = "x86_64")]
const X32_BIT: u32 = 0x4000_0000;

/// `SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP` (Linux 6.6): wake the caller on the listener's CPU.
const SYNC_WAKE_UP: u64 = 1;

/// How a notified call names what it changes.
#[derive(Debug, Clone, Copy)]
enum Shape {
    /// An open whose flags are argument `flags`; the path is argument `path`, taken from the
    /// directory descriptor in argument `dir` when there is one.
    Open {
        dir: Option<usize>,
        path: usize,
        flags: usize,
    },
    /// `openat2(dirfd, path, how, size)`: the flags are the first field of `how`.
    Openat2,
    /// One or two paths, each (directory argument, path argument); `follow` when the call
    /// acts on a symbolic link's target.
    Paths {
        at: [Option<(Option<usize>, usize)>; 2],
        follow: bool,
    },
    /// `utimensat(dirfd, path, times, flags)`: a null path acts on the descriptor.
    Utimensat,
    /// A call on a descriptor (`fchmod`).
    Fd(usize),
}

/// (call number, shape) for every call the filter notifies.
fn calls() -> &'static [(i64, Shape)] {
    use libc as c;
    const fn one(dir: Option<usize>, path: usize, follow: bool) -> Shape {
        Shape::Paths {
            at: [Some((dir, path)), None],
            follow,
        }
    }
    const fn two(a: (Option<usize>, usize), b: (Option<usize>, usize)) -> Shape {
        Shape::Paths {
            at: [Some(a), Some(b)],
            follow: false,
        }
    }
    static CALLS: OnceLock<Vec<(i64, Shape)>> = OnceLock::new();
    CALLS.get_or_init(|| {
        let mut v = vec![
            (
                c::SYS_openat,
                Shape::Open {
                    dir: Some(0),
                    path: 1,
                    flags: 2,
                },
            ),
            (c::SYS_openat2, Shape::Openat2),
            (c::SYS_renameat, two((Some(0), 1), (Some(2), 3))),
            (c::SYS_renameat2, two((Some(0), 1), (Some(2), 3))),
            (c::SYS_unlinkat, one(Some(0), 1, false)),
            (c::SYS_mkdirat, one(Some(0), 1, false)),
            (c::SYS_symlinkat, one(Some(1), 2, false)),
            (c::SYS_linkat, one(Some(2), 3, false)),
            (c::SYS_mknodat, one(Some(0), 1, false)),
            (c::SYS_truncate, one(None, 0, true)),
            (c::SYS_fchmodat, one(Some(0), 1, true)),
            (c::SYS_fchmod, Shape::Fd(0)),
            (c::SYS_utimensat, Shape::Utimensat),
        ];
        #[cfg(target_arch = "x86_64")]
        v.extend([
            (
                c::SYS_open,
                Shape::Open {
                    dir: None,
                    path: 0,
                    flags: 1,
                },
            ),
            (c::SYS_creat, one(None, 0, true)),
            (c::SYS_rename, two((None, 0), (None, 1))),
            (c::SYS_unlink, one(None, 0, false)),
            (c::SYS_mkdir, one(None, 0, false)),
            (c::SYS_rmdir, one(None, 0, false)),
            (c::SYS_symlink, one(None, 1, false)),
            (c::SYS_link, one(None, 1, false)),
            (c::SYS_mknod, one(None, 0, false)),
            (c::SYS_chmod, one(None, 0, true)),
            (c::SYS_fchmodat2, one(Some(0), 1, true)),
        ]);
        v
    })
}

/// The filter: notify the calls above (an open only with a write flag), refuse
/// `io_uring_setup`, notify every call of another ABI (the listener records the gap), let
/// everything else through.
fn program() -> Vec<libc::sock_filter> {
    let stmt = |code: u32, k: u32| libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    };
    let jump = |code: u32, k: u32, jt: u8, jf: u8| libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    };
    const NR: u32 = 0;
    const ARCH: u32 = 4;
    const ARGS: u32 = 16;
    let ld = libc::BPF_LD | libc::BPF_W | libc::BPF_ABS;
    let jeq = libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K;
    let ret = libc::BPF_RET | libc::BPF_K;
    let notify = stmt(ret, libc::SECCOMP_RET_USER_NOTIF);
    let mut p = vec![
        stmt(ld, ARCH),
        jump(jeq, NATIVE_ARCH, 1, 0),
        notify,
        stmt(ld, NR),
    ];
    #[cfg(target_arch = "x86_64")]
    p.extend([
        jump(libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K, X32_BIT, 0, 1),
        notify,
    ]);
    p.extend([
        jump(jeq, libc::SYS_io_uring_setup as u32, 0, 1),
        stmt(ret, libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32),
    ]);
    for (nr, shape) in calls() {
        match shape {
            Shape::Open { flags, .. } => p.extend([
                // Not this call: skip its four instructions, the number still loaded.
                jump(jeq, *nr as u32, 0, 4),
                // The low word of the flags argument (little-endian).
                stmt(ld, ARGS + 8 * *flags as u32),
                jump(
                    libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K,
                    WRITE_FLAGS,
                    0,
                    1,
                ),
                notify,
                stmt(ret, libc::SECCOMP_RET_ALLOW),
            ]),
            _ => p.extend([jump(jeq, *nr as u32, 0, 1), notify]),
        }
    }
    p.push(stmt(ret, libc::SECCOMP_RET_ALLOW));
    p
}

/// Why tracing is not to be had here.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TraceError {
    /// The kernel or the container forbids seccomp notifications, or a listener above Rein.
    #[error("seccomp notifications are not available here ({0}): who changed a file is judged by what a command line or tool call names")]
    Unavailable(String),
}

/// What the agent's processes touched since the last `take`.
#[derive(Debug, Default, Clone)]
pub struct Traced {
    /// Absolute paths (lexically normal, inside the roots) a traced call changed or was
    /// about to change; a directory stands for everything beneath it.
    pub paths: Vec<PathBuf>,
    /// Why a change may have gone unrecorded meanwhile; empty when the record is whole.
    pub gaps: Vec<String>,
    /// Directories a `mkdir` made (absent when it was asked for); a checkpoint holds none.
    pub made_dirs: Vec<PathBuf>,
    /// Directories an `rmdir` removed (there when it was asked for).
    pub removed_dirs: Vec<PathBuf>,
}

/// What a call does to a directory, looked at before it runs.
enum DirChange {
    Made(PathBuf),
    Removed(PathBuf),
}

#[derive(Debug, Default)]
struct Record {
    paths: HashSet<PathBuf>,
    made: HashSet<PathBuf>,
    removed: HashSet<PathBuf>,
    /// The processes (threads) whose calls were recorded: they may hold what they opened.
    pids: HashSet<u32>,
    gaps: Vec<String>,
    /// Started processes whose listener has not arrived (or failed to) yet.
    pending: usize,
}

#[derive(Debug)]
struct Inner {
    /// The tree's root as opened and as the kernel names it: only paths beneath are kept.
    roots: Vec<PathBuf>,
    record: Mutex<Record>,
    arrived: Condvar,
}

/// The trace of one task's agent: cheap to clone, shared by every process started for it.
#[derive(Debug, Clone)]
pub struct Trace {
    inner: Arc<Inner>,
}

impl Trace {
    /// A trace keeping the paths beneath `root`.
    pub fn new(root: &Path) -> Trace {
        let mut roots = vec![lexical(root)];
        if let Ok(c) = root.canonicalize() {
            if !roots.contains(&c) {
                roots.push(c);
            }
        }
        Trace {
            inner: Arc::new(Inner {
                roots,
                record: Mutex::new(Record::default()),
                arrived: Condvar::new(),
            }),
        }
    }

    /// Whether this kernel lets an unprivileged process be traced (asked once, by a
    /// throwaway child that installs the filter and hands its listener over).
    pub fn available() -> Result<(), TraceError> {
        if super::confine::trace_forced_off() {
            return Err(TraceError::Unavailable(format!(
                "{}=no-trace",
                super::confine::FORCE_VAR
            )));
        }
        static HERE: OnceLock<Result<(), TraceError>> = OnceLock::new();
        HERE.get_or_init(probe).clone()
    }

    /// Everything recorded since the last call, and the gaps. Waits (at most a second) for
    /// the listeners of processes started before the call, so a process that could not be
    /// traced is a gap here rather than a silent absence.
    pub fn take(&self) -> Traced {
        let mut r = lock(&self.inner.record);
        if r.pending > 0 {
            let (guard, _) = self
                .inner
                .arrived
                .wait_timeout_while(r, Duration::from_secs(1), |r| r.pending > 0)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            r = guard;
            if r.pending > 0 {
                r.gaps.push(
                    "a started process's trace did not arrive within a second; its writes may be missing"
                        .into(),
                );
            }
        }
        Traced {
            paths: r.paths.drain().collect(),
            made_dirs: r.made.drain().collect(),
            removed_dirs: r.removed.drain().collect(),
            gaps: std::mem::take(&mut r.gaps),
        }
    }

    /// The paths beneath the roots that a process whose calls were recorded holds open now:
    /// it may write them again without a call the filter sees.
    pub fn open_now(&self) -> HashSet<PathBuf> {
        let pids: Vec<u32> = lock(&self.inner.record).pids.iter().copied().collect();
        let mut gone = Vec::new();
        let mut open = HashSet::new();
        for pid in pids {
            let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
                gone.push(pid);
                continue;
            };
            for fd in fds.flatten() {
                if let Ok(p) = std::fs::read_link(fd.path()) {
                    if self.inner.roots.iter().any(|r| p.starts_with(r)) {
                        open.insert(p);
                    }
                }
            }
        }
        let mut r = lock(&self.inner.record);
        for pid in gone {
            r.pids.remove(&pid);
        }
        open
    }

    /// Drops what was recorded and not yet taken (control left the agent: its processes are
    /// stopped and what they did is settled).
    pub fn forget(&self) {
        let mut r = lock(&self.inner.record);
        r.paths.clear();
        r.made.clear();
        r.removed.clear();
        r.gaps.clear();
    }

    /// Prepares one process's tracing: the filter, built here, and the socket its child
    /// hands the listener over; a thread takes the listener and serves it.
    pub(super) fn arm(&self) -> io::Result<Armed> {
        let (ours, theirs) = nix::sys::socket::socketpair(
            nix::sys::socket::AddressFamily::Unix,
            nix::sys::socket::SockType::SeqPacket,
            None,
            nix::sys::socket::SockFlag::SOCK_CLOEXEC,
        )
        .map_err(io::Error::from)?;
        lock(&self.inner.record).pending += 1;
        let inner = Arc::downgrade(&self.inner);
        let spawned = std::thread::Builder::new()
            .name("rein-trace".into())
            .spawn(move || serve(ours, inner));
        if let Err(e) = spawned {
            self.arrived(Some(format!("cannot start a trace listener: {e}")));
            return Err(e);
        }
        Ok(Armed {
            program: program(),
            sock: theirs,
        })
    }

    fn arrived(&self, gap: Option<String>) {
        Inner::arrived(&self.inner, gap);
    }
}

impl Inner {
    fn arrived(this: &Inner, gap: Option<String>) {
        let mut r = lock(&this.record);
        r.pending = r.pending.saturating_sub(1);
        r.gaps.extend(gap);
        this.arrived.notify_all();
    }

    fn keep(&self, pid: u32, paths: Vec<PathBuf>, dir: Option<DirChange>) {
        let mut r = lock(&self.record);
        for path in paths {
            if self.roots.iter().any(|root| path.starts_with(root)) {
                r.paths.insert(path);
                r.pids.insert(pid);
            }
        }
        // A directory made and removed again (or the other way round) in one window is
        // where it was.
        match dir {
            Some(DirChange::Made(p)) if !r.removed.remove(&p) => {
                r.made.insert(p);
            }
            Some(DirChange::Removed(p)) if !r.made.remove(&p) => {
                r.removed.insert(p);
            }
            _ => {}
        }
    }

    fn gap(&self, why: String) {
        let mut r = lock(&self.record);
        if !r.gaps.contains(&why) {
            r.gaps.push(why);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What a child does between fork and exec to be traced, built in the parent.
pub(super) struct Armed {
    program: Vec<libc::sock_filter>,
    sock: OwnedFd,
}

/// The one byte sent with the listener, or alone when the filter could not be installed.
const WITH_LISTENER: u8 = 1;
const WITHOUT: u8 = 0;

impl Armed {
    /// In the child, after Landlock set `no_new_privs`: installs the filter and hands its
    /// listener to the parent. System calls only. A filter the kernel refuses leaves the
    /// command untraced (the parent records the gap), never unstarted.
    pub(super) fn enter(&self) -> io::Result<()> {
        let prog = libc::sock_fprog {
            len: self.program.len() as u16,
            filter: self.program.as_ptr().cast_mut(),
        };
        // SAFETY: plain system calls on memory that outlives them; no allocation.
        unsafe {
            libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
            let fd = libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
                &prog as *const libc::sock_fprog,
            );
            let sock = self.sock.as_raw_fd();
            if fd < 0 {
                let errno = *libc::__errno_location();
                send(sock, WITHOUT, None, errno);
            } else {
                send(sock, WITH_LISTENER, Some(fd as RawFd), 0);
                libc::close(fd as RawFd);
            }
        }
        Ok(())
    }
}

/// Sends `tag` (and `errno`) with `fd` attached, if any: system calls only.
///
/// # Safety
/// Only async-signal-safe calls; `sock` is a connected socket.
unsafe fn send(sock: RawFd, tag: u8, fd: Option<RawFd>, errno: i32) {
    let mut body = [0u8; 5];
    body[0] = tag;
    body[1..].copy_from_slice(&errno.to_ne_bytes());
    let mut iov = libc::iovec {
        iov_base: body.as_mut_ptr().cast(),
        iov_len: body.len(),
    };
    #[repr(C, align(8))]
    struct Space([u8; 32]);
    let mut space = Space([0; 32]);
    let mut msg: libc::msghdr = std::mem::zeroed();
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if let Some(fd) = fd {
        let len = libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) as usize;
        msg.msg_control = space.0.as_mut_ptr().cast();
        msg.msg_controllen = len;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as usize;
        std::ptr::copy_nonoverlapping(
            (&fd as *const RawFd).cast::<u8>(),
            libc::CMSG_DATA(cmsg),
            std::mem::size_of::<RawFd>(),
        );
    }
    libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL);
}

/// The listener thread of one started process: takes the listener from the child, then
/// answers every notification until no process of that filter is left.
fn serve(sock: OwnedFd, inner: std::sync::Weak<Inner>) {
    let got = receive(&sock);
    drop(sock);
    let Some(strong) = inner.upgrade() else {
        return;
    };
    let listener = match got {
        Received::Listener(fd) => {
            Inner::arrived(&strong, None);
            fd
        }
        Received::Refused(errno) => {
            Inner::arrived(
                &strong,
                Some(format!(
                    "a process ran untraced: the kernel refused its filter ({})",
                    io::Error::from_raw_os_error(errno)
                )),
            );
            return;
        }
        // The child never reached the filter: it did not run.
        Received::Nothing => {
            Inner::arrived(&strong, None);
            return;
        }
    };
    drop(strong);
    // SAFETY: an ioctl on the listener with a pointer to a u64 that outlives it.
    unsafe {
        let flags = SYNC_WAKE_UP;
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_SET_FLAGS as _,
            &flags,
        );
    }
    listen(&listener, &inner);
}

enum Received {
    Listener(OwnedFd),
    Refused(i32),
    Nothing,
}

fn receive(sock: &OwnedFd) -> Received {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    let mut body = [0u8; 5];
    let mut space = nix::cmsg_space!(RawFd);
    loop {
        let mut iov = [io::IoSliceMut::new(&mut body)];
        let got = recvmsg::<()>(
            sock.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        );
        let msg = match got {
            Ok(m) => m,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return Received::Nothing,
        };
        if msg.bytes == 0 {
            return Received::Nothing;
        }
        let mut fd = None;
        if let Ok(cmsgs) = msg.cmsgs() {
            for c in cmsgs {
                if let ControlMessageOwned::ScmRights(fds) = c {
                    // SAFETY: the kernel just gave us these descriptors; each is owned once.
                    fd = fds.first().map(|f| unsafe { OwnedFd::from_raw_fd(*f) });
                }
            }
        }
        let errno = i32::from_ne_bytes([body[1], body[2], body[3], body[4]]);
        return match (body[0], fd) {
            (WITH_LISTENER, Some(fd)) => Received::Listener(fd),
            (_, _) => Received::Refused(errno),
        };
    }
}

/// Answers notifications: resolve, record, then let the call go on.
fn listen(listener: &OwnedFd, inner: &std::sync::Weak<Inner>) {
    let fd = listener.as_raw_fd();
    let mut procs = Procs::default();
    loop {
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll on one descriptor we own, with a valid pollfd.
        let n = unsafe { libc::poll(&mut pfd, 1, 1000) };
        if n < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        let Some(inner) = inner.upgrade() else {
            return;
        };
        if n == 0 {
            continue;
        }
        if pfd.revents & libc::POLLIN == 0 {
            // No process of this filter is left.
            return;
        }
        // SAFETY: a zeroed notification is what the RECV ioctl asks for.
        let mut note: libc::seccomp_notif = unsafe { std::mem::zeroed() };
        // SAFETY: the ioctl writes one `seccomp_notif` into `note`.
        let r = unsafe { libc::ioctl(fd, libc::SECCOMP_IOCTL_NOTIF_RECV as _, &mut note) };
        if r < 0 {
            // EINTR, or the caller died before it was read (ENOENT): nothing to answer.
            continue;
        }
        let seen = resolve(&note, &mut procs);
        // Looked at before the call runs: whether it makes or removes a directory.
        let dir = seen
            .as_ref()
            .ok()
            .and_then(|paths| dir_change(&note, paths));
        // The caller may have died and its pid be reused while we read: what we read is
        // then not its call, and the call will not happen.
        let mut id = note.id;
        // SAFETY: the ioctl reads one u64.
        let valid = unsafe { libc::ioctl(fd, libc::SECCOMP_IOCTL_NOTIF_ID_VALID as _, &mut id) };
        if valid == 0 {
            match seen {
                Ok(paths) => inner.keep(note.pid, paths, dir),
                Err(why) => inner.gap(why),
            }
        }
        let mut resp = libc::seccomp_notif_resp {
            id: note.id,
            val: 0,
            error: 0,
            flags: libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32,
        };
        // SAFETY: the ioctl reads one `seccomp_notif_resp`.
        unsafe { libc::ioctl(fd, libc::SECCOMP_IOCTL_NOTIF_SEND as _, &mut resp) };
    }
}

/// The paths one notified call changes, absolute and lexically normal (and, for a call that
/// follows a symbolic link, the link's target too); `Err` says why they cannot be known.
fn resolve(note: &libc::seccomp_notif, procs: &mut Procs) -> Result<Vec<PathBuf>, String> {
    let data = &note.data;
    let pid = note.pid;
    #[cfg(target_arch = "x86_64")]
    let foreign = data.arch != NATIVE_ARCH || (data.nr as u32) & X32_BIT != 0;
    #[cfg(not(target_arch = "x86_64"))]
    let foreign = data.arch != NATIVE_ARCH;
    if foreign {
        return Err("a process of another ABI (32-bit) ran: its writes are not traced".to_owned());
    }
    let nr = i64::from(data.nr);
    let Some((_, shape)) = calls().iter().find(|(n, _)| *n == nr) else {
        return Ok(Vec::new());
    };
    let arg = |i: usize| data.args[i];
    let unreadable = |what: &str| format!("the path of a traced call could not be read ({what})");
    let mut at = |dir: Option<usize>, path: usize| -> Result<PathBuf, String> {
        let name = read_path(pid, arg(path)).map_err(|e| unreadable(&e.to_string()))?;
        join(procs, pid, dir.map(|d| arg(d) as i32), &name).map_err(|e| unreadable(&e.to_string()))
    };
    let mut out = Vec::new();
    match *shape {
        Shape::Open { dir, path, flags } => {
            let flags = arg(flags) as u32;
            let p = at(dir, path)?;
            push_followed(&mut out, p, flags & libc::O_NOFOLLOW as u32 == 0);
        }
        Shape::Openat2 => {
            let flags = read_u64(pid, arg(2)).map_err(|e| unreadable(&e.to_string()))?;
            if flags as u32 & WRITE_FLAGS != 0 {
                let p = at(Some(0), 1)?;
                push_followed(&mut out, p, flags as u32 & libc::O_NOFOLLOW as u32 == 0);
            }
        }
        Shape::Paths { at: pairs, follow } => {
            for (dir, path) in pairs.into_iter().flatten() {
                let p = at(dir, path)?;
                push_followed(&mut out, p, follow);
            }
        }
        Shape::Utimensat => {
            let p = if arg(1) == 0 {
                procs
                    .fd_path(pid, arg(0) as i32)
                    .map_err(|e| unreadable(&e.to_string()))?
            } else {
                at(Some(0), 1)?
            };
            let follow = arg(3) as i32 & libc::AT_SYMLINK_NOFOLLOW == 0;
            push_followed(&mut out, p, follow);
        }
        Shape::Fd(i) => {
            out.push(
                procs
                    .fd_path(pid, arg(i) as i32)
                    .map_err(|e| unreadable(&e.to_string()))?,
            );
        }
    }
    Ok(out)
}

/// Whether the call makes a directory that is absent now, or removes one that is there.
fn dir_change(note: &libc::seccomp_notif, paths: &[PathBuf]) -> Option<DirChange> {
    let nr = i64::from(note.data.nr);
    let path = paths.last()?;
    #[cfg(target_arch = "x86_64")]
    let (mkdir, rmdir) = (nr == libc::SYS_mkdir, nr == libc::SYS_rmdir);
    #[cfg(not(target_arch = "x86_64"))]
    let (mkdir, rmdir) = (false, false);
    let removes_dir =
        rmdir || (nr == libc::SYS_unlinkat && note.data.args[2] as i32 & libc::AT_REMOVEDIR != 0);
    if (mkdir || nr == libc::SYS_mkdirat) && std::fs::symlink_metadata(path).is_err() {
        Some(DirChange::Made(path.clone()))
    } else if removes_dir && std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir()) {
        Some(DirChange::Removed(path.clone()))
    } else {
        None
    }
}

/// Adds the path, its parent's links resolved, and when the call follows a link and the
/// path is one, where it leads.
fn push_followed(out: &mut Vec<PathBuf>, path: PathBuf, follow: bool) {
    if no_links(&path) {
        out.push(path);
        return;
    }
    if follow && std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink()) {
        if let Some(target) = canonical_parent(&path).and_then(|q| q.canonicalize().ok()) {
            out.push(target);
        }
    }
    out.push(canonical_parent(&path).unwrap_or(path));
}

/// Whether no symbolic link lies on `p` (an absent last name, or a missing or non-directory
/// one on the way, where the call itself fails, count as none): then `p` is already the
/// path the call acts on. One `openat2` that refuses every link, where resolving the parent
/// and looking at the name would cost a system call per component (`realpath`) and one
/// more; on a kernel without `openat2`, or on any doubt, `false`.
fn no_links(p: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(p.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: a zeroed `open_how` is a valid one (no flags, no mode, no resolve flags).
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (libc::O_PATH | libc::O_CLOEXEC) as u64;
    how.resolve = libc::RESOLVE_NO_SYMLINKS;
    // SAFETY: `c` is a NUL-terminated path and `how` an `open_how` of the size passed; both
    // outlive the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            libc::AT_FDCWD,
            c.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        let errno = io::Error::last_os_error().raw_os_error();
        return matches!(errno, Some(libc::ENOENT) | Some(libc::ENOTDIR));
    }
    // SAFETY: the kernel just returned this descriptor; it is owned here once, and closed.
    drop(unsafe { OwnedFd::from_raw_fd(fd as RawFd) });
    true
}

/// `p` with its parent directory's links resolved (the name itself kept: a change is seen
/// where the name is), or `None` when the parent is not there.
fn canonical_parent(p: &Path) -> Option<PathBuf> {
    let (parent, name) = (p.parent()?, p.file_name()?);
    Some(parent.canonicalize().ok()?.join(name))
}

/// The path a call names, joined to the directory it is relative to and made lexically
/// normal.
fn join(procs: &mut Procs, pid: u32, dirfd: Option<i32>, name: &[u8]) -> io::Result<PathBuf> {
    let name = Path::new(std::ffi::OsStr::from_bytes(name));
    if name.is_absolute() {
        return Ok(lexical(name));
    }
    let dir = match dirfd {
        None | Some(libc::AT_FDCWD) => procs.link(pid, c"cwd")?,
        Some(fd) => procs.fd_path(pid, fd)?,
    };
    Ok(lexical(&dir.join(name)))
}

/// The callers' `/proc/<pid>` directories, kept open by one listener: reading a caller's cwd
/// or descriptor through its directory spares the kernel the lookup of `/proc/<pid>` on
/// every call. A directory kept past its process's end does not follow the pid to the next
/// process given it (the kernel refuses every lookup through it), so a pid reused meanwhile
/// is opened afresh, never read through the old one.
#[derive(Default)]
struct Procs(HashMap<u32, OwnedFd>);

impl Procs {
    /// Directories kept at most: a listener serves a process tree whose processes come and
    /// go; the ones calling now are few.
    const KEPT: usize = 64;

    /// What the link `name` in the caller's `/proc/<pid>` names.
    fn link(&mut self, pid: u32, name: &std::ffi::CStr) -> io::Result<PathBuf> {
        if let Some(dir) = self.0.get(&pid) {
            match readlinkat(dir, name) {
                Ok(p) => return Ok(p),
                // Its process ended (and the pid may be another's now): open it again.
                Err(_) => {
                    self.0.remove(&pid);
                }
            }
        }
        let path = std::ffi::CString::new(format!("/proc/{pid}"))
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: a NUL-terminated path; the descriptor returned is owned below.
        let fd = unsafe {
            libc::open(
                path.as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the kernel just returned this descriptor; it is owned here once.
        let dir = unsafe { OwnedFd::from_raw_fd(fd) };
        let got = readlinkat(&dir, name);
        if self.0.len() >= Self::KEPT {
            self.0.clear();
        }
        self.0.insert(pid, dir);
        got
    }

    /// What a descriptor of the caller names.
    fn fd_path(&mut self, pid: u32, fd: i32) -> io::Result<PathBuf> {
        let name = std::ffi::CString::new(format!("fd/{fd}"))
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        self.link(pid, &name)
    }
}

/// `readlinkat(dir, name)`, into a buffer on the stack.
fn readlinkat(dir: &OwnedFd, name: &std::ffi::CStr) -> io::Result<PathBuf> {
    let mut buf = [0u8; libc::PATH_MAX as usize];
    // SAFETY: `name` is NUL-terminated and `buf` is writable for its whole length.
    let n = unsafe {
        libc::readlinkat(
            dir.as_raw_fd(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // A link that fills the buffer may have been cut short.
    match buf.get(..n as usize) {
        Some(link) if (n as usize) < buf.len() => {
            Ok(PathBuf::from(std::ffi::OsStr::from_bytes(link)))
        }
        _ => Err(io::Error::from_raw_os_error(libc::ENAMETOOLONG)),
    }
}

/// `p` without `.` and with `..` taken lexically (a directory named from `/proc` has no
/// links to climb out of; one named by the caller has its parent resolved later).
fn lexical(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// Reads a NUL-terminated path from the caller's memory, page by page (a path may end just
/// before an unmapped page).
fn read_path(pid: u32, addr: u64) -> io::Result<Vec<u8>> {
    const PAGE: u64 = 4096;
    let mut out = Vec::new();
    let mut at = addr;
    while out.len() < libc::PATH_MAX as usize {
        let chunk = (PAGE - at % PAGE) as usize;
        let mut buf = vec![0u8; chunk];
        read_mem(pid, at, &mut buf)?;
        if let Some(end) = buf.iter().position(|b| *b == 0) {
            out.extend_from_slice(&buf[..end]);
            return Ok(out);
        }
        out.extend_from_slice(&buf);
        at += chunk as u64;
    }
    Err(io::Error::from_raw_os_error(libc::ENAMETOOLONG))
}

fn read_u64(pid: u32, addr: u64) -> io::Result<u64> {
    let mut buf = [0u8; 8];
    read_mem(pid, addr, &mut buf)?;
    Ok(u64::from_ne_bytes(buf))
}

fn read_mem(pid: u32, addr: u64, buf: &mut [u8]) -> io::Result<()> {
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: reads another process's memory into `buf`, which is `buf.len()` long.
    let n = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n as usize != buf.len() {
        return Err(io::Error::from_raw_os_error(libc::EFAULT));
    }
    Ok(())
}

/// Installs the filter in a throwaway child and sees its listener arrive.
fn probe() -> Result<(), TraceError> {
    let dir = std::env::temp_dir();
    let trace = Trace::new(&dir);
    let armed = trace
        .arm()
        .map_err(|e| TraceError::Unavailable(e.to_string()))?;
    // SAFETY: `Armed::enter` makes only system calls. The command is dropped on return, so
    // the child's end of the socket is closed before `take` waits for the listener.
    let ran = unsafe { super::confine::probe_child(move || armed.enter()) };
    let taken = trace.take();
    match (ran, taken.gaps.first()) {
        (Ok(s), None) if s.success() => Ok(()),
        (_, Some(gap)) => Err(TraceError::Unavailable(gap.clone())),
        (Err(e), None) => Err(TraceError::Unavailable(e.to_string())),
        (Ok(s), None) => Err(TraceError::Unavailable(format!("the probe ended with {s}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt as _;

    /// Runs `script` in `dir` traced by `trace`.
    fn traced(trace: &Trace, dir: &Path, script: &str) -> std::process::Output {
        let armed = trace.arm().expect("arm");
        let mut cmd = std::process::Command::new("sh");
        cmd.arg("-c").arg(script).current_dir(dir);
        // SAFETY: `Armed::enter` makes only system calls.
        unsafe {
            cmd.pre_exec(move || armed.enter());
        }
        cmd.output().expect("sh runs")
    }

    fn rel(taken: &Traced, root: &Path) -> Vec<String> {
        let root = root.canonicalize().expect("root");
        let mut v: Vec<String> = taken
            .paths
            .iter()
            .filter_map(|p| p.strip_prefix(&root).ok())
            .map(|p| p.display().to_string())
            .collect();
        v.sort();
        v
    }

    fn here() -> bool {
        match Trace::available() {
            Ok(()) => true,
            Err(e) => {
                eprintln!("skipped: {e}");
                false
            }
        }
    }

    #[test]
    fn every_way_a_command_changes_the_tree_is_recorded_and_reads_are_not() {
        if !here() {
            return;
        }
        let dir = tempfile::tempdir().expect("dir");
        let root = dir.path();
        std::fs::write(root.join("read.txt"), "r").expect("write");
        std::fs::write(root.join("old.txt"), "o").expect("write");
        std::fs::write(root.join("gone.txt"), "g").expect("write");
        std::fs::write(root.join("mode.sh"), "m").expect("write");
        std::fs::create_dir(root.join("empty")).expect("mkdir");
        std::fs::write(root.join("target.txt"), "t").expect("write");
        std::os::unix::fs::symlink("target.txt", root.join("link")).expect("symlink");
        std::fs::create_dir(root.join("real")).expect("mkdir");
        std::os::unix::fs::symlink("real", root.join("dirlink")).expect("symlink");
        let trace = Trace::new(root);
        let out = traced(
            &trace,
            root,
            "cat read.txt >/dev/null; echo a > new.txt; mv old.txt moved.txt; rm gone.txt; \
             chmod +x mode.sh; mkdir -p made/deep; rmdir empty; ln -s new.txt sym; \
             echo via >> link; python3 -c \"open('py.bin','wb').write(bytes([0,255]))\"; \
             sed -i s/a/b/ new.txt; echo under > dirlink/under.txt; echo outside > /dev/null",
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let taken = trace.take();
        assert!(taken.gaps.is_empty(), "{:?}", taken.gaps);
        let got = rel(&taken, root);
        for want in [
            "new.txt",
            "old.txt",
            "moved.txt",
            "gone.txt",
            "mode.sh",
            "made",
            "made/deep",
            "empty",
            "sym",
            "link",
            "target.txt",
            "py.bin",
            // Where the call acts: the parent's link resolved.
            "real/under.txt",
        ] {
            assert!(got.iter().any(|g| g == want), "{want} missing from {got:?}");
        }
        assert!(
            !got.iter().any(|g| g == "read.txt"),
            "a read was recorded: {got:?}"
        );
        // Traced once.
        assert!(trace.take().paths.is_empty());
    }

    #[test]
    fn a_daemon_that_left_the_session_is_still_traced() {
        if !here() {
            return;
        }
        let dir = tempfile::tempdir().expect("dir");
        let root = dir.path();
        let trace = Trace::new(root);
        let out = traced(
            &trace,
            root,
            "setsid sh -c '(sleep 0.3; echo late > late.txt) &' </dev/null >/dev/null 2>&1 &",
        );
        assert!(out.status.success());
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !root.join("late.txt").exists() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(root.join("late.txt").exists(), "the daemon never wrote");
        assert_eq!(rel(&trace.take(), root), vec!["late.txt".to_owned()]);
    }

    #[test]
    fn paths_outside_the_root_are_not_kept() {
        if !here() {
            return;
        }
        let dir = tempfile::tempdir().expect("dir");
        let other = tempfile::tempdir().expect("other");
        let trace = Trace::new(dir.path());
        let script = format!(
            "echo x > {}/out.txt; echo y > in.txt",
            other.path().display()
        );
        let out = traced(&trace, dir.path(), &script);
        assert!(out.status.success());
        assert_eq!(rel(&trace.take(), dir.path()), vec!["in.txt".to_owned()]);
    }

    #[test]
    fn the_filter_is_refused_under_another_listener_and_the_command_still_runs() {
        if !here() {
            return;
        }
        // A traced shell starts a second traced child: the kernel allows one listener per
        // chain, so the inner one is refused, and that is a gap, not a failed command.
        let dir = tempfile::tempdir().expect("dir");
        let outer = Trace::new(dir.path());
        let inner = Trace::new(dir.path());
        let armed_outer = outer.arm().expect("arm");
        let armed_inner = inner.arm().expect("arm");
        let mut cmd = std::process::Command::new("sh");
        cmd.arg("-c").arg("echo x > a.txt").current_dir(dir.path());
        // SAFETY: both make only system calls.
        unsafe {
            cmd.pre_exec(move || {
                armed_outer.enter()?;
                armed_inner.enter()
            });
        }
        assert!(cmd.output().expect("runs").status.success());
        drop(cmd);
        assert_eq!(rel(&outer.take(), dir.path()), vec!["a.txt".to_owned()]);
        let gaps = inner.take().gaps;
        assert_eq!(gaps.len(), 1, "{gaps:?}");
    }

    #[test]
    fn directories_made_and_removed_are_told_apart_from_those_that_were_there() {
        if !here() {
            return;
        }
        let dir = tempfile::tempdir().expect("dir");
        let root = dir.path();
        std::fs::create_dir(root.join("empty")).expect("mkdir");
        std::fs::create_dir(root.join("there")).expect("mkdir");
        let trace = Trace::new(root);
        let out = traced(
            &trace,
            root,
            "rmdir empty; mkdir -p there made/deep; mkdir tmp && rmdir tmp",
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let taken = trace.take();
        let canon = root.canonicalize().expect("root");
        let names = |v: &[PathBuf]| {
            let mut n: Vec<String> = v
                .iter()
                .filter_map(|p| p.strip_prefix(&canon).ok())
                .map(|p| p.display().to_string())
                .collect();
            n.sort();
            n
        };
        assert_eq!(names(&taken.made_dirs), ["made", "made/deep"]);
        assert_eq!(names(&taken.removed_dirs), ["empty"]);
    }

    #[test]
    fn lexical_drops_dots() {
        assert_eq!(lexical(Path::new("/a/./b/../c")), PathBuf::from("/a/c"));
    }
}
