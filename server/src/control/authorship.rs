//! Who made a change in the tree, and on what evidence: the one place the rule lives.
//!
//! Where Rein can trace (`exec::Trace`: seccomp notifications, recorded before each call
//! runs), authorship is observed, not inferred: every process of the agent's tree (an ACP
//! harness and all it starts, every command Rein runs for any agent) is traced, so a change
//! a traced call touched is the agent's and a change none touched is the person's (an
//! editor's save, a terminal, another tool). A path the person saved from the editor with
//! the bytes now on disk stays theirs even when the agent touched it too: their bytes are
//! kept. Only while the trace is not whole (no seccomp notifications here, the sandbox off,
//! a process that could not be traced) does the older rule below decide, and what it cannot
//! attribute is unattributed.
//!
//! A change found while the agent ran is the agent's only on evidence:
//! - a write Rein made for it (those steps name their path and never come here);
//! - a traced call of one of its processes that touched the path;
//! - a write it announced with its content (a permission Rein granted, a tool call's diff),
//!   when the bytes on disk are exactly the announced ones;
//! - a tool call that names the path (its locations and diffs), or the command line of a
//!   command it ran (a word naming the path, a directory holding it, a glob matching it, or a
//!   redirection into it), since a command runs at the root of the tree.
//!
//! A file the person saved from the editor with the bytes now on disk is theirs: a buffer
//! edit is always the human's. Anything else is unattributed: kept by abort, rollback and
//! rewind, listed for the person, and discarded only when they choose to. Repairs (putting
//! back the person's lines) may act on a guess; deleting or reverting may not.
//!
//! The engine asks `Engine::attribute` at every step that may have changed anything in the
//! tree, and records the unattributed part as a step of its own (`Author::Unattributed`),
//! listed in `unattributedChanges`; abort and rollback take back only agent steps.
//!
//! Must never: write the working tree (the person discards an unattributed change through
//! a transition, never this module).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use globset::{Glob, GlobSet, GlobSetBuilder};

use super::{Engine, Level};
use crate::agent::{Intended, ToolCall};
use crate::checkpoint::{FileChange, SnapshotMeta};
use crate::state::{self, Author, Step, StepStatus, UnattributedChange};

/// Who a change is attributed to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Who {
    /// Evidence names the agent.
    Agent,
    /// The person saved exactly these bytes from the editor.
    Human,
    /// The trace is whole and none of the agent's processes touched it: someone else's (the
    /// person's terminal, another tool).
    Outside,
    /// No evidence either way.
    Unattributed,
}

/// The paths one step's own record names: its tool call, its command line.
#[derive(Debug, Default, Clone)]
pub(super) struct Evidence {
    /// Repo-relative paths named; a directory names everything under it.
    paths: Vec<String>,
    /// Glob patterns a command names (`rm build/*.o`), matched against repo-relative paths.
    globs: Vec<GlobSet>,
    /// Repo-relative paths, as bytes, a traced call of the agent's touched.
    traced: Vec<Vec<u8>>,
}

impl Evidence {
    /// No evidence: whatever changed is unattributed (unless announced or saved).
    pub(super) fn none() -> Self {
        Evidence::default()
    }

    /// What a tool call names: its locations, its diffs, and its command line.
    pub(super) fn tool(root: &Roots, tool: &ToolCall) -> Self {
        let mut ev = match &tool.command {
            Some(cmd) => Evidence::command(root, cmd),
            None => Evidence::none(),
        };
        let named = tool
            .locations
            .iter()
            .map(|(p, _)| p)
            .chain(tool.diffs.iter().map(|(p, _, _)| p));
        for p in named {
            if let Some(p) = root.relative(p) {
                ev.paths.push(p);
            }
        }
        ev
    }

    /// What a command line may write, by its words (see `exec::written_words`).
    pub(super) fn command(root: &Roots, cmd: &str) -> Self {
        let mut ev = Evidence::none();
        let mut globs = GlobSetBuilder::new();
        let mut any_glob = false;
        for (word, glob) in crate::exec::written_words(cmd) {
            let Some(rel) = root.relative(&word) else {
                continue;
            };
            if glob {
                if let Ok(g) = Glob::new(&rel) {
                    globs.add(g);
                    any_glob = true;
                }
            } else {
                ev.paths.push(rel);
            }
        }
        if any_glob {
            ev.globs.extend(globs.build().ok());
        }
        ev
    }

    /// The paths named one by one (not the patterns), repo-relative.
    pub(super) fn named_paths(&self) -> &[String] {
        &self.paths
    }

    /// Adds what `other` names.
    pub(super) fn join(&mut self, other: &Evidence) {
        self.paths.extend(other.paths.iter().cloned());
        self.globs.extend(other.globs.iter().cloned());
        self.traced.extend(other.traced.iter().cloned());
    }

    /// Whether this names `path` (repo-relative): the path itself, a directory holding it, or
    /// a pattern matching it.
    pub(super) fn names(&self, path: &str) -> bool {
        self.names_bytes(path.as_bytes())
    }

    /// Whether a traced call touched something beneath the directory `dir` (repo-relative).
    pub(super) fn traced_under(&self, dir: &str) -> bool {
        let dir = dir.as_bytes();
        self.traced
            .iter()
            .any(|p| p.len() > dir.len() && p.starts_with(dir) && p[dir.len()] == b'/')
    }

    /// `names`, for a path as its bytes on disk (a pattern matches a name that is not UTF-8
    /// by its bytes, as the shell matched it).
    fn names_bytes(&self, path: &[u8]) -> bool {
        let under = |p: &[u8]| {
            p == path || (path.len() > p.len() && path.starts_with(p) && path[p.len()] == b'/')
        };
        self.paths.iter().any(|p| under(p.as_bytes())) || self.traced.iter().any(|p| under(p)) || {
            use std::os::unix::ffi::OsStrExt;
            let path = Path::new(std::ffi::OsStr::from_bytes(path));
            self.globs.iter().any(|g| g.is_match(path))
        }
    }
}

/// The working tree's root as a command or a harness may spell it (as opened, and with its
/// links resolved), to make the paths they name repo-relative.
#[derive(Debug, Clone)]
pub(super) struct Roots(Vec<PathBuf>);

impl Roots {
    /// The root and its canonical form.
    pub(super) fn new(root: &Path) -> Self {
        let mut all = vec![root.to_path_buf()];
        if let Ok(c) = root.canonicalize() {
            if c != root {
                all.push(c);
            }
        }
        Roots(all)
    }

    /// `word` as a repo-relative path, when it names one inside the tree: relative words are
    /// taken from the root (where commands run); the root itself, anything outside, under
    /// `.git`, or climbing with `..` names nothing here.
    fn relative(&self, word: &str) -> Option<String> {
        let p = Path::new(word);
        let rel = if p.is_absolute() {
            self.0.iter().find_map(|r| p.strip_prefix(r).ok())?
        } else {
            p
        };
        let mut parts = Vec::new();
        for c in rel.components() {
            match c {
                std::path::Component::Normal(s) => parts.push(s.to_str()?),
                std::path::Component::CurDir => {}
                _ => return None,
            }
        }
        if parts.is_empty() || parts.first() == Some(&".git") {
            return None;
        }
        Some(parts.join("/"))
    }

    /// An absolute path the trace recorded, as repo-relative bytes; `None` outside the tree,
    /// the root itself and anything in `.git`.
    fn relative_bytes(&self, p: &Path) -> Option<Vec<u8>> {
        use std::os::unix::ffi::OsStrExt;
        let rel = self.0.iter().find_map(|r| p.strip_prefix(r).ok())?;
        let bytes = rel.as_os_str().as_bytes();
        let first = bytes.split(|b| *b == b'/').next().unwrap_or_default();
        (!bytes.is_empty() && first != b".git").then(|| bytes.to_vec())
    }
}

/// What one tool call in flight announced.
#[derive(Debug, Default)]
struct Announced {
    /// What the command it runs names: evidence while it runs.
    command: Evidence,
    /// The bytes each announced write will leave (`Intended`): evidence while in flight only
    /// when the disk holds exactly those bytes.
    writes: Vec<(String, Vec<u8>)>,
    /// The paths it named (an edit, a delete, a move): evidence once it completes.
    paths: Vec<String>,
}

/// What the engine learns before the changes are seen: every change the agent's traced
/// processes asked for, writes and commands announced by tool calls still in flight, and
/// the person's saves from the editor.
#[derive(Debug, Default)]
pub(super) struct Ledger {
    /// Per tool call in flight (by id), what it announced.
    announced: HashMap<String, Announced>,
    /// The bytes the person last saved to each file from the editor.
    saved: HashMap<String, Vec<u8>>,
    /// What records the agent's processes' changes; `None` where Rein cannot trace.
    trace: Option<crate::exec::Trace>,
    /// What the trace recorded, repo-relative, taken in at this round of judging.
    fresh: HashSet<Vec<u8>>,
    /// Recorded at an earlier round and kept: a process of the agent's still holds the path
    /// open, so it may still write it without asking again.
    held: HashSet<Vec<u8>>,
    /// Why the record is not whole since control last left the agent (a process ran
    /// untraced); `None` while it is.
    gap: Option<String>,
    /// Directories the agent's processes made (absent before), repo-relative, not yet taken
    /// by a step.
    made_dirs: std::collections::BTreeSet<String>,
    /// Directories they removed (there before), not yet taken by a step.
    removed_dirs: std::collections::BTreeSet<String>,
}

impl Ledger {
    /// A ledger observing `trace`; without one, only the older rules decide.
    pub(super) fn new(trace: Option<crate::exec::Trace>) -> Self {
        Ledger {
            trace,
            ..Ledger::default()
        }
    }

    /// The trace every process of the agent's runs under, if Rein can trace here.
    pub(super) fn trace(&self) -> Option<&crate::exec::Trace> {
        self.trace.as_ref()
    }

    /// Whether a change none of the agent's processes touched is someone else's: the trace
    /// is in force (`untraced` names why a process of the agent's runs without it) and
    /// nothing escaped it.
    pub(super) fn whole(&self) -> bool {
        self.trace.is_some() && self.gap.is_none()
    }

    /// A process of the agent's runs untraced (`why`): until control next leaves the agent,
    /// the older rules judge what none of its traced processes touched.
    pub(super) fn untraced(&mut self, why: String) {
        self.gap.get_or_insert(why);
    }

    /// Takes in what the trace recorded since it was last asked, and returns `evidence`
    /// with every path the agent's processes touched added. Changes a scan saw were
    /// recorded before they happened, so this is asked after the scan.
    pub(super) fn with_trace(&mut self, roots: &Roots, mut evidence: Evidence) -> Evidence {
        if let Some(trace) = &self.trace {
            let taken = trace.take();
            if let Some(gap) = taken.gaps.into_iter().next() {
                self.gap.get_or_insert(gap);
            }
            self.fresh
                .extend(taken.paths.iter().filter_map(|p| roots.relative_bytes(p)));
            let rel = |p: &PathBuf| {
                roots
                    .relative_bytes(p)
                    .and_then(|b| String::from_utf8(b).ok())
            };
            // Made and removed again (or the other way round) is where it was.
            for d in taken.made_dirs.iter().filter_map(rel) {
                if !self.removed_dirs.remove(&d) {
                    self.made_dirs.insert(d);
                }
            }
            for d in taken.removed_dirs.iter().filter_map(rel) {
                if !self.made_dirs.remove(&d) {
                    self.removed_dirs.insert(d);
                }
            }
        }
        evidence
            .traced
            .extend(self.fresh.iter().chain(&self.held).cloned());
        evidence
    }

    /// The directories the agent's processes made since a step last took them.
    pub(super) fn take_made_dirs(&mut self) -> Vec<String> {
        std::mem::take(&mut self.made_dirs).into_iter().collect()
    }

    /// The directories they removed since a step last took them.
    pub(super) fn take_removed_dirs(&mut self) -> Vec<String> {
        std::mem::take(&mut self.removed_dirs).into_iter().collect()
    }

    /// A round of judging is over (its step recorded): what was recorded until now explains
    /// no later change unless a process of the agent's still holds that path open (it may
    /// write it again without a call the filter sees).
    pub(super) fn judged(&mut self, roots: &Roots) {
        let open: HashSet<Vec<u8>> = match &self.trace {
            Some(t) if !self.fresh.is_empty() || !self.held.is_empty() => t
                .open_now()
                .iter()
                .filter_map(|p| roots.relative_bytes(p))
                .collect(),
            _ => HashSet::new(),
        };
        let fresh = std::mem::take(&mut self.fresh);
        self.held = fresh
            .into_iter()
            .chain(self.held.drain())
            .filter(|p| open.contains(p))
            .collect();
    }
    /// A tool call (`id`) announced a command line, writes with the bytes each will leave on
    /// disk, and the paths it acts on.
    pub(super) fn announce(
        &mut self,
        id: &str,
        command: Evidence,
        writes: Vec<(String, Vec<u8>)>,
        paths: Vec<String>,
    ) {
        let entry = self.announced.entry(id.to_owned()).or_default();
        entry.command.join(&command);
        entry.writes.extend(writes);
        entry.paths.extend(paths);
    }

    /// The tool call ended: what it announced becomes part of its own step's evidence.
    pub(super) fn ended(&mut self, id: &str) -> Option<Evidence> {
        let a = self.announced.remove(id)?;
        let mut ev = a.command;
        ev.paths.extend(a.paths);
        ev.paths.extend(a.writes.into_iter().map(|(p, _)| p));
        Some(ev)
    }

    /// Control left the agent (its processes are stopped, what it sent is taken in):
    /// nothing it announced or its processes asked for is still on its way.
    pub(super) fn forget_announced(&mut self) {
        self.announced.clear();
        self.fresh.clear();
        self.held.clear();
        self.gap = None;
        self.made_dirs.clear();
        self.removed_dirs.clear();
        if let Some(t) = &self.trace {
            t.forget();
        }
    }

    /// The person saved `bytes` to `path` from the editor.
    pub(super) fn saved(&mut self, path: String, bytes: Vec<u8>) {
        self.saved.insert(path, bytes);
    }

    /// Who made `change`, given the evidence of the step that found it.
    pub(super) fn judge(&self, change: &FileChange, step: &Evidence) -> Who {
        let path = change.path.as_str();
        if let (Some(saved), Some(now)) = (self.saved.get(path), change.after.as_deref()) {
            if saved.as_slice() == now {
                return Who::Human;
            }
        }
        if step.names_bytes(change.path_bytes()) {
            return Who::Agent;
        }
        let announced = self.announced.values().any(|a| {
            a.command.names_bytes(change.path_bytes())
                || a.writes.iter().any(|(p, bytes)| {
                    p == path && Some(bytes.as_slice()) == change.after.as_deref()
                })
        });
        if announced {
            Who::Agent
        } else if self.whole() {
            Who::Outside
        } else {
            Who::Unattributed
        }
    }
}

impl Engine {
    /// Before an agent step that may have changed anything in the tree is checkpointed:
    /// records what the person did meanwhile (held files, saves from the editor) as theirs,
    /// and what nothing attributes as unattributed, each as a step of its own. Returns the
    /// paths the step's `evidence` (or an announcement in flight) makes the agent's.
    /// Paths are their bytes on disk (a name need not be UTF-8).
    pub(super) fn attribute(&mut self, evidence: &Evidence) -> Vec<Vec<u8>> {
        self.absorb_held("changed by you during the agent's step");
        let Some(tip) = self.tip.clone() else {
            return Vec::new();
        };
        let changes = match self.ckpt.diff_worktree(&tip, &Default::default()) {
            Ok(c) => c,
            Err(e) => {
                self.say(
                    Level::Error,
                    format!("cannot see what the agent's step changed: {e}"),
                );
                return Vec::new();
            }
        };
        let (mut agents, mut saved, mut outside, mut unknown) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for c in changes {
            match self.authorship.judge(&c, evidence) {
                Who::Agent => agents.push(c.path_bytes().to_vec()),
                Who::Human => {
                    // Evidence for this change only: the save is now recorded.
                    self.authorship.saved.remove(&c.path);
                    saved.push(c.path_bytes().to_vec());
                }
                Who::Outside => outside.push(c.path_bytes().to_vec()),
                Who::Unattributed => unknown.push(c),
            }
        }
        for (paths, why, what) in [
            (
                saved,
                "saved from the editor during the agent's step",
                "files you saved",
            ),
            (outside, OUTSIDE, "files changed outside the agent"),
        ] {
            if paths.is_empty() {
                continue;
            }
            let n = self.next_n();
            let meta = SnapshotMeta {
                step: n,
                author: Author::Human,
                action: why,
            };
            let snap = self.ckpt.snapshot_paths(meta, &paths);
            let tip = self.tip.clone().unwrap_or_else(|| tip.clone());
            self.take_human(n, why, &tip, snap, true, what);
        }
        self.record_unattributed(&unknown);
        self.note_submodules("changed while the agent ran", Author::Unattributed);
        self.note_unrecorded_ignored(evidence);
        self.claim(evidence);
        self.authorship.judged(&self.roots);
        agents
    }

    /// What the agent's traced processes changed outside a step of theirs (a daemon its
    /// command left running, a write after the command's step was recorded): the agent's,
    /// as a step of its own that abort and rewind take back like any of its steps. Asked
    /// before the person's changes are taken in, wherever that happens.
    pub(super) fn settle_traced(&mut self) {
        let (Some(tip), Some(_)) = (self.tip.clone(), self.authorship.trace()) else {
            return;
        };
        let evidence = Evidence::none();
        // The tree first: the trace recorded each change before it happened.
        let Ok(changes) = self.ckpt.diff_worktree(&tip, &Default::default()) else {
            return;
        };
        let evidence = self.authorship.with_trace(&self.roots, evidence);
        if evidence.traced.is_empty() {
            return;
        }
        let theirs: Vec<&FileChange> = changes
            .iter()
            .filter(|c| self.authorship.judge(c, &evidence) == Who::Agent)
            .collect();
        if theirs.is_empty() {
            return;
        }
        let Some((n, action, paths, snap)) = self.snapshot_found(
            &theirs,
            Author::Agent,
            BACKGROUND,
            "what the agent's processes changed",
        ) else {
            return;
        };
        self.authorship.judged(&self.roots);
        if !snap.created {
            return;
        }
        self.tip = Some(snap.id.clone());
        let id = snap.id.clone();
        self.commit(|s| {
            s.push_step(Step::new(
                n,
                action.clone(),
                Author::Agent,
                Some(id.clone()),
                StepStatus::Done,
            ));
        });
        super::journal(
            &self.store,
            "background",
            serde_json::json!({ "n": n, "files": paths, "checkpoint": snap.id, "parent": tip }),
        );
    }

    /// Checkpoints `changes` as one step of `author`'s titled `lead: a, b, …`; `None` (and
    /// said, naming `what`) when the checkpoint fails.
    fn snapshot_found(
        &mut self,
        changes: &[&FileChange],
        author: Author,
        lead: &str,
        what: &str,
    ) -> Option<(u32, String, Vec<String>, crate::checkpoint::Snapshot)> {
        let paths: Vec<String> = changes.iter().map(|c| c.path.clone()).collect();
        let raw: Vec<&[u8]> = changes.iter().map(|c| c.path_bytes()).collect();
        let n = self.next_n();
        let action = format!("{lead}: {}", listed(&paths));
        let meta = SnapshotMeta {
            step: n,
            author,
            action: &action,
        };
        match self.ckpt.snapshot_paths(meta, &raw) {
            Ok(snap) => Some((n, action, paths, snap)),
            Err(e) => {
                self.say(Level::Error, format!("cannot checkpoint {what}: {e}"));
                None
            }
        }
    }

    /// Changes recorded as unattributed that `evidence` names, and that are on disk as they
    /// were found, become the agent step's about to be recorded (a harness can write before
    /// it reports the tool that wrote): no longer listed as unattributed, taken back by abort.
    fn claim(&mut self, evidence: &Evidence) {
        let named: Vec<state::UnattributedChange> = self
            .state()
            .unattributed_changes
            .iter()
            .filter(|u| evidence.names(&u.path))
            .cloned()
            .collect();
        let by_step = self.next_n();
        let mut claimed = Vec::new();
        for u in named {
            let Some(at) = u.checkpoint.clone() else {
                continue;
            };
            let found = self.ckpt.file_at(&at, &u.path).ok();
            let now = self.sandbox.read(&u.path).ok();
            if found.is_some() && found == now {
                claimed.push(state::ClaimedChange {
                    path: u.path,
                    checkpoint: at,
                    by_step,
                });
            }
        }
        if claimed.is_empty() {
            return;
        }
        let paths: Vec<String> = claimed.iter().map(|c| c.path.clone()).collect();
        super::journal(
            &self.store,
            "claimed",
            serde_json::json!({ "n": by_step, "files": paths }),
        );
        self.commit(|s| {
            s.unattributed_changes
                .retain(|u| !claimed.iter().any(|c| c.path == u.path));
            s.claimed_changes.extend(claimed);
        });
    }

    /// Records changes nothing attributes, as a step of its own: kept by abort, listed in
    /// the state. The agent is not told: the change may be its own, and news would cut its
    /// turn (what the person did reaches it through the reconcile report as ever).
    pub(super) fn record_unattributed(&mut self, changes: &[FileChange]) {
        if changes.is_empty() {
            return;
        }
        let Some(prev) = self.tip.clone() else { return };
        let found: Vec<&FileChange> = changes.iter().collect();
        let Some((n, action, paths, snap)) = self.snapshot_found(
            &found,
            Author::Unattributed,
            UNATTRIBUTED,
            "the changes found while the agent ran",
        ) else {
            return;
        };
        if !snap.created {
            return;
        }
        self.tip = Some(snap.id.clone());
        let at = state::now();
        let entries: Vec<UnattributedChange> = changes
            .iter()
            .map(|c| UnattributedChange {
                path: c.path.clone(),
                kind: kind_name(c),
                at: at.clone(),
                size: c.after.as_ref().map(|a| a.len() as u64),
                at_step: n,
                checkpoint: Some(snap.id.clone()),
            })
            .collect();
        let id = snap.id.clone();
        self.commit(|s| {
            s.push_step(Step::new(
                n,
                action.clone(),
                Author::Unattributed,
                Some(id.clone()),
                StepStatus::Done,
            ));
            s.unattributed_changes.extend(entries);
        });
        super::journal(
            &self.store,
            "unattributed_changes",
            serde_json::json!({ "n": n, "files": paths, "checkpoint": snap.id, "parent": prev }),
        );
    }
}

/// The action of a step that records what the agent's processes changed outside its steps.
pub(super) const BACKGROUND: &str = "changed by the agent's processes outside its steps";

/// The action of a step that records what none of the agent's traced processes touched.
pub(super) const OUTSIDE: &str =
    "changed during the agent's step by someone else (none of the agent's processes touched it)";

/// The action of a step that records unattributed changes, as the transcript shows it.
pub(super) const UNATTRIBUTED: &str =
    "changed while the agent ran; Rein cannot tell who changed it";

/// `a, b, c, … (N files)`.
fn listed(paths: &[String]) -> String {
    if paths.len() > 3 {
        format!("{}, … ({} files)", paths[..3].join(", "), paths.len())
    } else {
        paths.join(", ")
    }
}

/// added, modified or deleted.
fn kind_name(c: &FileChange) -> String {
    match (&c.before, &c.after) {
        (None, _) => "added",
        (_, None) => "deleted",
        _ => "modified",
    }
    .to_owned()
}

/// The bytes an announced write leaves on disk, given the file as it is now: a whole-file
/// write its content, an edit its one replacement (none when the text to replace is not
/// there exactly once: the tool then fails, or Rein cannot tell).
pub(super) fn announced_bytes(w: &Intended, now: Option<&[u8]>) -> Option<Vec<u8>> {
    match w {
        Intended::Write { content, .. } => Some(content.clone().into_bytes()),
        Intended::Edit { old, new, .. } => {
            let now = std::str::from_utf8(now?).ok()?;
            (!old.is_empty() && now.matches(old.as_str()).count() == 1)
                .then(|| now.replacen(old.as_str(), new, 1).into_bytes())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::ChangeKind;

    fn change(path: &str, after: Option<&str>) -> FileChange {
        FileChange {
            path: path.into(),
            raw_path: None,
            kind: ChangeKind::Modified,
            before: Some(b"old".to_vec()),
            after: after.map(|a| a.as_bytes().to_vec()),
        }
    }

    fn roots() -> Roots {
        Roots(vec![PathBuf::from("/repo")])
    }

    #[test]
    fn a_command_names_its_words_directories_globs_and_redirections() {
        let ev = Evidence::command(
            &roots(),
            "printf 'x' > m.py && rm -rf build && rm logs/*.log /repo/abs.txt ../up.txt /etc/x /repo",
        );
        for named in ["m.py", "build/a/b.o", "logs/x.log", "abs.txt"] {
            assert!(ev.names(named), "{named} should be named");
        }
        for not in ["notes.txt", "buildx", "up.txt", "logs/sub/x.txt", "etc/x"] {
            assert!(!ev.names(not), "{not} should not be named");
        }
        // A reader names nothing, and the whole tree is no evidence.
        assert!(!Evidence::command(&roots(), "cat notes.txt").names("notes.txt"));
        assert!(!Evidence::command(&roots(), "git checkout .").names("any/file"));
    }

    #[test]
    fn nothing_named_is_unattributed_and_a_save_is_the_humans() {
        let mut ledger = Ledger::default();
        let step = Evidence::command(&roots(), "./slow_test.sh");
        assert_eq!(
            ledger.judge(&change("notes.txt", Some("hi")), &step),
            Who::Unattributed
        );
        ledger.saved("notes.txt".into(), b"hi".to_vec());
        assert_eq!(
            ledger.judge(&change("notes.txt", Some("hi")), &step),
            Who::Human
        );
        // Saved other bytes than the disk's: not evidence of the person.
        assert_eq!(
            ledger.judge(&change("notes.txt", Some("hi there")), &step),
            Who::Unattributed
        );
    }

    #[test]
    fn an_announced_write_is_the_agents_only_with_its_bytes() {
        let mut ledger = Ledger::default();
        ledger.announce(
            "t1",
            Evidence::none(),
            vec![("a.txt".into(), b"new".to_vec())],
            vec!["b.txt".into()],
        );
        let none = Evidence::none();
        assert_eq!(
            ledger.judge(&change("a.txt", Some("new")), &none),
            Who::Agent
        );
        assert_eq!(
            ledger.judge(&change("a.txt", Some("other")), &none),
            Who::Unattributed
        );
        // A path it acts on is no evidence while it runs,
        assert_eq!(
            ledger.judge(&change("b.txt", Some("x")), &none),
            Who::Unattributed
        );
        // only once it completed: its announcement is its step's evidence.
        let ev = ledger.ended("t1").expect("announced");
        assert!(ev.names("a.txt") && ev.names("b.txt"));
        assert_eq!(
            ledger.judge(&change("a.txt", Some("new")), &none),
            Who::Unattributed
        );
    }

    #[test]
    fn an_announced_edit_leaves_its_one_replacement() {
        let edit = Intended::Edit {
            path: "a".into(),
            old: "b".into(),
            new: "c".into(),
        };
        assert_eq!(announced_bytes(&edit, Some(b"abd")), Some(b"acd".to_vec()));
        assert_eq!(announced_bytes(&edit, Some(b"abb")), None);
    }
}
