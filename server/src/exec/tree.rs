//! `Tree`: every process an agent process started, found through `/proc` and frozen, thawed
//! or ended as a whole, wherever it moved to.
//!
//! An agent harness (Claude Code, Codex...) runs its own commands as its descendants, often in
//! new sessions (`setsid`) or double-forked, so a signal to its process group misses them.
//! The tree is found by walking `/proc` (each `/proc/N/stat`'s parent, group, session and
//! start time), which works wherever `/proc` is mounted.
//!
//! Why not a cgroup v2 freezer (tried on the machine this was built on: Linux 6.18, v1
//! controllers under `/sys/fs/cgroup`, cgroup2 at `/sys/fs/cgroup/unified`, Rein as root in
//! cgroup `/`). There Rein can make a child cgroup, start a process in it (writing `0` to the
//! child's `cgroup.procs` between fork and exec) and freeze it (`cgroup.freeze`, done when
//! `cgroup.events` says `frozen 1`). It is not used, because:
//! - A cgroup-frozen process is not stopped: `/proc/N/stat` shows it `S`, and nothing per
//!   process says it is frozen, while a pause must leave every process in state `T`, the state
//!   tools, the person and the harness suites can see. That needs a SIGSTOP to every member
//!   anyway (freeze, read the then stable `cgroup.procs`, SIGSTOP each, thaw), so the cgroup
//!   would only replace the walk's fixed point, and it is no faster once `T` is required:
//!   measured side by side on the bench's 8-process tree with load about 2.5 (and 4 to 7) on
//!   2 cores, `cgroup.freeze` to `frozen 1` took p50 1.5 ms / p99 4.6 ms (7.6 / 20.4), freeze,
//!   SIGSTOP and thaw to every process in `T` p50 2.9 / p99 8.0 ms (15.4 / 31.7; 30 trials
//!   each, a Python probe), and this walk p50 3.3 / p99 4.8 ms (16.8 / 28.7; 50 and 20
//!   trials, release, in process).
//! - Take over stops the commands and keeps the harness running so it can take
//!   `session/cancel`; a cgroup freezes all of its members, so the harness would have to be
//!   moved out of it pid by pid: the per-process race the cgroup was meant to remove.
//! - It needs a cgroup2 that Rein may write where Rein itself runs: root, or a subtree
//!   delegated to the user (a systemd unit with `Delegate=yes`). Editors start language
//!   servers in their own scope, which systemd does not delegate (no one else is to make child
//!   cgroups there), and containers mount `/sys/fs/cgroup` read-only: the walk would stay the
//!   path almost everywhere, and both would need testing on every machine.
//! - The walk already reaches what a cgroup would: a stopped process cannot fork, a child
//!   forked during a walk has a member parent and is found by the next pass (passes repeat
//!   until one finds nothing new), and an orphan is reparented to Rein (a subreaper) and
//!   carries the tag. Only a process that double-forks, leaves the session and clears its
//!   environment before any walk sees it would be caught by a cgroup alone.
//!
//! Which processes belong to the tree rooted at the agent process `R` (the rule):
//! 1. `R` itself (identified by pid and start time, so a reused pid is not taken for it);
//! 2. every process whose parent belongs (descendants through parent links);
//! 3. every process seen belonging at an earlier walk of the same `Tree`, while its pid keeps
//!    the same start time (so an orphan found once stays found after it is reparented);
//! 4. every process whose process group or session id is held by a member, other than
//!    Rein's own group and session (the agent starts in Rein's session, and Rein's own
//!    commands share it). An id is forgotten as soon as no live process holds it, so a
//!    reused id is not taken;
//! 5. every child of Rein carrying the tree's tag (`REIN_AGENT=<tag>` in its environment,
//!    set when the agent is started and inherited by all it runs): with `make_subreaper`
//!    on, a double-forked orphan is reparented to Rein, and the tag finds one that also left
//!    the agent's group and session before any walk saw it.
//!
//! Rein itself, pid 0 and 1, and anything else Rein started (its own commands, other agents)
//! are never members and are never signalled. What the rule cannot see: a process that
//! double-forks into a new session and scrubs its environment before any walk, and (without
//! the subreaper) an orphan adopted by another reaper before a walk saw it.
//!
//! Reaping: with the subreaper on, orphans that die become Rein's zombies. Walks reap the
//! tree's own (never the root, whose parent waits for it), and `reap_orphans` reaps any other
//! zombie child that Rein cannot have started itself.

use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag};
use nix::unistd::Pid;

use super::ExecError;

/// The environment variable that tags every process an agent starts (rule 5).
pub const AGENT_TAG_VAR: &str = "REIN_AGENT";

/// How long a freeze waits for a signalled process to show it stopped before it takes a
/// process in uninterruptible sleep (`D`, e.g. a shell in `vfork` whose child is stopped) as
/// stopped: it runs no user code until it leaves the kernel, and it stops then.
const SETTLE_PATIENCE: Duration = Duration::from_millis(200);
/// How long the last SIGKILL pass waits for the killed to die (a process in `D` dies when it
/// leaves the kernel).
const KILL_PATIENCE: Duration = Duration::from_secs(2);
/// Between polls of a process's state while waiting for it to stop or die.
const POLL: Duration = Duration::from_micros(100);
/// Between polls while waiting out a SIGTERM grace.
const GRACE_POLL: Duration = Duration::from_millis(10);
/// Signal passes (walk, signal the new) before giving up on a tree that keeps forking.
const MAX_PASSES: usize = 64;

/// What one `/proc/N/stat` says about a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stat {
    pid: i32,
    state: char,
    ppid: i32,
    pgid: i32,
    sid: i32,
    /// Clock ticks after boot; with the pid, it names a process for good.
    start: u64,
}

impl Stat {
    fn dead(&self) -> bool {
        matches!(self.state, 'Z' | 'X' | 'x')
    }
}

fn parse_stat(text: &str) -> Option<Stat> {
    let open = text.find('(')?;
    let pid = text.get(..open)?.trim().parse().ok()?;
    // The command name is parenthesized and may itself hold spaces and parentheses.
    let rest = text.get(text.rfind(')')? + 1..)?;
    let fields: Vec<&str> = rest.split_ascii_whitespace().collect();
    Some(Stat {
        pid,
        state: fields.first()?.chars().next()?,
        ppid: fields.get(1)?.parse().ok()?,
        pgid: fields.get(2)?.parse().ok()?,
        sid: fields.get(3)?.parse().ok()?,
        start: fields.get(19)?.parse().ok()?,
    })
}

fn read_stat(pid: i32) -> Option<Stat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Every process in `/proc` (one that exits mid-walk is left out).
fn scan() -> Vec<Stat> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(read_stat)
        .collect()
}

/// The state letter of a process (`/proc/N/stat` field 3: `R`, `S`, `D`, `T`, `Z`...), or
/// `None` once it is gone.
pub fn state(pid: u32) -> Option<char> {
    read_stat(i32::try_from(pid).ok()?).map(|s| s.state)
}

/// Every descendant of `root` now, through parent links only (not `root` itself).
pub fn descendants(root: u32) -> Vec<u32> {
    let Ok(root) = i32::try_from(root) else {
        return Vec::new();
    };
    let all = scan();
    let children = children_of(&all);
    let mut out = Vec::new();
    let mut todo = vec![root];
    while let Some(p) = todo.pop() {
        for &c in children.get(&p).into_iter().flatten() {
            // A pid is never its own ancestor, but /proc is read racily: stay finite.
            if c != root && !out.contains(&c) {
                out.push(c);
                todo.push(c);
            }
        }
    }
    out.into_iter()
        .filter_map(|p| u32::try_from(p).ok())
        .collect()
}

fn children_of(all: &[Stat]) -> HashMap<i32, Vec<i32>> {
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for s in all {
        children.entry(s.ppid).or_default().push(s.pid);
    }
    children
}

/// Makes Rein a child subreaper (`PR_SET_CHILD_SUBREAPER`), so a process orphaned anywhere
/// under it (a double fork) is reparented to Rein rather than to init, and stays findable
/// under the tree it came from. Process-wide; only the first call acts, later ones return
/// its result.
pub fn make_subreaper() -> Result<(), ExecError> {
    (*SUBREAPER.get_or_init(|| nix::sys::prctl::set_child_subreaper(true)))
        .map_err(ExecError::Subreaper)
}

/// Whether `make_subreaper` was called, and how it went.
static SUBREAPER: OnceLock<Result<(), Errno>> = OnceLock::new();

/// Reaps zombie children of Rein that Rein cannot have started itself: Rein starts children
/// in its own session, either in its own process group or leading a new one, so a zombie in
/// another session, or in a group it does not lead that is not Rein's, is an orphan the
/// subreaper adopted. Does nothing (and reads nothing) unless `make_subreaper` succeeded.
/// Returns the pids reaped.
pub fn reap_orphans() -> Vec<u32> {
    if !matches!(SUBREAPER.get(), Some(Ok(()))) {
        return Vec::new();
    }
    let me = Ids::mine();
    scan()
        .into_iter()
        .filter(|s| s.ppid == me.pid && s.dead())
        .filter(|s| s.sid != me.sid || (s.pgid != s.pid && s.pgid != me.pgid))
        .filter_map(|s| reap(s.pid).then_some(s.pid))
        .filter_map(|p| u32::try_from(p).ok())
        .collect()
}

/// Reaps one zombie child; whether it was reaped.
fn reap(pid: i32) -> bool {
    matches!(
        waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG)),
        Ok(s) if s.pid().is_some()
    )
}

/// Rein's own pid, process group and session.
#[derive(Debug, Clone, Copy)]
struct Ids {
    pid: i32,
    pgid: i32,
    sid: i32,
}

impl Ids {
    fn mine() -> Self {
        let pid = nix::unistd::getpid();
        Ids {
            pid: pid.as_raw(),
            pgid: nix::unistd::getpgrp().as_raw(),
            sid: nix::unistd::getsid(None).unwrap_or(pid).as_raw(),
        }
    }
}

/// One agent process and everything it started, tracked across walks (see the module's rule).
#[derive(Debug)]
pub struct Tree {
    /// The root's pid and, while it lived when the tree was made, its start time.
    root: i32,
    root_start: Option<u64>,
    me: Ids,
    /// `REIN_AGENT=<tag>`, when the root was started with a tag.
    needle: Option<Vec<u8>>,
    /// Members seen so far: pid → start time.
    known: HashMap<i32, u64>,
    /// Process groups and sessions held by members (never Rein's own, never 0 or 1).
    groups: HashSet<i32>,
    sessions: HashSet<i32>,
    /// Children of Rein already read and found without the tag: pid → start time.
    untagged: HashMap<i32, u64>,
    /// What `freeze` stopped and `thaw` has not resumed: pid → start time.
    frozen: HashMap<i32, u64>,
    /// The agent's own processes besides the root (a harness's CLI or app server, there
    /// once its session is open), spared like the root by the `…commands` operations.
    own: HashMap<i32, u64>,
}

impl Tree {
    /// The tree rooted at `root` (the agent process, a child of Rein), whose processes carry
    /// `REIN_AGENT=<tag>` when `tag` is given. Make it right after starting the root, so its
    /// start time is the agent's.
    pub fn new(root: u32, tag: Option<&str>) -> Self {
        let root = i32::try_from(root).unwrap_or(0);
        let root_start = (root > 1)
            .then(|| read_stat(root))
            .flatten()
            .map(|s| s.start);
        Tree {
            root,
            root_start,
            me: Ids::mine(),
            needle: tag.map(|t| format!("{AGENT_TAG_VAR}={t}").into_bytes()),
            known: HashMap::new(),
            groups: HashSet::new(),
            sessions: HashSet::new(),
            untagged: HashMap::new(),
            frozen: HashMap::new(),
            own: HashMap::new(),
        }
    }

    /// The root's pid.
    pub fn root(&self) -> u32 {
        u32::try_from(self.root).unwrap_or(0)
    }

    /// Takes every live member now as the agent's own, not a command it runs: called once the
    /// agent has set up its session, before it ran anything. Harnesses run their real agent
    /// as a child (Claude Code's CLI, Codex's app server); ending it would end the session.
    pub fn adopt_current(&mut self) {
        let own: Vec<(i32, u64)> = self
            .walk()
            .iter()
            .filter(|s| !s.dead())
            .map(|s| (s.pid, s.start))
            .collect();
        self.own.extend(own);
    }

    /// The root, or a process adopted as the agent's own.
    fn is_own(&self, s: &Stat) -> bool {
        s.pid == self.root || self.own.get(&s.pid) == Some(&s.start)
    }

    /// The pids of the tree's live processes now (the root included while it lives).
    pub fn members(&mut self) -> Vec<u32> {
        let mut pids: Vec<u32> = self
            .walk()
            .iter()
            .filter(|s| !s.dead())
            .filter_map(|s| u32::try_from(s.pid).ok())
            .collect();
        pids.sort_unstable();
        pids
    }

    /// Stops the root and every member (SIGSTOP), re-walking until a walk made once all the
    /// stopped show state `T` finds no one new (a stopped process cannot fork, so then none
    /// is left). Returns every pid this tree holds frozen.
    pub fn freeze(&mut self) -> Result<Vec<u32>, ExecError> {
        self.stop(true)
    }

    /// `freeze` for every member but the root: the agent process keeps running (to take
    /// `session/cancel`) while the commands it runs are stopped.
    pub fn freeze_commands(&mut self) -> Result<Vec<u32>, ExecError> {
        self.stop(false)
    }

    /// Resumes (SIGCONT) what `freeze` stopped, and every member now besides (one started
    /// by a process caught mid-fork). Returns the pids resumed.
    pub fn thaw(&mut self) -> Result<Vec<u32>, ExecError> {
        let mut sent = HashSet::new();
        let mut err = None;
        let frozen: Vec<(i32, u64)> = self.frozen.drain().collect();
        for (pid, start) in frozen {
            if read_stat(pid).is_some_and(|s| s.start == start && !s.dead()) {
                self.send(pid, Signal::SIGCONT, &mut err);
                sent.insert(pid);
            }
        }
        for s in self.walk() {
            if !s.dead() && sent.insert(s.pid) {
                self.send(s.pid, Signal::SIGCONT, &mut err);
            }
        }
        finish(sent, err)
    }

    /// Resumes the root and the agent's own processes only (after a full freeze, so it can
    /// take `session/cancel` while its commands stay stopped).
    pub fn thaw_root(&mut self) -> Result<(), ExecError> {
        let mut err = None;
        if self.root_alive() {
            self.send(self.root, Signal::SIGCONT, &mut err);
            self.frozen.remove(&self.root);
        }
        let own: Vec<(i32, u64)> = self.own.iter().map(|(p, s)| (*p, *s)).collect();
        for (pid, start) in own {
            if read_stat(pid).is_some_and(|s| s.start == start && !s.dead()) {
                self.send(pid, Signal::SIGCONT, &mut err);
                self.frozen.remove(&pid);
            }
        }
        err.map_or(Ok(()), Err)
    }

    /// SIGTERM to every member, then SIGCONT so a stopped one acts on it; the root too when
    /// `root_too`. Does not wait. Returns the pids signalled.
    pub fn terminate(&mut self, root_too: bool) -> Result<Vec<u32>, ExecError> {
        let mut sent = HashSet::new();
        let mut err = None;
        self.pass(Signal::SIGTERM, root_too, &mut sent, &mut err);
        for &pid in &sent {
            self.send(pid, Signal::SIGCONT, &mut err);
        }
        self.frozen.clear();
        finish(sent, err)
    }

    /// SIGKILL to every member (the root too when `root_too`), re-walked until none is left
    /// alive, for at most `KILL_PATIENCE`. Returns the pids killed.
    pub fn kill(&mut self, root_too: bool) -> Result<Vec<u32>, ExecError> {
        let mut sent = HashSet::new();
        let mut err = None;
        let deadline = Instant::now() + KILL_PATIENCE;
        loop {
            self.pass(Signal::SIGKILL, root_too, &mut sent, &mut err);
            let alive = self
                .walk()
                .iter()
                .any(|s| !s.dead() && (root_too || !self.is_own(s)));
            if !alive || Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(POLL);
        }
        self.frozen.retain(|pid, _| !sent.contains(pid));
        finish(sent, err)
    }

    /// Ends the whole tree: SIGTERM (and SIGCONT) to all, then SIGKILL to whatever is still
    /// alive after `grace`. Blocks for up to `grace` plus `KILL_PATIENCE`. Returns the pids
    /// signalled.
    pub fn end(&mut self, grace: Duration) -> Result<Vec<u32>, ExecError> {
        let termed = self.terminate(true);
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline && !self.members().is_empty() {
            std::thread::sleep(GRACE_POLL.min(deadline.saturating_duration_since(Instant::now())));
        }
        let killed = self.kill(true)?;
        let mut all = termed?;
        all.extend(killed);
        all.sort_unstable();
        all.dedup();
        Ok(all)
    }

    /// Ends every member but the root: stopped first so none forks away, then killed.
    pub fn end_commands(&mut self) -> Result<Vec<u32>, ExecError> {
        let frozen = self.freeze_commands();
        let killed = self.kill(false)?;
        // SIGKILL ends a stopped process too; SIGCONT only lets it be seen to go at once.
        let mut err = None;
        for &pid in &killed {
            if let Ok(pid) = i32::try_from(pid) {
                if read_stat(pid).is_some_and(|s| !s.dead()) {
                    self.send(pid, Signal::SIGCONT, &mut err);
                }
            }
        }
        frozen?;
        Ok(killed)
    }

    fn root_alive(&self) -> bool {
        self.root > 1
            && read_stat(self.root).is_some_and(|s| Some(s.start) == self.root_start && !s.dead())
    }

    fn stop(&mut self, root_too: bool) -> Result<Vec<u32>, ExecError> {
        let mut err = None;
        let deadline = Instant::now() + SETTLE_PATIENCE;
        for _ in 0..MAX_PASSES {
            let new: Vec<Stat> = self
                .walk()
                .into_iter()
                .filter(|s| !s.dead() && (root_too || !self.is_own(s)))
                .filter(|s| self.frozen.get(&s.pid) != Some(&s.start))
                .collect();
            if new.is_empty() {
                break;
            }
            for s in &new {
                self.send(s.pid, Signal::SIGSTOP, &mut err);
                self.frozen.insert(s.pid, s.start);
            }
            settle(&new, deadline);
        }
        let frozen: HashSet<i32> = self.frozen.keys().copied().collect();
        finish(frozen, err)
    }

    /// Signals every live member not yet in `sent`, re-walking until a walk finds no one new.
    fn pass(
        &mut self,
        sig: Signal,
        root_too: bool,
        sent: &mut HashSet<i32>,
        err: &mut Option<ExecError>,
    ) {
        for _ in 0..MAX_PASSES {
            let new: Vec<i32> = self
                .walk()
                .iter()
                .filter(|s| !s.dead() && (root_too || !self.is_own(s)))
                .map(|s| s.pid)
                .filter(|p| !sent.contains(p))
                .collect();
            if new.is_empty() {
                return;
            }
            for pid in new {
                self.send(pid, sig, err);
                sent.insert(pid);
            }
        }
    }

    /// Sends `sig` to one member; a process already gone is no error. Never signals pid 0,
    /// 1, a negative pid (a group) or Rein.
    fn send(&self, pid: i32, sig: Signal, err: &mut Option<ExecError>) {
        if pid <= 1 || pid == self.me.pid {
            return;
        }
        match kill(Pid::from_raw(pid), sig) {
            Ok(()) | Err(Errno::ESRCH) => {}
            Err(e) => {
                err.get_or_insert(ExecError::SignalProcess(pid, sig, e));
            }
        }
    }

    /// One walk of `/proc`: the members now by the module's rule (zombies included), with
    /// what is remembered brought up to date and the tree's zombie orphans reaped.
    fn walk(&mut self) -> Vec<Stat> {
        let all = scan();
        let by_pid: HashMap<i32, Stat> = all.iter().map(|s| (s.pid, *s)).collect();
        let children = children_of(&all);
        // Forget what has died, so a reused pid or id is not taken for a member.
        self.known
            .retain(|pid, start| by_pid.get(pid).is_some_and(|s| s.start == *start));
        self.untagged
            .retain(|pid, start| by_pid.get(pid).is_some_and(|s| s.start == *start));
        let held_groups: HashSet<i32> = all.iter().map(|s| s.pgid).collect();
        let held_sessions: HashSet<i32> = all.iter().map(|s| s.sid).collect();
        self.groups.retain(|g| held_groups.contains(g));
        self.sessions.retain(|s| held_sessions.contains(s));

        let mut members: HashSet<i32> = HashSet::new();
        let mut todo: Vec<i32> = Vec::new();
        for s in &all {
            if self.excluded(s.pid) {
                continue;
            }
            let root = s.pid == self.root && Some(s.start) == self.root_start;
            let seen = self.known.get(&s.pid) == Some(&s.start);
            if root || seen || self.shares_ids(s) || self.tagged(s) {
                members.insert(s.pid);
                todo.push(s.pid);
            }
        }
        loop {
            // Everything under a member is a member.
            while let Some(p) = todo.pop() {
                for &c in children.get(&p).into_iter().flatten() {
                    if !self.excluded(c) && members.insert(c) {
                        todo.push(c);
                    }
                }
            }
            // The groups and sessions members hold bring in whoever else holds them.
            for pid in &members {
                if let Some(s) = by_pid.get(pid) {
                    self.note_ids(s);
                }
            }
            todo.extend(
                all.iter()
                    .filter(|s| !self.excluded(s.pid) && !members.contains(&s.pid))
                    .filter(|s| self.shares_ids(s))
                    .map(|s| s.pid),
            );
            if todo.is_empty() {
                break;
            }
            members.extend(todo.iter().copied());
        }

        let mut out = Vec::with_capacity(members.len());
        for pid in members {
            let Some(s) = by_pid.get(&pid) else { continue };
            self.known.insert(pid, s.start);
            if s.dead() && s.ppid == self.me.pid && pid != self.root && reap(pid) {
                self.known.remove(&pid);
                continue;
            }
            out.push(*s);
        }
        out
    }

    fn excluded(&self, pid: i32) -> bool {
        pid <= 1 || pid == self.me.pid
    }

    fn shares_ids(&self, s: &Stat) -> bool {
        self.groups.contains(&s.pgid) || self.sessions.contains(&s.sid)
    }

    fn note_ids(&mut self, s: &Stat) {
        let mine =
            |id: i32| id <= 1 || id == self.me.pid || id == self.me.pgid || id == self.me.sid;
        if !mine(s.pgid) {
            self.groups.insert(s.pgid);
        }
        if !mine(s.sid) {
            self.sessions.insert(s.sid);
        }
    }

    /// Rule 5: a child of Rein (other than the root) whose environment carries the tag.
    fn tagged(&mut self, s: &Stat) -> bool {
        let Some(needle) = &self.needle else {
            return false;
        };
        if s.ppid != self.me.pid
            || s.pid == self.root
            || self.untagged.get(&s.pid) == Some(&s.start)
        {
            return false;
        }
        // Mid-`execve` the read fails or comes back empty: that says nothing, so only a
        // whole environment without the tag is remembered. (A process that lacks the tag
        // cannot gain it: only Rein gives it, and only to an agent it starts.)
        let env = std::fs::read(format!("/proc/{}/environ", s.pid)).unwrap_or_default();
        let tagged = env.split(|b| *b == 0).any(|v| v == needle.as_slice());
        if !tagged && !env.is_empty() {
            self.untagged.insert(s.pid, s.start);
        }
        tagged
    }
}

/// Waits until each of `stopped` shows it stopped (`T`/`t`), died or went, or `deadline`
/// passes and the rest are in `D` (they stop on leaving the kernel).
fn settle(stopped: &[Stat], deadline: Instant) {
    let mut waiting: Vec<Stat> = stopped.to_vec();
    loop {
        waiting.retain(|w| {
            read_stat(w.pid)
                .is_some_and(|s| s.start == w.start && !s.dead() && !matches!(s.state, 'T' | 't'))
        });
        if waiting.is_empty() {
            return;
        }
        if Instant::now() >= deadline {
            // Only `D` may be taken as stopped; a process still running after the signal
            // had all this time is waited for a little longer, once more per pass.
            if waiting.iter().all(|w| state_of(w) == Some('D')) {
                return;
            }
            if Instant::now() >= deadline + SETTLE_PATIENCE {
                return;
            }
        }
        std::thread::sleep(POLL);
    }
}

fn state_of(w: &Stat) -> Option<char> {
    read_stat(w.pid)
        .filter(|s| s.start == w.start)
        .map(|s| s.state)
}

fn finish(pids: HashSet<i32>, err: Option<ExecError>) -> Result<Vec<u32>, ExecError> {
    if let Some(e) = err {
        return Err(e);
    }
    let mut out: Vec<u32> = pids
        .into_iter()
        .filter_map(|p| u32::try_from(p).ok())
        .collect();
    out.sort_unstable();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt as _;
    use std::process::{Child, Command, Stdio};

    /// Generous bound for anything a test waits for; only hit when something is broken.
    const PATIENCE: Duration = Duration::from_secs(30);

    /// A shell in its own process group (as the ACP worker starts an agent) that starts a
    /// `sleep` in a new session, a double-forked `sleep`, and a double-forked `sleep` in a
    /// new session (found only by the tag), then becomes a `sleep` itself. Returns the shell
    /// and the three pids in that order, once all are written.
    // The shell is handed to the caller, which waits for it after ending the tree.
    #[allow(clippy::zombie_processes)]
    fn agent_like(tag: &str) -> (Child, Vec<u32>, tempfile::TempDir) {
        make_subreaper().expect("subreaper");
        let dir = tempfile::tempdir().expect("tempdir");
        let pids = dir.path().join("pids");
        let script = r#"
            me='echo "$2 $$" >> "$1"; exec sleep 30'
            setsid sh -c "$me" x "$F" 0 &
            ( sh -c "$me" x "$F" 1 & ) &
            ( setsid sh -c "$me" x "$F" 2 & ) &
            exec sleep 30
        "#;
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(script)
            .env("F", &pids)
            .env(AGENT_TAG_VAR, tag)
            .stdin(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("spawn sh");
        let until = Instant::now() + PATIENCE;
        loop {
            let text = std::fs::read_to_string(&pids).unwrap_or_default();
            let mut got: Vec<(u32, u32)> = text
                .lines()
                .filter_map(|l| {
                    let (which, pid) = l.trim().split_once(' ')?;
                    Some((which.parse().ok()?, pid.parse().ok()?))
                })
                .collect();
            if got.len() == 3 {
                got.sort_unstable();
                return (child, got.into_iter().map(|(_, pid)| pid).collect(), dir);
            }
            if Instant::now() >= until {
                Tree::new(child.id(), Some(tag)).end(Duration::ZERO).ok();
                let _ = child.wait();
                panic!("the tree never started: {got:?}");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn wait_for(what: &str, mut ok: impl FnMut() -> bool) {
        let until = Instant::now() + PATIENCE;
        while !ok() {
            assert!(Instant::now() < until, "{what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// A `sleep` in a group of its own that is no part of any agent (one of Rein's commands).
    fn bystander() -> Child {
        Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .expect("spawn sleep")
    }

    #[test]
    fn stat_lines_parse_with_odd_command_names() {
        let s = parse_stat("42 (a) b (c)) S 7 42 40 0 -1 4194304 0 0 0 0 0 0 0 0 20 0 1 0 99 0")
            .expect("parses");
        assert_eq!(
            (s.pid, s.state, s.ppid, s.pgid, s.sid, s.start),
            (42, 'S', 7, 42, 40, 99)
        );
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn descendants_follow_parent_links() {
        let (mut root, pids, _dir) = agent_like("descendants");
        let desc = descendants(root.id());
        // The session leader stays the shell's child; the double-forked ones were orphaned.
        assert!(desc.contains(&pids[0]), "{desc:?} lacks {}", pids[0]);
        assert!(!desc.contains(&root.id()));
        Tree::new(root.id(), Some("descendants"))
            .end(Duration::ZERO)
            .expect("end");
        let _ = root.wait();
    }

    #[test]
    fn freeze_thaw_end_reach_new_sessions_and_double_forks() {
        let (mut root, pids, _dir) = agent_like("freeze-thaw-end");
        let mut other = bystander();
        let mut tree = Tree::new(root.id(), Some("freeze-thaw-end"));
        let all: Vec<u32> = pids.iter().copied().chain([root.id()]).collect();

        let frozen = tree.freeze().expect("freeze");
        for pid in &all {
            assert!(frozen.contains(pid), "{pid} not in {frozen:?}");
            assert_eq!(state(*pid), Some('T'), "{pid} not stopped");
        }
        assert!(!frozen.contains(&other.id()), "a bystander was frozen");
        assert_ne!(state(other.id()), Some('T'));

        let thawed = tree.thaw().expect("thaw");
        for pid in &all {
            assert!(thawed.contains(pid), "{pid} not in {thawed:?}");
            wait_for("a thawed process stays stopped", || {
                matches!(state(*pid), Some('S' | 'R'))
            });
        }

        let ended = tree.end(Duration::from_secs(5)).expect("end");
        for pid in &all {
            assert!(ended.contains(pid), "{pid} not in {ended:?}");
        }
        let _ = root.wait();
        for pid in &all {
            assert!(
                matches!(state(*pid), None | Some('Z')),
                "{pid} outlived end: {:?}",
                state(*pid)
            );
        }
        assert!(tree.members().is_empty());
        assert_eq!(state(other.id()).map(|s| s == 'Z'), Some(false));
        let _ = other.kill();
        let _ = other.wait();
    }

    #[test]
    fn ending_the_commands_keeps_the_agent() {
        let (mut root, pids, _dir) = agent_like("commands");
        let mut tree = Tree::new(root.id(), Some("commands"));
        let frozen = tree.freeze_commands().expect("freeze commands");
        assert!(!frozen.contains(&root.id()));
        for pid in &pids {
            assert_eq!(state(*pid), Some('T'), "{pid} not stopped");
        }
        assert_ne!(state(root.id()), Some('T'));
        let killed = tree.end_commands().expect("end commands");
        for pid in &pids {
            assert!(killed.contains(pid), "{pid} not in {killed:?}");
            assert!(matches!(state(*pid), None | Some('Z')), "{pid} survived");
        }
        assert!(matches!(state(root.id()), Some('S' | 'R')));
        assert_eq!(tree.members(), vec![root.id()]);
        tree.end(Duration::ZERO).expect("end");
        let _ = root.wait();
    }

    #[test]
    fn the_tag_finds_an_orphan_that_left_group_and_session() {
        let (mut root, pids, _dir) = agent_like("tagged");
        let me = i32::try_from(std::process::id()).expect("pid");
        wait_for("the orphan was never adopted", || {
            read_stat(i32::try_from(pids[2]).unwrap_or(0)).is_some_and(|s| s.ppid == me)
        });
        let blind = Tree::new(root.id(), None).members();
        assert!(
            blind.contains(&pids[0]) && blind.contains(&pids[1]),
            "{blind:?}"
        );
        assert!(
            !blind.contains(&pids[2]),
            "found without the tag: {blind:?}"
        );
        let mut tree = Tree::new(root.id(), Some("tagged"));
        assert!(tree.members().contains(&pids[2]));
        tree.end(Duration::ZERO).expect("end");
        let _ = root.wait();
    }

    #[test]
    fn orphans_are_reaped_and_rein_s_own_children_are_not() {
        make_subreaper().expect("subreaper");
        let mut own = bystander();
        // An orphan in a session of its own, killed: a zombie only Rein can reap.
        let out = Command::new("sh")
            .arg("-c")
            .arg("(setsid sh -c 'echo $$; exec sleep 30 >/dev/null 2>&1' &)")
            .output()
            .expect("sh");
        let pid: u32 = String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("a pid");
        let me = i32::try_from(std::process::id()).expect("pid");
        wait_for("the orphan was never adopted", || {
            read_stat(i32::try_from(pid).unwrap_or(0)).is_some_and(|s| s.ppid == me)
        });
        kill(
            Pid::from_raw(i32::try_from(pid).expect("pid")),
            Signal::SIGKILL,
        )
        .expect("kill");
        wait_for("the orphan was never reaped", || {
            reap_orphans();
            state(pid).is_none()
        });
        let _ = own.kill();
        // The bystander's zombie is its parent's to reap.
        wait_for("the bystander never died", || state(own.id()) == Some('Z'));
        assert!(!reap_orphans().contains(&own.id()));
        assert!(own.wait().is_ok());
    }

    #[test]
    fn nothing_outside_the_tree_is_signalled() {
        let mut tree = Tree::new(0, None);
        assert!(tree.freeze().expect("freeze").is_empty());
        let mut me = Tree::new(std::process::id(), None);
        // Rein is never a member of a tree, not even one rooted at itself.
        assert!(!me.members().contains(&std::process::id()));
        let mut one = Tree::new(1, None);
        assert!(one.members().is_empty());
    }
}
