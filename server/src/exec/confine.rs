//! What a command Rein starts may touch: a Landlock domain entered between fork and exec.
//!
//! The policy decides *whether* a command runs; this decides *what it can reach*. In the
//! default `workspace-write` mode a command reads anything, writes only in the working tree
//! (never its `.git`), the system temp dir, the task's scratch dir and a few device files,
//! cannot open a TCP connection or listen (unless its rule allows network), and cannot
//! signal or reach by abstract socket a process outside its domain — Rein and the editor
//! included.
//!
//! An ACP agent process gets a domain of its own (`Confinement::for_agent`): the same, plus
//! the directories where its harness keeps its state, and the network (it needs its model
//! API), optionally connecting only to some TCP ports (it may still listen on any, for the
//! OAuth and MCP callbacks harnesses take on local ports).
//!
//! Landlock rules only add access: a right granted on a directory holds in all of it, so
//! `.git` cannot be taken back out of a writable tree by a rule. A confined child therefore
//! first enters a user and mount namespace of its own in which the tree's `.git` is a
//! read-only bind mount (its hooks, config, Rein's task state and checkpoint refs with it),
//! then the Landlock domain, which forbids undoing mounts. Where no user namespace can be
//! made, the writable tree is granted entry by entry, all but `.git`: then nothing new can
//! be made at the top of the tree (it would be writable in `.git` too), which is said.
//!
//! The ruleset is built in the parent (it opens the allowed paths and allocates); the child
//! only makes system calls, as code between fork and exec must.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use landlock::{
    path_beneath_rules, Access, AccessFs, AccessNet, CompatLevel, Compatible, NetPort, Ruleset,
    RulesetAttr, RulesetCreated, RulesetCreatedAttr, Scope, ABI,
};
use nix::libc;
use serde::{Deserialize, Serialize};

use super::trace::{Armed, Trace};

/// The newest Landlock ABI whose rights Rein has vetted; newer kernels get these rights.
const VETTED: i32 = 6;

/// Device files every command may open for writing (shell redirections, terminals).
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts",
    "/dev/shm",
];

/// Set to `off` to behave as if the kernel had no Landlock (to see and test the fallback);
/// `abi:N` to use no Landlock right newer than ABI N (as an older kernel would);
/// `no-userns` to behave as if no user namespace could be made; `no-trace` as if the kernel
/// had no seccomp notifications (authorship by the older rules). Comma-separated.
pub const FORCE_VAR: &str = "REIN_LANDLOCK";

/// How confined the commands Rein runs are (`sandbox` in `rein.toml` and the settings).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxMode {
    /// Write only in the working tree (not its `.git`) and temp; no network unless allowed.
    #[default]
    WorkspaceWrite,
    /// Write nowhere but temp and device files; no network unless allowed.
    ReadOnly,
    /// No confinement: the command has the user's full rights.
    Off,
}

impl SandboxMode {
    /// The setting's value, as written in `rein.toml`.
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxMode::WorkspaceWrite => "workspace-write",
            SandboxMode::ReadOnly => "read-only",
            SandboxMode::Off => "off",
        }
    }

    /// Parses the setting's value.
    pub fn parse(s: &str) -> Option<SandboxMode> {
        match s {
            "workspace-write" => Some(SandboxMode::WorkspaceWrite),
            "read-only" => Some(SandboxMode::ReadOnly),
            "off" => Some(SandboxMode::Off),
            _ => None,
        }
    }
}

/// Why no confinement could be set up.
#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    /// The kernel has no Landlock, or it is disabled, or it was forced off.
    #[error("the kernel offers no Landlock sandbox ({0}); commands and agent processes run with your full rights, gated only by the policy")]
    Unavailable(String),
    /// Landlock refused the ruleset.
    #[error("cannot build the command sandbox: {0}")]
    Ruleset(#[from] landlock::RulesetError),
    /// A path to protect cannot be named to the kernel.
    #[error("cannot protect {0}: its name contains a NUL byte")]
    BadPath(String),
}

/// What one command may touch.
#[derive(Debug, Clone)]
pub struct Confinement {
    /// The mode in force.
    pub mode: SandboxMode,
    /// Directories (and files) the command may write beneath, besides temp and devices.
    pub writable: Vec<PathBuf>,
    /// Paths beneath the writable ones (temp included) that stay read-only: the tree's
    /// `.git`, or in `read-only` the whole tree (which may lie in temp).
    pub read_only: Vec<PathBuf>,
    /// Whether the command may connect and bind TCP ports.
    pub network: bool,
    /// With `network`, the only TCP ports it may connect to (none listed: every port); it
    /// may listen on any.
    pub ports: Vec<u16>,
    /// Whether file access is confined; false leaves files to a harness's own sandbox (a
    /// Landlock file domain forbids the mounts bubblewrap makes), and only the network and
    /// signals are.
    pub files: bool,
    /// The task's scratch dir: writable, and the command's `TMPDIR`.
    pub scratch: Option<PathBuf>,
    /// The trace that records what the process and everything it starts change.
    pub trace: Option<Trace>,
}

impl Confinement {
    /// The confinement of a command run in `root` (the working tree) under `mode`. A
    /// worktree's or submodule's git directory lies outside the tree and is not granted:
    /// like the tree's own `.git`, it is read-only to what Rein runs.
    pub fn for_tree(mode: SandboxMode, root: &Path, network: bool) -> Confinement {
        let (writable, read_only) = match mode {
            SandboxMode::WorkspaceWrite => (vec![root.to_owned()], vec![root.join(".git")]),
            SandboxMode::ReadOnly => (Vec::new(), vec![root.to_owned()]),
            SandboxMode::Off => (Vec::new(), Vec::new()),
        };
        Confinement {
            mode,
            writable,
            read_only,
            network,
            ports: Vec::new(),
            files: true,
            scratch: None,
            trace: None,
        }
    }

    /// The domain of an ACP agent process run in `root`: the tree as for a command (none in
    /// `read-only`), plus its `state` directories; network allowed, only to `ports` if any
    /// are named.
    pub fn for_agent(
        mode: SandboxMode,
        root: &Path,
        state: &[PathBuf],
        ports: &[u16],
    ) -> Confinement {
        let mut c = Confinement::for_tree(mode, root, true);
        c.writable.extend(state.iter().cloned());
        c.ports = ports.to_vec();
        c
    }

    /// Gives the command the task's scratch dir: writable, and its `TMPDIR`.
    pub fn with_scratch(mut self, dir: &Path) -> Confinement {
        self.writable.push(dir.to_owned());
        self.scratch = Some(dir.to_owned());
        self
    }

    /// Records what the process and everything it starts change in `trace`.
    pub fn with_trace(mut self, trace: Trace) -> Confinement {
        self.trace = Some(trace);
        self
    }

    /// Makes `command`'s child enter this domain between fork and exec (nothing when the
    /// mode is `off`).
    pub fn apply(&self, command: &mut tokio::process::Command) -> Result<(), ConfineError> {
        if let Some(dir) = &self.scratch {
            command.env("TMPDIR", dir);
        }
        if let Some(mut enter) = self.prepare()? {
            // SAFETY: between fork and exec the child only makes system calls (unshare,
            // write, mount, prctl, landlock_restrict_self, seccomp, sendmsg) on memory
            // prepared before the fork, and allocates nothing.
            unsafe {
                command.pre_exec(move || enter.enter());
            }
        }
        Ok(())
    }

    /// What the child does before exec, built here in the parent; `None` when the mode is
    /// `off`.
    fn prepare(&self) -> Result<Option<Entry>, ConfineError> {
        self.prepare_as(&Forced::from_env())
    }

    fn prepare_as(&self, forced: &Forced) -> Result<Option<Entry>, ConfineError> {
        if self.mode == SandboxMode::Off {
            return Ok(None);
        }
        probe(forced.off)?;
        let abi = effective_abi(forced);
        let mut holes: Vec<PathBuf> = if self.files {
            self.read_only
                .iter()
                .filter_map(|p| std::fs::canonicalize(p).ok())
                .collect()
        } else {
            Vec::new()
        };
        let shield = if holes.is_empty() || !userns_here(forced) {
            None
        } else {
            let shield = Shield::new(&holes)?;
            // The mounts keep these read-only: Landlock may grant what holds them.
            holes.clear();
            Some(shield)
        };
        let ruleset = self.ruleset(abi, &holes)?;
        // Untraceable here (said where the sandbox's reach is reported): the older rules
        // judge what the process changes.
        let armed = match &self.trace {
            Some(t) if Trace::available().is_ok() => match t.arm() {
                Ok(a) => Some(a),
                Err(e) => {
                    tracing::warn!("a process runs untraced: {e}");
                    None
                }
            },
            _ => None,
        };
        Ok(Some(Entry {
            shield,
            ruleset: Some(ruleset),
            armed,
        }))
    }

    /// The Landlock ruleset, with no right newer than `abi` and nothing granted beneath
    /// `holes` (granted entry by entry around them).
    fn ruleset(&self, abi: ABI, holes: &[PathBuf]) -> Result<RulesetCreated, ConfineError> {
        // Creating and mknod-ing devices is never needed in a tree: as root it would open
        // the disks.
        let all = AccessFs::from_all(abi) & !(AccessFs::MakeChar | AccessFs::MakeBlock);
        let mut rules = Ruleset::default();
        if self.files {
            // Without the first ABI's rights there is no sandbox at all: say so, never run
            // "confined" in name only.
            rules = rules
                .set_compatibility(CompatLevel::HardRequirement)
                .handle_access(AccessFs::from_all(ABI::V1))?
                .set_compatibility(CompatLevel::BestEffort)
                .handle_access(AccessFs::from_all(abi))?;
        }
        rules = rules.set_compatibility(CompatLevel::BestEffort);
        if abi >= ABI::V6 {
            rules = rules.scope(Scope::from_all(abi))?;
        }
        if abi >= ABI::V4 && !self.network {
            rules = rules.handle_access(AccessNet::from_all(abi))?;
        } else if abi >= ABI::V4 && !self.ports.is_empty() {
            // Named ports limit where it may send; listening stays open, as harnesses take
            // OAuth and MCP callbacks on local ports of their choosing.
            rules = rules.handle_access(AccessNet::ConnectTcp)?;
        }
        let mut created = rules.create()?;
        if self.files {
            let mut writable: Vec<PathBuf> = self.writable.clone();
            writable.push(std::env::temp_dir());
            writable.push(PathBuf::from("/tmp"));
            writable.push(PathBuf::from("/var/tmp"));
            // A rule needs the path opened; one that does not exist grants nothing anyway.
            let writable = writable
                .iter()
                .filter_map(|p| std::fs::canonicalize(p).ok())
                .fold(Vec::new(), |mut out, dir| {
                    grant_around(&dir, holes, &mut out);
                    out
                });
            let devices = DEVICES.iter().map(PathBuf::from).filter(|p| p.exists());
            created = created
                .add_rules(path_beneath_rules(["/"], AccessFs::from_read(abi)))?
                .add_rules(path_beneath_rules(writable, all))?
                .add_rules(path_beneath_rules(devices, all))?;
        }
        if self.network {
            created = created.add_rules(self.ports.iter().map(|p| {
                Ok::<_, landlock::RulesetError>(NetPort::new(*p, AccessNet::ConnectTcp))
            }))?;
        }
        Ok(created)
    }
}

/// `dir`'s grant as rules that leave out every path in `holes`: `dir` itself when no hole
/// lies beneath it, else each of its entries in turn (symbolic links are left out, as a
/// rule would follow them out of the tree).
fn grant_around(dir: &Path, holes: &[PathBuf], out: &mut Vec<PathBuf>) {
    if holes.iter().any(|h| h == dir) {
        return;
    }
    if !holes.iter().any(|h| h.starts_with(dir)) {
        out.push(dir.to_owned());
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_type().is_ok_and(|t| !t.is_symlink()) {
            grant_around(&entry.path(), holes, out);
        }
    }
}

/// What the child does between fork and exec: make the read-only mounts, enter the
/// Landlock domain (which sets `no_new_privs`), then the trace's filter.
struct Entry {
    shield: Option<Shield>,
    ruleset: Option<RulesetCreated>,
    armed: Option<Armed>,
}

impl Entry {
    /// Runs in the child between fork and exec: system calls only, no allocation.
    fn enter(&mut self) -> std::io::Result<()> {
        if let Some(s) = &self.shield {
            s.enter()?;
        }
        if let Some(r) = self.ruleset.take() {
            r.restrict_self()
                .map_err(|_| std::io::Error::from_raw_os_error(libc::EPERM))?;
        }
        match &self.armed {
            Some(a) => a.enter(),
            None => Ok(()),
        }
    }
}

/// A user and mount namespace of the child's own in which some paths are read-only bind
/// mounts of themselves. The names and maps are made here, before the fork.
struct Shield {
    targets: Vec<CString>,
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
}

/// `struct mount_attr` of `mount_setattr(2)`.
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

const MOUNT_ATTR_RDONLY: u64 = 1;

impl Shield {
    fn new(paths: &[PathBuf]) -> Result<Shield, ConfineError> {
        let targets = paths
            .iter()
            .map(|p| {
                CString::new(p.as_os_str().as_bytes())
                    .map_err(|_| ConfineError::BadPath(p.display().to_string()))
            })
            .collect::<Result<_, _>>()?;
        // The command keeps its own ids: each maps to itself.
        // SAFETY: these calls cannot fail and touch no memory.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        Ok(Shield {
            targets,
            uid_map: format!("{uid} {uid} 1\n").into_bytes(),
            gid_map: format!("{gid} {gid} 1\n").into_bytes(),
        })
    }

    /// In the child: system calls only.
    fn enter(&self) -> std::io::Result<()> {
        let check = |r: libc::c_long| {
            if r < 0 {
                Err(std::io::Error::last_os_error())
            } else {
                Ok(())
            }
        };
        // SAFETY: plain system calls on NUL-terminated names and buffers that outlive them.
        unsafe {
            check(libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS).into())?;
            write_proc(c"/proc/self/setgroups", b"deny")?;
            write_proc(c"/proc/self/uid_map", &self.uid_map)?;
            write_proc(c"/proc/self/gid_map", &self.gid_map)?;
            for t in &self.targets {
                check(
                    libc::mount(
                        t.as_ptr(),
                        t.as_ptr(),
                        std::ptr::null(),
                        libc::MS_BIND | libc::MS_REC,
                        std::ptr::null(),
                    )
                    .into(),
                )?;
                // Only the read-only flag changes: the flags the mount had (nosuid, nodev…)
                // are the user namespace's to keep, and remounting them away is refused.
                let attr = MountAttr {
                    attr_set: MOUNT_ATTR_RDONLY,
                    attr_clr: 0,
                    propagation: 0,
                    userns_fd: 0,
                };
                check(libc::syscall(
                    libc::SYS_mount_setattr,
                    libc::AT_FDCWD,
                    t.as_ptr(),
                    libc::AT_RECURSIVE as libc::c_uint,
                    &attr as *const MountAttr,
                    std::mem::size_of::<MountAttr>(),
                ))?;
            }
        }
        Ok(())
    }
}

/// Writes `data` to a `/proc/self` file: system calls only.
///
/// # Safety
/// Only async-signal-safe calls; `path` is NUL-terminated.
unsafe fn write_proc(path: &std::ffi::CStr, data: &[u8]) -> std::io::Result<()> {
    let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let n = libc::write(fd, data.as_ptr().cast(), data.len());
    let err = std::io::Error::last_os_error();
    libc::close(fd);
    if usize::try_from(n).ok() == Some(data.len()) {
        Ok(())
    } else {
        Err(err)
    }
}

/// What `REIN_LANDLOCK` forces.
#[derive(Debug, Default)]
struct Forced {
    off: bool,
    abi: Option<i32>,
    no_userns: bool,
    no_trace: bool,
}

impl Forced {
    fn from_env() -> Forced {
        Forced::parse(&std::env::var(FORCE_VAR).unwrap_or_default())
    }

    fn parse(value: &str) -> Forced {
        let mut f = Forced::default();
        for word in value.split(',').map(str::trim) {
            match word {
                "off" => f.off = true,
                "no-userns" => f.no_userns = true,
                "no-trace" => f.no_trace = true,
                w => {
                    if let Some(n) = w.strip_prefix("abi:").and_then(|n| n.parse().ok()) {
                        f.abi = Some(n);
                    }
                }
            }
        }
        f
    }
}

/// The ABI whose rights are asked for: the kernel's, but none newer than vetted or forced.
fn effective_abi(forced: &Forced) -> ABI {
    let kernel = kernel_abi().unwrap_or(1);
    ABI::from(kernel.min(VETTED).min(forced.abi.unwrap_or(i32::MAX)))
}

/// Whether a confined child can make a user and mount namespace here (asked once, by a
/// throwaway child that makes one and a read-only mount in it).
fn userns_here(forced: &Forced) -> bool {
    static HERE: OnceLock<bool> = OnceLock::new();
    !forced.no_userns
        && *HERE.get_or_init(|| {
            let dir = std::env::temp_dir();
            let Ok(shield) = Shield::new(std::slice::from_ref(&dir)) else {
                return false;
            };
            // SAFETY: `Shield::enter` makes only system calls.
            let ok = unsafe { probe_child(move || shield.enter()) }.is_ok_and(|s| s.success());
            if !ok {
                tracing::info!("no user namespace can be made here: a confined command's tree is granted entry by entry, without .git");
            }
            ok
        })
}

/// Whether `REIN_LANDLOCK` says `no-trace`.
pub(super) fn trace_forced_off() -> bool {
    Forced::from_env().no_trace
}

/// Runs `true` with `enter` between fork and exec, its output dropped: how Rein asks the
/// kernel whether something can be done to a child.
///
/// # Safety
/// `enter` runs between fork and exec: it may only make system calls.
pub(super) unsafe fn probe_child(
    enter: impl FnMut() -> std::io::Result<()> + Send + Sync + 'static,
) -> std::io::Result<std::process::ExitStatus> {
    let mut probe = std::process::Command::new("true");
    probe
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    std::os::unix::process::CommandExt::pre_exec(&mut probe, enter);
    probe.status()
}

/// Whether this kernel can confine commands.
pub fn available() -> Result<(), ConfineError> {
    probe(Forced::from_env().off)
}

/// The Landlock ABI version the kernel offers (or as forced lower), or `None` when it
/// offers none (or it was forced off).
pub fn abi() -> Option<i32> {
    let forced = Forced::from_env();
    probe(forced.off).ok()?;
    let v = kernel_abi()?;
    Some(forced.abi.map_or(v, |f| v.min(f)))
}

fn kernel_abi() -> Option<i32> {
    // SAFETY: with a null attribute and the VERSION flag the call only returns a number.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            1u32,
        )
    };
    i32::try_from(v).ok().filter(|v| *v > 0)
}

fn probe(forced_off: bool) -> Result<(), ConfineError> {
    if forced_off {
        return Err(ConfineError::Unavailable(format!("{FORCE_VAR}=off")));
    }
    // A throwaway ruleset: creating it is the documented probe.
    Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(ABI::V1))
        .and_then(|r| r.create())
        .map(|_| ())
        .map_err(|e| ConfineError::Unavailable(e.to_string()))
}

/// What the sandbox enforces on this kernel and what it cannot, in people's words.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Coverage {
    /// What holds.
    pub enforced: Vec<String>,
    /// What this kernel (or machine) cannot enforce, each with what it would take.
    pub missing: Vec<String>,
}

/// What `mode` enforces here; empty when it is `off` or there is no Landlock.
pub fn coverage(mode: SandboxMode) -> Coverage {
    let mut c = Coverage::default();
    let Some(abi) = abi().filter(|_| mode != SandboxMode::Off) else {
        return c;
    };
    let forced = Forced::from_env();
    c.enforced.push(match mode {
        SandboxMode::ReadOnly => "files: writes only in temp and the task's scratch dir".into(),
        _ => "files: writes only in the working tree, temp and the task's scratch dir".into(),
    });
    let git = if mode == SandboxMode::ReadOnly {
        "the tree"
    } else {
        ".git"
    };
    if userns_here(&forced) {
        c.enforced.push(format!(
            "{git} read-only (a mount namespace of the command's own)"
        ));
    } else {
        c.enforced.push(format!(
            "{git} read-only by granting only what lies beside it"
        ));
        c.missing.push(format!(
            "new files and directories beside {git} (at the top of the tree, or in a temp dir holding the tree): no user namespace can be made here, so nothing new can be made there"
        ));
    }
    let need = |min: i32, what: &str, c: &mut Coverage| {
        if abi >= min {
            c.enforced.push(what.to_owned());
        } else {
            c.missing.push(format!(
                "{what} (needs Landlock ABI {min}; this kernel has {abi})"
            ));
        }
    };
    need(3, "truncating files outside the writable set", &mut c);
    need(4, "network: TCP connect and bind", &mut c);
    need(
        6,
        "signals and abstract sockets outside the command",
        &mut c,
    );
    match super::trace::Trace::available() {
        Ok(()) => c.enforced.push(
            "authorship: every process the agent runs is traced (seccomp notifications), so abort takes back exactly what its processes changed".into(),
        ),
        Err(e) => c.missing.push(format!(
            "authorship by observation: {e}; abort keeps what it cannot attribute and lists it"
        )),
    }
    c
}

/// What a failure denied by Landlock prints (EACCES, EPERM, EROFS in the C library's words).
const DENIED: [&str; 3] = [
    "Permission denied",
    "Operation not permitted",
    "Read-only file system",
];

/// The path a denial-looking failure names, as the command printed it: `touch: cannot touch
/// '/x': Permission denied`, `sh: 1: cannot create /x: Permission denied`, Python's
/// `PermissionError: [Errno 13] Permission denied: '/x'`.
pub fn denied_path(stderr: &str) -> Option<String> {
    let pathlike = |w: &str| w.contains('/') || w.starts_with('~');
    for line in stderr
        .lines()
        .filter(|l| DENIED.iter().any(|d| l.contains(d)))
    {
        for (open, close) in [('\'', '\''), ('‘', '’'), ('"', '"'), ('`', '\'')] {
            let quoted = line
                .split_once(open)
                .and_then(|(_, rest)| rest.split_once(close))
                .map(|(p, _)| p);
            if let Some(p) = quoted.filter(|p| pathlike(p)) {
                return Some(p.to_owned());
            }
        }
        let word = line
            .split_whitespace()
            .map(|w| w.trim_end_matches(':'))
            .rfind(|w| pathlike(w));
        if let Some(w) = word {
            return Some(w.to_owned());
        }
    }
    None
}

/// The hint added to a confined command's failure that looks like a denied access.
pub fn denial_hint(mode: SandboxMode, stderr: &str) -> Option<String> {
    if mode == SandboxMode::Off || !DENIED.iter().any(|d| stderr.contains(d)) {
        return None;
    }
    let allowed = match mode {
        SandboxMode::WorkspaceWrite => {
            "writes only in the working tree but not its .git, in temp and in the task's scratch dir ($TMPDIR); no network"
        }
        SandboxMode::ReadOnly => "writes only in temp and the task's scratch dir ($TMPDIR); no network",
        SandboxMode::Off => "",
    };
    Some(format!(
        "the command ran in Rein's sandbox (sandbox = \"{}\": {allowed}), which may have denied it. \
         To let a command reach the network, give its policy rule network = true; to widen or \
         turn off the sandbox, set sandbox in rein.toml (\"workspace-write\", \"read-only\" or \"off\")",
        mode.as_str()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt as _;
    use std::process::Command;

    fn confined(c: &Confinement, script: &str, cwd: &Path) -> std::process::Output {
        confined_as(c, &Forced::default(), script, cwd)
    }

    fn confined_as(
        c: &Confinement,
        forced: &Forced,
        script: &str,
        cwd: &Path,
    ) -> std::process::Output {
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg(script).current_dir(cwd);
        if let Some(mut entry) = c.prepare_as(forced).expect("confinement") {
            // SAFETY: `Entry::enter` makes only system calls.
            unsafe {
                cmd.pre_exec(move || entry.enter());
            }
        }
        cmd.output().expect("sh runs")
    }

    #[test]
    fn a_confined_command_writes_in_the_tree_and_temp_and_nowhere_else() {
        landlock_here();
        let home = tempfile::tempdir_in(std::env::var("HOME").unwrap_or("/root".into()))
            .expect("dir in home");
        let tree = tempfile::tempdir_in(home.path()).expect("tree");
        let c = Confinement::for_tree(SandboxMode::WorkspaceWrite, tree.path(), false);
        let out_of_tree = home.path().join("escaped");
        std::os::unix::fs::symlink(home.path(), tree.path().join("link")).expect("symlink");
        let tmp = tempfile::NamedTempFile::new().expect("temp");
        let script = format!(
            "echo in > inside.txt; echo t > {tmp}; echo x > {out} ; echo y > ../up ; echo z > link/via-link; echo d > /dev/null; true",
            tmp = tmp.path().display(),
            out = out_of_tree.display()
        );
        let out = confined(&c, &script, tree.path());
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            std::fs::read_to_string(tree.path().join("inside.txt"))
                .ok()
                .as_deref(),
            Some("in\n"),
            "{err}"
        );
        assert_eq!(
            std::fs::read_to_string(tmp.path()).ok().as_deref(),
            Some("t\n"),
            "{err}"
        );
        assert!(!out_of_tree.exists(), "wrote outside the tree: {err}");
        assert!(!home.path().join("up").exists(), "wrote ../up: {err}");
        assert!(
            !home.path().join("via-link").exists(),
            "wrote through a symlink: {err}"
        );
        assert!(err.contains("Permission denied"), "{err}");
        assert!(denial_hint(c.mode, &err).is_some());
    }

    #[test]
    fn read_only_writes_nowhere_in_the_tree() {
        landlock_here();
        let tree =
            tempfile::tempdir_in(std::env::var("HOME").unwrap_or("/root".into())).expect("tree");
        let c = Confinement::for_tree(SandboxMode::ReadOnly, tree.path(), false);
        let out = confined(
            &c,
            "cat /etc/hostname >/dev/null; echo x > a.txt",
            tree.path(),
        );
        assert!(!tree.path().join("a.txt").exists());
        assert!(!out.status.success());
    }

    #[test]
    fn network_is_refused_unless_allowed_and_rein_cannot_be_signalled() {
        landlock_here();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
        let port = listener.local_addr().expect("addr").port();
        let tree = tempfile::tempdir().expect("tree");
        let connect = format!(
            "python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), 2)'"
        );
        let denied = Confinement::for_tree(SandboxMode::WorkspaceWrite, tree.path(), false);
        let out = confined(&denied, &connect, tree.path());
        assert!(!out.status.success(), "connected without network allowed");
        let allowed = Confinement::for_tree(SandboxMode::WorkspaceWrite, tree.path(), true);
        let out = confined(&allowed, &connect, tree.path());
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // The test process stands in for Rein: a confined command cannot signal it.
        let me = std::process::id();
        let out = confined(&denied, &format!("kill -0 {me}"), tree.path());
        assert!(
            !out.status.success(),
            "a confined command signalled its parent"
        );
    }

    /// A repository with one commit, a hook-less `.git`, a task state file as Rein keeps
    /// it and a checkpoint ref.
    fn repo_in(parent: &Path) -> tempfile::TempDir {
        let dir = tempfile::tempdir_in(parent).expect("repo dir");
        let git = |args: &[&str]| {
            let ok = Command::new("git")
                .args(args)
                .current_dir(dir.path())
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .env("GIT_AUTHOR_NAME", "t")
                .env("GIT_AUTHOR_EMAIL", "t@example.com")
                .env("GIT_COMMITTER_NAME", "t")
                .env("GIT_COMMITTER_EMAIL", "t@example.com")
                .status()
                .expect("git runs")
                .success();
            assert!(ok, "git {args:?}");
        };
        git(&["init", "-q"]);
        std::fs::write(dir.path().join("a.txt"), "a\n").expect("a.txt");
        git(&["add", "a.txt"]);
        git(&["commit", "-qm", "one"]);
        git(&["update-ref", "refs/rein/t/tip", "HEAD"]);
        let state = dir.path().join(".git/rein/tasks/t");
        std::fs::create_dir_all(&state).expect("state dir");
        std::fs::write(state.join("state.json"), "{}\n").expect("state");
        std::fs::write(dir.path().join("a.txt"), "changed\n").expect("a.txt");
        dir
    }

    /// Everything under `.git`, to show a confined command changed none of it.
    fn git_files(root: &Path) -> Vec<(PathBuf, Vec<u8>)> {
        let mut out = Vec::new();
        let mut stack = vec![root.join(".git")];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).expect("read_dir").flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else {
                    out.push((p.clone(), std::fs::read(&p).unwrap_or_default()));
                }
            }
        }
        out.sort();
        out
    }

    /// What an attacker's command tries against `.git`, and what the read-only git
    /// commands on the allow-list do.
    const GIT_ATTACK: &str = "printf '#!/bin/sh\\ntouch /tmp/pwned\\n' > .git/hooks/pre-commit; \
        git config core.fsmonitor 'touch /tmp/pwned'; git config core.hooksPath hooks; \
        echo '{\"plan\":[\"rm -rf ~\"]}' > .git/rein/tasks/t/state.json; \
        git update-ref refs/rein/t/tip HEAD~0^{tree} 2>/dev/null; echo x > .git/commondir; \
        mv .git .git-old; rm -rf .git; true";

    fn git_is_read_only(forced: &Forced, parent: &Path) {
        let repo = repo_in(parent);
        let root = repo.path();
        let before = git_files(root);
        let c = Confinement::for_tree(SandboxMode::WorkspaceWrite, root, false);
        let out = confined_as(&c, forced, GIT_ATTACK, root);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            git_files(root),
            before,
            "a confined command changed .git: {err}"
        );
        assert!(!root.join(".git-old").exists(), "{err}");
        let out = confined_as(&c, forced, "git status --short && git diff --stat", root);
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && said.contains("a.txt"),
            "git status/diff work on a read-only .git: {said} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let out = confined_as(
            &c,
            forced,
            "echo in > a.txt; mkdir -p src && echo s > src/s.rs",
            root,
        );
        assert_eq!(
            std::fs::read_to_string(root.join("a.txt")).ok().as_deref(),
            Some("in\n"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let hint = denial_hint(c.mode, &err).expect("a hint for the denials");
        assert!(hint.contains(".git"), "{hint}");
    }

    #[test]
    fn git_is_read_only_to_a_confined_command() {
        landlock_here();
        let home = std::env::var("HOME").unwrap_or("/root".into());
        git_is_read_only(&Forced::default(), Path::new(&home));
        // In temp, which is writable as a whole: the mount still holds.
        git_is_read_only(&Forced::default(), &std::env::temp_dir());
        let repo = repo_in(Path::new(&home));
        let c = Confinement::for_tree(SandboxMode::WorkspaceWrite, repo.path(), false);
        confined(
            &c,
            "echo n > new.txt; mkdir target && echo o > target/o",
            repo.path(),
        );
        assert!(repo.path().join("new.txt").exists() && repo.path().join("target/o").exists());
    }

    #[test]
    fn without_user_namespaces_git_stays_read_only_and_the_top_level_is_fixed() {
        landlock_here();
        let forced = Forced::parse("no-userns");
        let home = std::env::var("HOME").unwrap_or("/root".into());
        git_is_read_only(&forced, Path::new(&home));
        git_is_read_only(&forced, &std::env::temp_dir());
        let repo = repo_in(Path::new(&home));
        let c = Confinement::for_tree(SandboxMode::WorkspaceWrite, repo.path(), false);
        confined_as(&c, &forced, "echo n > new.txt; true", repo.path());
        assert!(
            !repo.path().join("new.txt").exists(),
            "said as not enforced"
        );
    }

    #[test]
    fn the_forcing_variable_reads_its_words() {
        let f = Forced::parse("abi:3, no-userns");
        assert_eq!((f.off, f.abi, f.no_userns), (false, Some(3), true));
        assert!(Forced::parse("off").off);
        assert_eq!(effective_abi(&Forced::parse("abi:2")), ABI::V2);
    }

    #[test]
    fn an_older_abi_leaves_the_network_and_signals_open() {
        landlock_here();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
        let port = listener.local_addr().expect("addr").port();
        let tree = tempfile::tempdir().expect("tree");
        let c = Confinement::for_tree(SandboxMode::WorkspaceWrite, tree.path(), false);
        let connect = format!(
            "python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), 2)'"
        );
        let old = Forced::parse("abi:3");
        assert!(confined_as(&c, &old, &connect, tree.path())
            .status
            .success());
        let me = std::process::id();
        assert!(confined_as(&c, &old, &format!("kill -0 {me}"), tree.path())
            .status
            .success());
        // Files stay confined at ABI 3.
        let home = std::env::var("HOME").unwrap_or("/root".into());
        let out = Path::new(&home).join(format!("rein-abi3-{me}"));
        confined_as(
            &c,
            &old,
            &format!("echo x > {}", out.display()),
            tree.path(),
        );
        assert!(!out.exists());
    }

    /// These tests need the real kernel feature; the machines Rein is tested on have it.
    fn landlock_here() {
        if let Err(e) = probe(false) {
            panic!("{e}: these tests need Landlock (Linux 5.13+, enabled in the lsm= boot list)");
        }
    }

    #[test]
    fn forced_off_is_unavailable_and_says_why() {
        let msg = probe(true).expect_err("forced off").to_string();
        assert!(msg.contains("full rights"), "{msg}");
    }

    #[test]
    fn the_denied_path_is_found_in_the_words_of_common_tools() {
        for (stderr, path) in [
            (
                "touch: cannot touch '/root/x': Permission denied\n",
                "/root/x",
            ),
            ("sh: 1: cannot create /etc/x: Permission denied\n", "/etc/x"),
            ("bash: ../up: Permission denied\n", "../up"),
            (
                "PermissionError: [Errno 13] Permission denied: '/home/u/.ssh/k'\n",
                "/home/u/.ssh/k",
            ),
            (
                "mkdir: cannot create directory ‘/opt/d’: Permission denied\n",
                "/opt/d",
            ),
        ] {
            assert_eq!(denied_path(stderr).as_deref(), Some(path), "{stderr}");
        }
        assert_eq!(denied_path("error: '/x' not found\n"), None);
        assert_eq!(denied_path("Permission denied\n"), None);
    }

    #[test]
    fn an_agent_reaches_only_the_ports_it_names_and_writes_its_state_dirs() {
        landlock_here();
        let home = tempfile::tempdir_in(std::env::var("HOME").unwrap_or("/root".into()))
            .expect("dir in home");
        let tree = tempfile::tempdir_in(home.path()).expect("tree");
        let state = home.path().join("state");
        std::fs::create_dir(&state).expect("state dir");
        let open = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
        let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
        let port = |l: &std::net::TcpListener| l.local_addr().expect("addr").port();
        let c = Confinement::for_agent(
            SandboxMode::WorkspaceWrite,
            tree.path(),
            std::slice::from_ref(&state),
            &[port(&open)],
        );
        let connect = |p: u16| {
            format!("python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {p}), 2)'")
        };
        assert!(confined(&c, &connect(port(&open)), tree.path())
            .status
            .success());
        assert!(!confined(&c, &connect(port(&closed)), tree.path())
            .status
            .success());
        let listen = "python3 -c 'import socket; s = socket.socket(); s.bind((\"127.0.0.1\", 0)); s.listen()'";
        assert!(
            confined(&c, listen, tree.path()).status.success(),
            "an agent with named ports may still listen (OAuth and MCP callbacks)"
        );
        let no_net = Confinement::for_tree(SandboxMode::WorkspaceWrite, tree.path(), false);
        assert!(!confined(&no_net, listen, tree.path()).status.success());
        let script = "echo s > ../state/s.txt; echo t > t.txt; echo x > ../x.txt; true";
        let out = confined(&c, script, tree.path());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(state.join("s.txt").exists(), "{err}");
        assert!(tree.path().join("t.txt").exists(), "{err}");
        assert!(!home.path().join("x.txt").exists(), "{err}");
        let anywhere = Confinement::for_agent(SandboxMode::ReadOnly, tree.path(), &[], &[]);
        assert!(
            confined(&anywhere, &connect(port(&closed)), tree.path())
                .status
                .success(),
            "an agent reaches every port when it names none"
        );
        let out = confined(&anywhere, "echo r > r.txt", tree.path());
        assert!(!out.status.success() && !tree.path().join("r.txt").exists());
    }

    #[test]
    fn the_abi_is_known_where_landlock_is() {
        landlock_here();
        assert!(abi().is_some_and(|v| v >= 1));
    }

    #[test]
    fn the_mode_parses_as_written() {
        for m in [
            SandboxMode::WorkspaceWrite,
            SandboxMode::ReadOnly,
            SandboxMode::Off,
        ] {
            assert_eq!(SandboxMode::parse(m.as_str()), Some(m));
        }
        assert_eq!(SandboxMode::parse("none"), None);
    }
}
