//! `Terminals`: the commands an agent started in terminals of their own (ACP `terminal/*`),
//! running in the background while the agent goes on, each in its own process group.
//!
//! Starting one is the engine's (after the policy, as a step); the agent's side may read a
//! terminal's output, wait for it, kill and release it, never start one. The engine freezes
//! every running terminal on pause and ends them on takeover, abort and shutdown, so nothing
//! an agent left running changes the tree while the person holds it. Output is what the
//! command wrote to stdout and stderr, interleaved as written, kept up to the agent's byte
//! limit by dropping the oldest bytes at a character boundary.
//!
//! A confined command that fails as the sandbox denied it gets the hint at the end of its
//! output (the agent reads it there) and is queued for the engine, which tells the person
//! and asks whether to run it again without the sandbox.

use std::collections::HashMap;
use std::io::Read as _;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::sync::{mpsc, oneshot, watch};

use super::{denial_hint, denied_path, Confinement, ExecError, Process, SandboxMode, Tap};

/// The most output a terminal keeps when the agent names no limit.
pub const TERMINAL_OUTPUT_CAP: usize = 4 * 1024 * 1024;

/// After the command ended, how long its output may take to be read to the end.
const DRAIN_GRACE: Duration = Duration::from_secs(5);

/// How a terminal's command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit {
    /// Exit code, when the shell exited normally.
    pub code: Option<i32>,
    /// Signal number, when the shell was killed by a signal.
    pub signal: Option<i32>,
}

/// What a terminal holds right now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The output kept, as text.
    pub output: String,
    /// Whether older output was dropped to stay within the limit.
    pub truncated: bool,
    /// How the command ended, once it has.
    pub exit: Option<Exit>,
}

/// Why a terminal request could not be served.
#[derive(Debug, thiserror::Error)]
pub enum TerminalError {
    /// No terminal has this id (never started, or released).
    #[error("there is no terminal {0:?}; it was never created or has been released")]
    Unknown(String),
    /// Starting the command failed.
    #[error(transparent)]
    Start(#[from] ExecError),
}

/// The table of an engine's terminals; clones share it.
#[derive(Debug, Clone, Default)]
pub struct Terminals {
    inner: Arc<Mutex<Table>>,
}

#[derive(Debug, Default)]
struct Table {
    started: u64,
    open: HashMap<String, Entry>,
    /// Confined commands that ended as the sandbox denied them, not yet taken.
    denied: Vec<Denied>,
}

/// A terminal's command that failed as the sandbox denied it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied {
    /// The terminal.
    pub id: String,
    /// The command line.
    pub cmd: String,
    /// The mode it ran under.
    pub mode: SandboxMode,
    /// The hint added to its output.
    pub hint: String,
    /// The path it was denied, as it printed it, when it did.
    pub path: Option<String>,
    /// The output limit the agent asked for.
    pub limit: Option<usize>,
}

#[derive(Debug)]
struct Entry {
    cmd: String,
    out: Arc<Mutex<Buffer>>,
    exit: watch::Receiver<Option<Exit>>,
    /// The command's process group and its supervisor; `None` for one that ran to its end
    /// before it was entered here.
    live: Option<(i32, mpsc::UnboundedSender<Ctl>)>,
}

/// What only the supervisor does: ending takes an escalation it must wait out.
#[derive(Debug, Clone, Copy)]
enum Ctl {
    End,
}

impl Terminals {
    /// Starts `cmd` in `cwd` in a terminal of its own and returns its id at once. `limit`
    /// bounds the output kept; `grace` is how long an ended command has between SIGTERM and
    /// SIGKILL; `tap` gets the output as it comes and the end. Must be called inside a tokio
    /// runtime.
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        &self,
        cwd: &Path,
        cmd: &str,
        tag: Option<&str>,
        confine: Option<&Confinement>,
        limit: Option<usize>,
        grace: Duration,
        tap: Option<Tap>,
    ) -> Result<String, TerminalError> {
        let (proc, mut pipe) = Process::spawn_merged(cwd, cmd, tag, confine)?;
        let out = Arc::new(Mutex::new(Buffer::new(limit)));
        let id = self.next_id();
        let sink = Arc::clone(&out);
        let live = tap.clone();
        let (drained_tx, drained) = oneshot::channel();
        // A plain thread: the pipe is a blocking file, and a terminal lives as long as its
        // command, so one thread each costs little.
        let reader = std::thread::Builder::new()
            .name("rein-terminal".into())
            .spawn(move || {
                let mut buf = [0u8; 8192];
                loop {
                    match pipe.read(&mut buf) {
                        Ok(0) => break,
                        Ok(n) => {
                            lock(&sink).push(&buf[..n]);
                            if let Some(tap) = &live {
                                tap.push(&buf[..n]);
                            }
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(_) => break,
                    }
                }
                let _ = drained_tx.send(());
            });
        if let Err(e) = reader {
            tracing::warn!("cannot read the output of `{cmd}`: {e}");
        }
        let (ctl_tx, ctl_rx) = mpsc::unbounded_channel();
        let (exit_tx, exit_rx) = watch::channel(None);
        // pid_t fits: pids never exceed pid_max (at most 2^22).
        let pgid = proc.pid() as i32;
        let watch = confine.map(|c| Watch {
            table: Arc::clone(&self.inner),
            out: Arc::clone(&out),
            denied: Denied {
                id: id.clone(),
                cmd: cmd.to_owned(),
                mode: c.mode,
                hint: String::new(),
                path: None,
                limit,
            },
        });
        tokio::spawn(supervise(proc, ctl_rx, exit_tx, drained, grace, watch, tap));
        self.enter(&id, cmd, out, exit_rx, Some((pgid, ctl_tx)));
        Ok(id)
    }

    /// The confined commands that ended as the sandbox denied them since last asked.
    pub fn take_denied(&self) -> Vec<Denied> {
        std::mem::take(&mut lock(&self.inner).denied)
    }

    /// Enters a command that already ran to its end (one gated to run whole before the
    /// agent hears of it), so the agent reads it like any terminal.
    pub fn finished(&self, cmd: &str, output: &[u8], exit: Exit, limit: Option<usize>) -> String {
        let mut buffer = Buffer::new(limit);
        buffer.push(output);
        let (_, exit_rx) = watch::channel(Some(exit));
        let id = self.next_id();
        self.enter(&id, cmd, Arc::new(Mutex::new(buffer)), exit_rx, None);
        id
    }

    fn next_id(&self) -> String {
        let mut table = lock(&self.inner);
        table.started += 1;
        format!("rein-term-{}", table.started)
    }

    fn enter(
        &self,
        id: &str,
        cmd: &str,
        out: Arc<Mutex<Buffer>>,
        exit: watch::Receiver<Option<Exit>>,
        live: Option<(i32, mpsc::UnboundedSender<Ctl>)>,
    ) {
        lock(&self.inner).open.insert(
            id.to_owned(),
            Entry {
                cmd: cmd.to_owned(),
                out,
                exit,
                live,
            },
        );
    }

    /// The output so far and, once it ended, how.
    pub fn output(&self, id: &str) -> Result<Snapshot, TerminalError> {
        let table = lock(&self.inner);
        let e = table.entry(id)?;
        let exit = *e.exit.borrow();
        let (output, truncated) = lock(&e.out).text(exit.is_none());
        Ok(Snapshot {
            output,
            truncated,
            exit,
        })
    }

    /// A future that resolves when the command has ended (at once if it has).
    pub fn exited(
        &self,
        id: &str,
    ) -> Result<impl std::future::Future<Output = Option<Exit>> + Send + 'static, TerminalError>
    {
        let mut rx = lock(&self.inner).entry(id)?.exit.clone();
        Ok(async move {
            match rx.wait_for(Option::is_some).await {
                Ok(exit) => *exit,
                // The supervisor is gone without an exit: only when the runtime shuts down.
                Err(_) => None,
            }
        })
    }

    /// Ends the command (SIGTERM, then SIGKILL after the grace); its output stays readable.
    pub fn kill(&self, id: &str) -> Result<(), TerminalError> {
        let table = lock(&self.inner);
        table.entry(id)?.end();
        Ok(())
    }

    /// Ends the command if it still runs and forgets the terminal.
    pub fn release(&self, id: &str) -> Result<(), TerminalError> {
        let entry = lock(&self.inner)
            .open
            .remove(id)
            .ok_or_else(|| TerminalError::Unknown(id.to_owned()))?;
        entry.end();
        Ok(())
    }

    /// Freezes every running terminal (SIGSTOP to its group) before it returns, so nothing
    /// they run writes from here on.
    pub fn freeze_all(&self) {
        for e in lock(&self.inner).open.values() {
            e.signal(Signal::SIGSTOP);
        }
    }

    /// Thaws every frozen terminal.
    pub fn thaw_all(&self) {
        for e in lock(&self.inner).open.values() {
            e.signal(Signal::SIGCONT);
        }
    }

    /// Ends every running terminal: frozen at once, then ended by its supervisor (SIGTERM,
    /// SIGKILL after the grace); their output stays readable until released.
    pub fn end_all(&self) {
        for e in lock(&self.inner).open.values() {
            e.end();
        }
    }

    /// The commands still running, oldest first.
    pub fn running(&self) -> Vec<String> {
        let table = lock(&self.inner);
        let mut running: Vec<(&String, &Entry)> = table
            .open
            .iter()
            .filter(|(_, e)| e.exit.borrow().is_none())
            .collect();
        running.sort_by_key(|(id, _)| id.trim_start_matches("rein-term-").parse::<u64>().ok());
        running.into_iter().map(|(_, e)| e.cmd.clone()).collect()
    }
}

impl Table {
    fn entry(&self, id: &str) -> Result<&Entry, TerminalError> {
        self.open
            .get(id)
            .ok_or_else(|| TerminalError::Unknown(id.to_owned()))
    }
}

impl Entry {
    /// Signals the group while the command runs. Signalled here rather than by the
    /// supervisor so a pause has landed when the engine goes on. Its exit is published in
    /// the same poll that reaps the shell, so the group id could only have been handed out
    /// again if the pid space wrapped within that instant.
    fn signal(&self, signal: Signal) {
        let Some((pgid, _)) = &self.live else { return };
        if self.exit.borrow().is_some() {
            return;
        }
        match killpg(Pid::from_raw(*pgid), signal) {
            Ok(()) | Err(Errno::ESRCH) => {}
            Err(e) => tracing::warn!(pgid, "cannot send {signal} to a terminal: {e}"),
        }
    }

    fn end(&self) {
        self.signal(Signal::SIGSTOP);
        if let Some((_, tx)) = &self.live {
            // A closed channel means the command already ended: nothing to end.
            let _ = tx.send(Ctl::End);
        }
    }
}

/// Where a confined terminal's denial goes.
#[derive(Debug)]
struct Watch {
    table: Arc<Mutex<Table>>,
    out: Arc<Mutex<Buffer>>,
    denied: Denied,
}

impl Watch {
    /// After a failure: when it looks denied by the sandbox, the hint ends the output and
    /// the engine hears of it.
    fn failed(mut self) {
        let (text, _) = lock(&self.out).text(false);
        let Some(hint) = denial_hint(self.denied.mode, &text) else {
            return;
        };
        lock(&self.out).push(format!("\n{hint}\n").as_bytes());
        self.denied.path = denied_path(&text);
        self.denied.hint = hint;
        lock(&self.table).denied.push(self.denied);
    }
}

/// Owns the command until it ends, carrying out what the table asks.
async fn supervise(
    mut proc: Process,
    mut ctl: mpsc::UnboundedReceiver<Ctl>,
    exit: watch::Sender<Option<Exit>>,
    drained: oneshot::Receiver<()>,
    grace: Duration,
    watch: Option<Watch>,
    tap: Option<Tap>,
) {
    let mut ended_by_rein = false;
    let out = tokio::select! {
        out = proc.wait() => out,
        // Told to end, or the table dropped it (the engine is gone): the command must not
        // outlive it.
        Some(Ctl::End) | None = ctl.recv() => {
            ended_by_rein = true;
            proc.terminate(grace).await
        }
    };
    // Whoever waits for the exit then reads the output: all of it must be in. Only a process
    // that left the group while holding the pipe keeps it open past the grace.
    let _ = tokio::time::timeout(DRAIN_GRACE, drained).await;
    let ended = match out {
        Ok(out) => {
            if let Some(w) = watch.filter(|_| !ended_by_rein && out.code != Some(0)) {
                w.failed();
            }
            Exit {
                code: out.code,
                signal: out.signal,
            }
        }
        Err(e) => {
            tracing::warn!("terminal: {e}");
            Exit {
                code: None,
                signal: None,
            }
        }
    };
    if let Some(tap) = tap {
        tap.end(ended);
    }
    let _ = exit.send(Some(ended));
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding the lock leaves at worst a partial buffer, still worth showing.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The newest bytes of a terminal's output, at most `limit` of them.
#[derive(Debug)]
struct Buffer {
    kept: Vec<u8>,
    limit: usize,
    truncated: bool,
}

impl Buffer {
    fn new(limit: Option<usize>) -> Self {
        Buffer {
            kept: Vec::new(),
            limit: limit
                .unwrap_or(TERMINAL_OUTPUT_CAP)
                .min(TERMINAL_OUTPUT_CAP),
            truncated: false,
        }
    }

    fn push(&mut self, bytes: &[u8]) {
        self.kept.extend_from_slice(bytes);
        // Trim only when twice over, so trimming costs amortized O(1) per byte.
        if self.kept.len() > 2 * self.limit.max(4096) {
            self.trim();
        }
    }

    fn trim(&mut self) {
        if self.kept.len() <= self.limit {
            return;
        }
        let mut cut = self.kept.len() - self.limit;
        // Never begin mid-character: drop the rest of a character the cut went through.
        while cut < self.kept.len() && self.kept[cut] & 0xC0 == 0x80 {
            cut += 1;
        }
        self.kept.drain(..cut);
        self.truncated = true;
    }

    /// The kept output as text, and whether older output was dropped. While the command
    /// runs, a character still being written at the end is left for the next read.
    fn text(&mut self, running: bool) -> (String, bool) {
        self.trim();
        let mut end = self.kept.len();
        if running {
            if let Err(e) = std::str::from_utf8(&self.kept) {
                if e.error_len().is_none() {
                    end = e.valid_up_to();
                }
            }
        }
        (
            String::from_utf8_lossy(&self.kept[..end]).into_owned(),
            self.truncated,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grace() -> Duration {
        Duration::from_secs(1)
    }

    #[test]
    fn buffer_cuts_at_a_character_boundary() {
        let mut b = Buffer::new(Some(5));
        b.push("aé€z".as_bytes()); // a(1) é(2) €(3) z(1) = 7 bytes
        let (text, truncated) = b.text(false);
        // Keeping 5 bytes would start inside é: the whole é goes, leaving "€z".
        assert_eq!(text, "€z");
        assert!(truncated);
        assert!(text.len() <= 5);
    }

    #[test]
    fn buffer_holds_back_a_partial_character_while_running() {
        let mut b = Buffer::new(None);
        let euro = "€".as_bytes();
        b.push(b"x");
        b.push(&euro[..2]);
        assert_eq!(b.text(true), ("x".to_owned(), false));
        b.push(&euro[2..]);
        assert_eq!(b.text(true), ("x€".to_owned(), false));
        // Once it ended, a broken tail is shown as it is (replaced), not held back.
        let mut ended = Buffer::new(None);
        ended.push(&euro[..2]);
        assert_eq!(ended.text(false).0, "\u{FFFD}");
    }

    #[tokio::test]
    async fn output_streams_before_the_command_ends_and_is_the_raw_bytes() {
        let dir = tempfile::tempdir().expect("temp dir");
        let t = Terminals::default();
        let tap = Tap::default();
        let id = t
            .start(
                dir.path(),
                "echo one; echo two >&2; sleep 30",
                None,
                None,
                None,
                grace(),
                Some(tap.clone()),
            )
            .expect("start");
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let s = t.output(&id).expect("output");
            if s.output == "one\ntwo\n" {
                assert_eq!(s.exit, None, "still running");
                assert!(!s.truncated);
                break;
            }
            assert!(std::time::Instant::now() < deadline, "got {:?}", s.output);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(tap.take().chunk, "one\ntwo\n", "the tap saw it too");
        assert_eq!(tap.ended(), None);
        t.kill(&id).expect("kill");
        let exit = t.exited(&id).expect("exists").await.expect("ended");
        assert_eq!(exit.code, None);
        assert_eq!(exit.signal, Some(15));
        assert_eq!(tap.ended(), Some(exit), "the tap knows the end");
        assert!(t.running().is_empty());
        // Output stays readable after the end, until released.
        assert_eq!(t.output(&id).expect("kept").output, "one\ntwo\n");
        t.release(&id).expect("release");
        assert!(matches!(t.output(&id), Err(TerminalError::Unknown(_))));
    }

    #[tokio::test]
    async fn freeze_stops_the_group_and_thaw_lets_it_finish() {
        let dir = tempfile::tempdir().expect("temp dir");
        let t = Terminals::default();
        let id = t
            .start(
                dir.path(),
                "sleep 0.3; echo done",
                None,
                None,
                None,
                grace(),
                None,
            )
            .expect("start");
        t.freeze_all();
        tokio::time::sleep(Duration::from_millis(900)).await;
        let s = t.output(&id).expect("output");
        assert_eq!(s.exit, None, "a frozen command does not finish");
        assert_eq!(t.running(), vec!["sleep 0.3; echo done".to_owned()]);
        t.thaw_all();
        let exit = t.exited(&id).expect("exists").await.expect("ended");
        assert_eq!(exit.code, Some(0));
        assert_eq!(t.output(&id).expect("output").output, "done\n");
    }

    #[tokio::test]
    async fn end_all_ends_every_running_terminal() {
        let dir = tempfile::tempdir().expect("temp dir");
        let t = Terminals::default();
        let a = t
            .start(dir.path(), "sleep 30", None, None, None, grace(), None)
            .expect("a");
        let b = t
            .start(
                dir.path(),
                "sleep 30 & wait",
                None,
                None,
                None,
                grace(),
                None,
            )
            .expect("b");
        assert_eq!(t.running().len(), 2);
        t.end_all();
        for id in [a, b] {
            let exit = t.exited(&id).expect("exists").await.expect("ended");
            assert!(exit.signal.is_some(), "{exit:?}");
        }
        assert!(t.running().is_empty());
    }

    #[test]
    fn a_finished_command_reads_like_a_terminal() {
        let t = Terminals::default();
        let exit = Exit {
            code: Some(3),
            signal: None,
        };
        let id = t.finished("false", b"0123456789", exit, Some(4));
        let s = t.output(&id).expect("output");
        assert_eq!(s.output, "6789");
        assert!(s.truncated);
        assert_eq!(s.exit, Some(exit));
        assert!(matches!(t.kill("nope"), Err(TerminalError::Unknown(_))));
    }
}
