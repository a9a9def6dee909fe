//! What a command Rein starts may touch: a Landlock domain entered between fork and exec.
//!
//! The policy decides *whether* a command runs; this decides *what it can reach*. In the
//! default `workspace-write` mode a command reads anything, writes only in the working tree,
//! the repository's git directory, the system temp dir and a few device files, cannot open a
//! TCP connection or listen (unless its rule allows network), and cannot signal or reach by
//! abstract socket a process outside its domain — Rein and the editor included.
//!
//! An ACP agent process gets a domain of its own (`Confinement::for_agent`): the same, plus
//! the directories where its harness keeps its state, and the network (it needs its model
//! API), optionally only some TCP ports.
//!
//! Landlock rules only add access, so a subtree of a writable directory cannot be taken back
//! out: the tree's `.git` stays writable with the tree. The ruleset is built in the parent
//! (it opens the allowed paths and allocates); the child only calls `restrict_self`, which
//! makes two system calls and allocates nothing, as code between fork and exec must.

use std::path::{Path, PathBuf};

use landlock::{
    path_beneath_rules, Access, AccessFs, AccessNet, CompatLevel, Compatible, NetPort, Ruleset,
    RulesetAttr, RulesetCreated, RulesetCreatedAttr, Scope, ABI,
};
use serde::{Deserialize, Serialize};

/// The newest Landlock ABI whose rights Rein has vetted; newer kernels get these rights.
const VETTED: ABI = ABI::V6;

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

/// Set to `off` to behave as if the kernel had no Landlock (to see and test the fallback).
pub const FORCE_VAR: &str = "REIN_LANDLOCK";

/// How confined the commands Rein runs are (`sandbox` in `rein.toml` and the settings).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxMode {
    /// Write only in the working tree, its git directory and temp; no network unless allowed.
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
}

/// What one command may touch.
#[derive(Debug, Clone)]
pub struct Confinement {
    /// The mode in force.
    pub mode: SandboxMode,
    /// Directories (and files) the command may write beneath, besides temp and devices.
    pub writable: Vec<PathBuf>,
    /// Whether the command may connect and bind TCP ports.
    pub network: bool,
    /// With `network`, the only TCP ports it may connect to (none listed: every port).
    pub ports: Vec<u16>,
    /// Whether file access is confined; false leaves files to a harness's own sandbox (a
    /// Landlock file domain forbids the mounts bubblewrap makes), and only the network and
    /// signals are.
    pub files: bool,
}

impl Confinement {
    /// The confinement of a command run in `root` (the working tree) under `mode`.
    pub fn for_tree(mode: SandboxMode, root: &Path, network: bool) -> Confinement {
        let mut writable = Vec::new();
        if mode == SandboxMode::WorkspaceWrite {
            writable.push(root.to_owned());
            // A worktree's or submodule's git directory lies outside the tree; the git
            // commands the policy allows (`git add`, `git commit`) need it.
            if let Ok(repo) = git2::Repository::open(root) {
                writable.push(repo.path().to_owned());
                writable.push(repo.commondir().to_owned());
            }
        }
        Confinement {
            mode,
            writable,
            network,
            ports: Vec::new(),
            files: true,
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

    /// Makes `command`'s child enter this domain between fork and exec (nothing when the
    /// mode is `off`).
    pub fn apply(&self, command: &mut tokio::process::Command) -> Result<(), ConfineError> {
        let mut rules = self.ruleset()?;
        if rules.is_some() {
            // SAFETY: between fork and exec the child only calls `restrict_self`, which makes
            // two system calls (prctl, landlock_restrict_self) and allocates nothing.
            unsafe {
                command.pre_exec(move || match rules.take() {
                    Some(r) => r
                        .restrict_self()
                        .map(|_| ())
                        .map_err(|_| std::io::Error::from_raw_os_error(nix::libc::EPERM)),
                    None => Ok(()),
                });
            }
        }
        Ok(())
    }

    /// The ruleset a child enters before exec, or `None` when the mode is `off`.
    pub fn ruleset(&self) -> Result<Option<RulesetCreated>, ConfineError> {
        if self.mode == SandboxMode::Off {
            return Ok(None);
        }
        available()?;
        let all = AccessFs::from_all(VETTED);
        let mut rules = Ruleset::default();
        if self.files {
            // Without the first ABI's rights there is no sandbox at all: say so, never run
            // "confined" in name only.
            rules = rules
                .set_compatibility(CompatLevel::HardRequirement)
                .handle_access(AccessFs::from_all(ABI::V1))?
                .set_compatibility(CompatLevel::BestEffort)
                .handle_access(all)?;
        }
        rules = rules
            .set_compatibility(CompatLevel::BestEffort)
            .scope(Scope::from_all(VETTED))?;
        if !self.network || !self.ports.is_empty() {
            rules = rules.handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)?;
        }
        let mut created = rules.create()?;
        if self.files {
            let mut writable: Vec<PathBuf> = self.writable.clone();
            writable.push(std::env::temp_dir());
            writable.push(PathBuf::from("/tmp"));
            writable.push(PathBuf::from("/var/tmp"));
            writable.extend(DEVICES.iter().map(PathBuf::from));
            // A rule needs the path opened; one that does not exist grants nothing anyway.
            writable.retain(|p| p.exists());
            created = created
                .add_rules(path_beneath_rules(["/"], AccessFs::from_read(VETTED)))?
                .add_rules(path_beneath_rules(writable, all))?;
        }
        if self.network {
            created = created.add_rules(self.ports.iter().map(|p| {
                Ok::<_, landlock::RulesetError>(NetPort::new(*p, AccessNet::ConnectTcp))
            }))?;
        }
        Ok(Some(created))
    }
}

/// Whether this kernel can confine commands.
pub fn available() -> Result<(), ConfineError> {
    probe(std::env::var(FORCE_VAR).is_ok_and(|v| v == "off"))
}

/// The Landlock ABI version the kernel offers, or `None` when it offers none (or it was
/// forced off).
pub fn abi() -> Option<i32> {
    available().ok()?;
    // SAFETY: with a null attribute and the VERSION flag the call only returns a number.
    let v = unsafe {
        nix::libc::syscall(
            nix::libc::SYS_landlock_create_ruleset,
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
        SandboxMode::WorkspaceWrite => "writes only in the working tree and temp, and no network",
        SandboxMode::ReadOnly => "writes only in temp, and no network",
        SandboxMode::Off => "",
    };
    Some(format!(
        "the command ran in Rein's sandbox (sandbox = \"{}\": {allowed}), which may have denied it. \
         To allow network for it, add it to policy.network; to widen or turn off the sandbox, set \
         sandbox in rein.toml (\"workspace-write\", \"read-only\" or \"off\")",
        mode.as_str()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt as _;
    use std::process::Command;

    fn confined(c: &Confinement, script: &str, cwd: &Path) -> std::process::Output {
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg(script).current_dir(cwd);
        let mut rules = c.ruleset().expect("ruleset");
        // SAFETY: restrict_self makes two system calls and allocates nothing.
        unsafe {
            cmd.pre_exec(move || match rules.take() {
                Some(r) => r
                    .restrict_self()
                    .map(|_| ())
                    .map_err(|_| std::io::Error::from_raw_os_error(1)),
                None => Ok(()),
            });
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
