//! `Process`: one shell command in its own process group, frozen, resumed and killed as a whole.
//!
//! The command's shell leads a new process group, so a signal to the group reaches every
//! child it forks. When the shell exits, whatever it left running in the group is killed:
//! a command is over when its shell is, and nothing it started may outlive Rein's control.
//! Processes that leave the group on purpose (`setsid`, job control) escape this.

use std::os::unix::process::ExitStatusExt as _;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt as _};
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;
use tokio::time::{timeout_at, Instant};

use super::{Confinement, ExecError, Tap};

/// How many bytes of each of stdout and stderr are kept (the last ones).
pub const OUTPUT_CAP: usize = 64 * 1024;

/// After the group is dead, how long to wait for the output pipes to close. Only a process
/// that left the group while holding a pipe can keep them open this long.
const DRAIN_GRACE: Duration = Duration::from_secs(5);

/// How a finished command ended and what it printed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    /// Exit code, when the shell exited normally.
    pub code: Option<i32>,
    /// Signal number, when the shell was killed by a signal.
    pub signal: Option<i32>,
    /// Standard output, lossy UTF-8, the last `OUTPUT_CAP` bytes with a note if cut.
    pub stdout: String,
    /// Standard error, lossy UTF-8, the last `OUTPUT_CAP` bytes with a note if cut.
    pub stderr: String,
    /// Whether `terminate` ended the command (rather than it exiting by itself).
    pub killed: bool,
}

/// A command running in its own process group.
#[derive(Debug)]
pub struct Process {
    pid: u32,
    child: Child,
    /// Set once the shell is reaped; from then on the group is never signalled again except
    /// by the sweep right after, because its id may eventually be reused.
    status: Option<ExitStatus>,
    /// `None` for a terminal, whose one merged stream its owner reads.
    stdout: Option<Capture>,
    stderr: Option<Capture>,
    killed: bool,
    /// When `terminate` escalates from SIGTERM to SIGKILL; kept so a cancelled call resumes.
    kill_at: Option<Instant>,
    /// When output draining gives up; kept so a cancelled `wait` does not restart the clock.
    drain_until: Option<Instant>,
}

impl Process {
    /// Starts `sh -c cmd` in `cwd` with stdin closed, in a new process group, capturing output.
    /// Must be called inside a tokio runtime.
    pub fn spawn(cwd: &Path, cmd: &str) -> Result<Self, ExecError> {
        Self::spawn_tagged(cwd, cmd, None, None, None)
    }

    /// `spawn`, with `tag` in the command's environment as `REIN_TASK`, inherited by all it
    /// starts, so `end_tagged` can find them after a crash of the process that started them;
    /// inside `confine`'s sandbox when given; and its output, both streams as they are read,
    /// also into `tap` for whoever shows it live.
    pub fn spawn_tagged(
        cwd: &Path,
        cmd: &str,
        tag: Option<&str>,
        confine: Option<&Confinement>,
        tap: Option<&Tap>,
    ) -> Result<Self, ExecError> {
        let mut child = Self::command(cwd, cmd, tag, confine, Stdio::piped(), Stdio::piped())?;
        let stdout = Capture::start(
            child.stdout.take().expect("stdout was piped above"),
            tap.cloned(),
        );
        let stderr = Capture::start(
            child.stderr.take().expect("stderr was piped above"),
            tap.cloned(),
        );
        Ok(Self::new(child, Some(stdout), Some(stderr)))
    }

    /// `spawn_tagged` as a terminal has it: stdout and stderr go, interleaved as written, to
    /// the one pipe returned, which the caller reads; `wait` reports no output.
    pub fn spawn_merged(
        cwd: &Path,
        cmd: &str,
        tag: Option<&str>,
        confine: Option<&Confinement>,
    ) -> Result<(Self, std::io::PipeReader), ExecError> {
        let spawn_error = |source| ExecError::Spawn {
            cmd: cmd.to_owned(),
            source,
        };
        let (reader, writer) = std::io::pipe().map_err(spawn_error)?;
        let writer2 = writer.try_clone().map_err(spawn_error)?;
        let child = Self::command(cwd, cmd, tag, confine, writer.into(), writer2.into())?;
        // The write ends now live only in the child (the Command held the copies), so the
        // reader sees end of file once every process of the command has closed them.
        Ok((Self::new(child, None, None), reader))
    }

    fn command(
        cwd: &Path,
        cmd: &str,
        tag: Option<&str>,
        confine: Option<&Confinement>,
        stdout: Stdio,
        stderr: Stdio,
    ) -> Result<Child, ExecError> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(ExecError::NoRuntime {
                cmd: cmd.to_owned(),
            });
        }
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(cmd)
            .current_dir(cwd)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .process_group(0);
        if let Some(tag) = tag {
            command.env(TAG_VAR, tag);
        }
        if let Some(c) = confine {
            c.apply(&mut command).map_err(|e| ExecError::Confine {
                cmd: cmd.to_owned(),
                why: e.to_string(),
            })?;
        }
        command.spawn().map_err(|source| match confine {
            // `sh` missing is NotFound; anything else failed on the way into the sandbox
            // (the read-only mount or the Landlock domain), in the child before exec.
            Some(_) if source.kind() != std::io::ErrorKind::NotFound => ExecError::Confine {
                cmd: cmd.to_owned(),
                why: format!("entering the sandbox failed: {source}"),
            },
            _ => ExecError::Spawn {
                cmd: cmd.to_owned(),
                source,
            },
        })
    }

    fn new(child: Child, stdout: Option<Capture>, stderr: Option<Capture>) -> Self {
        let pid = child
            .id()
            .expect("a child that has not been waited for still has its pid");
        Self {
            pid,
            child,
            status: None,
            stdout,
            stderr,
            killed: false,
            kill_at: None,
            drain_until: None,
        }
    }

    /// The shell's process id, which is also the process group id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Stops every process in the group (SIGSTOP); does nothing once the command has ended.
    /// A shell caught in the middle of `vfork` shows state `D` rather than `T`, but runs no
    /// code until thawed.
    pub fn freeze(&self) -> Result<(), ExecError> {
        self.signal_live(Signal::SIGSTOP)
    }

    /// Resumes every process in the group (SIGCONT); does nothing once the command has ended.
    pub fn thaw(&self) -> Result<(), ExecError> {
        self.signal_live(Signal::SIGCONT)
    }

    /// Waits for the command to end and returns its output. Cancel-safe: dropping the future
    /// and calling again later loses nothing, and calling after the end returns the same output.
    pub async fn wait(&mut self) -> Result<Output, ExecError> {
        let status = match self.status {
            Some(status) => status,
            None => {
                let status = self.child.wait().await.map_err(|source| ExecError::Wait {
                    pid: self.pid,
                    source,
                })?;
                self.reaped(status);
                status
            }
        };
        let until = *self
            .drain_until
            .get_or_insert_with(|| Instant::now() + DRAIN_GRACE);
        let stdout = match &mut self.stdout {
            Some(c) => c.finish(until).await,
            None => String::new(),
        };
        let stderr = match &mut self.stderr {
            Some(c) => c.finish(until).await,
            None => String::new(),
        };
        Ok(Output {
            code: status.code(),
            signal: status.signal(),
            stdout,
            stderr,
            killed: self.killed,
        })
    }

    /// Ends the command: SIGTERM and then SIGCONT (in case it is frozen) to the group, SIGKILL to
    /// the group if the shell has not exited after `grace`, then reaps it. Cancel-safe.
    pub async fn terminate(&mut self, grace: Duration) -> Result<Output, ExecError> {
        if self.status.is_none() {
            let kill_at = match self.kill_at {
                Some(at) => at,
                None => {
                    // TERM before CONT: a frozen group wakes with the TERM already pending,
                    // so nothing it runs gets a moment to act on the thaw (a sleep whose
                    // deadline passed while frozen would otherwise run its next command).
                    self.signal_group(Signal::SIGTERM)?;
                    self.signal_group(Signal::SIGCONT)?;
                    self.killed = true;
                    *self.kill_at.insert(Instant::now() + grace)
                }
            };
            if timeout_at(kill_at, self.child.wait()).await.is_err() {
                self.signal_group(Signal::SIGKILL)?;
            }
        }
        self.wait().await
    }

    /// Records the shell's exit and kills whatever it left behind in its group.
    fn reaped(&mut self, status: ExitStatus) {
        self.status = Some(status);
        // No await separates reaping from this sweep, so the group id cannot have been
        // reused yet: either stragglers still hold it or the group is empty (ESRCH).
        if let Err(e) = self.signal_group(Signal::SIGKILL) {
            tracing::warn!(pid = self.pid, error = %e, "could not kill leftovers of a finished command");
        }
        // With Rein a subreaper, what commands left behind in other sessions comes back to
        // Rein when it dies; reap those zombies now and then (here: as each command ends).
        super::tree::reap_orphans();
    }

    fn signal_live(&self, signal: Signal) -> Result<(), ExecError> {
        if self.status.is_some() {
            return Ok(());
        }
        self.signal_group(signal)
    }

    /// Signals the group; a group that no longer exists has nothing left to signal.
    fn signal_group(&self, signal: Signal) -> Result<(), ExecError> {
        let pgid = self.pgid();
        match killpg(Pid::from_raw(pgid), signal) {
            Ok(()) | Err(Errno::ESRCH) => Ok(()),
            Err(e) => Err(ExecError::Signal(pgid, signal, e)),
        }
    }

    fn pgid(&self) -> i32 {
        // The OS hands out pids as pid_t (i32) and never above pid_max (at most 2^22), so
        // the u32 std reports converts back losslessly.
        self.pid as i32
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if self.status.is_none() {
            // Tokio reaps the dropped child in the background; the group must die first so
            // no orphan outlives the engine.
            if let Err(e) = self.signal_group(Signal::SIGKILL) {
                tracing::warn!(pid = self.pid, error = %e, "could not kill a dropped command");
            }
        }
        for c in [&mut self.stdout, &mut self.stderr].into_iter().flatten() {
            c.abandon();
        }
    }
}

/// One output stream, read by a background task into a shared tail buffer.
#[derive(Debug)]
struct Capture {
    tail: Arc<Mutex<Tail>>,
    task: Option<JoinHandle<()>>,
    text: Option<String>,
}

impl Capture {
    fn start(pipe: impl AsyncRead + Unpin + Send + 'static, tap: Option<Tap>) -> Self {
        let tail = Arc::new(Mutex::new(Tail::default()));
        let task = tokio::spawn(read_into(pipe, Arc::clone(&tail), tap));
        Self {
            tail,
            task: Some(task),
            text: None,
        }
    }

    /// Waits (until `until` at most) for the stream to close and renders it. Cancel-safe.
    async fn finish(&mut self, until: Instant) -> String {
        if let Some(text) = &self.text {
            return text.clone();
        }
        if let Some(task) = self.task.as_mut() {
            match timeout_at(until, &mut *task).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => lock(&self.tail).note(&format!("output capture failed: {e}")),
                Err(_) => {
                    task.abort();
                    lock(&self.tail).note(
                        "output capture stopped: a process outside the command's group kept the pipe open",
                    );
                }
            }
            self.task = None;
        }
        let text = lock(&self.tail).render();
        self.text = Some(text.clone());
        text
    }

    fn abandon(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

fn lock(tail: &Mutex<Tail>) -> std::sync::MutexGuard<'_, Tail> {
    // A panic while holding the lock leaves at worst a partial buffer, still worth showing.
    tail.lock().unwrap_or_else(PoisonError::into_inner)
}

async fn read_into(mut pipe: impl AsyncRead + Unpin, tail: Arc<Mutex<Tail>>, tap: Option<Tap>) {
    let mut buf = vec![0u8; 8192];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) => return,
            Ok(n) => {
                lock(&tail).push(&buf[..n]);
                if let Some(tap) = &tap {
                    tap.push(&buf[..n]);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                lock(&tail).note(&format!("reading output failed: {e}"));
                return;
            }
        }
    }
}

/// The last `OUTPUT_CAP` bytes of a stream, and how many came before them.
#[derive(Debug, Default)]
struct Tail {
    kept: Vec<u8>,
    dropped: u64,
    notes: Vec<String>,
}

impl Tail {
    fn push(&mut self, bytes: &[u8]) {
        self.kept.extend_from_slice(bytes);
        // Trim only when twice over the cap, so trimming costs amortized O(1) per byte.
        if self.kept.len() > 2 * OUTPUT_CAP {
            self.trim();
        }
    }

    fn trim(&mut self) {
        let excess = self.kept.len().saturating_sub(OUTPUT_CAP);
        self.kept.drain(..excess);
        self.dropped += excess as u64;
    }

    fn note(&mut self, note: &str) {
        self.notes.push(note.to_owned());
    }

    fn render(&mut self) -> String {
        self.trim();
        let mut start = 0;
        if self.dropped > 0 {
            // Do not begin mid-character: skip UTF-8 continuation bytes left by the cut.
            while start < self.kept.len().min(3) && self.kept[start] & 0xC0 == 0x80 {
                start += 1;
            }
        }
        let dropped = self.dropped + start as u64;
        let mut text = String::new();
        if dropped > 0 {
            text.push_str(&format!(
                "[rein: output truncated; the first {dropped} bytes were dropped]\n"
            ));
        }
        text.push_str(&String::from_utf8_lossy(&self.kept[start..]));
        for note in &self.notes {
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(&format!("[rein: {note}]\n"));
        }
        text
    }
}

/// The environment variable that tags a command with the task that started it.
pub const TAG_VAR: &str = "REIN_TASK";

/// Kills every process group whose processes carry `REIN_TASK=<tag>`: commands a crashed
/// Rein started for that task and that would otherwise go on writing into the tree. Only
/// processes Rein tagged are touched. Returns the groups ended.
pub fn end_tagged(tag: &str) -> Vec<i32> {
    let needle = format!("{TAG_VAR}={tag}");
    let mut groups = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return groups;
    };
    for entry in entries.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let tagged = std::fs::read(format!("/proc/{pid}/environ"))
            .is_ok_and(|env| env.split(|b| *b == 0).any(|v| v == needle.as_bytes()));
        if !tagged {
            continue;
        }
        if let Ok(group) = nix::unistd::getpgid(Some(nix::unistd::Pid::from_raw(pid))) {
            if !groups.contains(&group.as_raw()) {
                groups.push(group.as_raw());
            }
        }
    }
    for g in &groups {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(*g),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    /// Generous bound for anything a test waits for; only hit when something is broken.
    const PATIENCE: Duration = Duration::from_secs(30);

    /// The state letter of a process from /proc/<pid>/stat, or `None` once it is gone.
    fn state(pid: u32) -> Option<char> {
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The command name is parenthesized and may contain spaces; the state follows it.
        let after = &stat[stat.rfind(')')? + 1..];
        after.trim_start().chars().next()
    }

    /// Pids of the live (non-zombie) processes whose process group is `pgid`.
    fn group_members(pgid: u32) -> Vec<u32> {
        let mut pids = Vec::new();
        for entry in fs::read_dir("/proc").expect("/proc") {
            let Ok(entry) = entry else { continue };
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            let Some(close) = stat.rfind(')') else {
                continue;
            };
            let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
            if fields.get(2) == Some(&pgid.to_string().as_str()) && fields.first() != Some(&"Z") {
                pids.push(pid);
            }
        }
        pids
    }

    fn comm(pid: u32) -> String {
        fs::read_to_string(format!("/proc/{pid}/comm"))
            .unwrap_or_default()
            .trim_end()
            .to_owned()
    }

    fn is_dead(pid: u32) -> bool {
        matches!(state(pid), None | Some('Z') | Some('X'))
    }

    async fn poll_until(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + PATIENCE;
        while !done() {
            assert!(Instant::now() < deadline, "gave up waiting until {what}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test]
    async fn captures_output_and_exit_code() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut p =
            Process::spawn(dir.path(), "echo out; echo err >&2; pwd; exit 3").expect("spawn");
        let out = p.wait().await.expect("wait");
        let cwd = dir.path().canonicalize().expect("canonicalize");
        assert_eq!(out.stdout, format!("out\n{}\n", cwd.display()));
        assert_eq!(out.stderr, "err\n");
        assert_eq!(out.code, Some(3));
        assert_eq!(out.signal, None);
        assert!(!out.killed);
        assert_eq!(p.wait().await.expect("wait again"), out);
    }

    #[tokio::test]
    async fn reports_death_by_signal() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut p = Process::spawn(dir.path(), "kill -9 $$").expect("spawn");
        let out = p.wait().await.expect("wait");
        assert_eq!(out.code, None);
        assert_eq!(out.signal, Some(9));
    }

    #[tokio::test]
    async fn keeps_only_the_tail_of_long_output() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut p =
            Process::spawn(dir.path(), "yes abc | head -c 300000; printf END").expect("spawn");
        let out = p.wait().await.expect("wait");
        assert!(out.stdout.starts_with("[rein: output truncated"));
        assert!(out.stdout.ends_with("END"));
        let body = out.stdout.split_once('\n').expect("note line").1;
        assert_eq!(body.len(), OUTPUT_CAP);
    }

    #[test]
    fn tail_does_not_start_mid_character() {
        let mut tail = Tail::default();
        // 2 * OUTPUT_CAP + 1 bytes: keeping the last OUTPUT_CAP cuts an `é` in half.
        tail.push("é".repeat(OUTPUT_CAP).as_bytes());
        tail.push(b"x");
        let text = tail.render();
        let (note, body) = text.split_once('\n').expect("note line");
        let want = format!(
            "[rein: output truncated; the first {} bytes were dropped]",
            OUTPUT_CAP + 2
        );
        assert_eq!(note, want);
        assert!(!body.contains('\u{FFFD}'));
        assert_eq!(body, format!("{}x", "é".repeat((OUTPUT_CAP - 2) / 2)));
    }

    #[tokio::test]
    async fn missing_directory_is_a_spawn_error() {
        let result = Process::spawn(Path::new("/nonexistent/rein/dir"), "true");
        assert!(matches!(result, Err(ExecError::Spawn { .. })));
    }

    #[test]
    fn spawn_outside_a_runtime_is_an_error() {
        let result = Process::spawn(Path::new("/"), "true");
        assert!(matches!(result, Err(ExecError::NoRuntime { .. })));
    }

    #[tokio::test]
    async fn freeze_stops_the_group_and_thaw_resumes_it() {
        let dir = tempfile::tempdir().expect("temp dir");
        // The loop runs in an inner shell so the leader sits in `wait` while it runs: a shell
        // stopped in the middle of vfork shows state `D`, not `T`, until it is thawed.
        let mut p = Process::spawn(
            dir.path(),
            "echo begin; sh -c 'while [ ! -e go ]; do sleep 0.05; done'; echo finished",
        )
        .expect("spawn");
        let pid = p.pid();
        poll_until("the inner loop runs", || {
            group_members(pid).into_iter().any(|m| comm(m) == "sleep")
        })
        .await;
        p.freeze().expect("freeze");
        poll_until("the shell is stopped", || state(pid) == Some('T')).await;
        fs::write(dir.path().join("go"), "").expect("create go");
        // Stopped processes cannot notice the file or exit.
        assert_eq!(state(pid), Some('T'));
        p.thaw().expect("thaw");
        let out = tokio::time::timeout(PATIENCE, p.wait())
            .await
            .expect("finishes after thaw")
            .expect("wait");
        assert_eq!(out.stdout, "begin\nfinished\n");
        assert_eq!(out.code, Some(0));
        assert!(!out.killed);
        p.freeze().expect("freezing a finished command is a no-op");
        p.thaw().expect("thawing a finished command is a no-op");
    }

    #[tokio::test]
    async fn terminate_kills_a_group_that_ignores_sigterm() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut p = Process::spawn(dir.path(), "trap '' TERM; sleep 1000 & sleep 1000; wait")
            .expect("spawn");
        let pgid = p.pid();
        poll_until("the shell and both sleeps run", || {
            group_members(pgid).len() >= 3
        })
        .await;
        let members = group_members(pgid);
        p.freeze().expect("freeze");
        let out = tokio::time::timeout(PATIENCE, p.terminate(Duration::from_millis(100)))
            .await
            .expect("terminate returns")
            .expect("terminate");
        assert!(out.killed);
        assert_eq!(out.signal, Some(9));
        poll_until("every member is gone", || {
            members.iter().all(|pid| is_dead(*pid)) && group_members(pgid).is_empty()
        })
        .await;
    }

    #[tokio::test]
    async fn terminate_after_exit_returns_the_same_output() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut p = Process::spawn(dir.path(), "echo done").expect("spawn");
        let out = p.wait().await.expect("wait");
        let again = p
            .terminate(Duration::from_millis(10))
            .await
            .expect("terminate");
        assert_eq!(again, out);
        assert!(!again.killed);
    }

    #[tokio::test]
    async fn wait_is_cancel_safe() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut p = Process::spawn(
            dir.path(),
            "echo start; echo oops >&2; while [ ! -e go ]; do sleep 0.05; done; echo end",
        )
        .expect("spawn");
        // The command cannot finish before `go` exists, so these waits are always cut short.
        for _ in 0..3 {
            let early = tokio::time::timeout(Duration::from_millis(20), p.wait()).await;
            assert!(early.is_err(), "finished before it was allowed to");
        }
        fs::write(dir.path().join("go"), "").expect("create go");
        let out = tokio::time::timeout(PATIENCE, p.wait())
            .await
            .expect("finishes")
            .expect("wait");
        assert_eq!(out.stdout, "start\nend\n");
        assert_eq!(out.stderr, "oops\n");
        assert_eq!(out.code, Some(0));
    }

    #[tokio::test]
    async fn terminate_is_cancel_safe() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut p =
            Process::spawn(dir.path(), "trap '' TERM; echo ready; sleep 1000").expect("spawn");
        let pgid = p.pid();
        poll_until("the sleep runs", || group_members(pgid).len() >= 2).await;
        // A huge grace means this call can only be cut short by the timeout.
        let early = tokio::time::timeout(
            Duration::from_millis(20),
            p.terminate(Duration::from_secs(3600)),
        )
        .await;
        assert!(early.is_err());
        p.signal_group(Signal::SIGKILL).expect("kill");
        let out = tokio::time::timeout(PATIENCE, p.terminate(Duration::from_secs(3600)))
            .await
            .expect("terminate returns")
            .expect("terminate");
        assert!(out.killed);
        assert_eq!(out.stdout, "ready\n");
    }

    #[tokio::test]
    async fn leftovers_are_killed_when_the_shell_exits() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut p = Process::spawn(dir.path(), "sleep 1000 & echo $!").expect("spawn");
        let out = tokio::time::timeout(PATIENCE, p.wait())
            .await
            .expect("wait does not hang on the background sleep")
            .expect("wait");
        assert_eq!(out.code, Some(0));
        let bg: u32 = out.stdout.trim().parse().expect("background pid");
        poll_until("the background sleep is gone", || is_dead(bg)).await;
    }

    #[tokio::test]
    async fn drop_kills_the_group() {
        let dir = tempfile::tempdir().expect("temp dir");
        let p = Process::spawn(dir.path(), "sleep 1000 & sleep 1000; wait").expect("spawn");
        let pgid = p.pid();
        poll_until("both sleeps run", || group_members(pgid).len() >= 3).await;
        let members = group_members(pgid);
        drop(p);
        poll_until("every member is gone", || {
            members.iter().all(|pid| is_dead(*pid))
        })
        .await;
    }
}
