//! Ignored files the agent writes: no checkpoint holds them, so what each held is saved just
//! before a write Rein sees coming (its own write, a write a tool call announced with its
//! content, a command whose line names the file), and abort and rewind put it back from there
//! (`checkpoint::ignored` keeps the bytes under `refs/rein/<task>/ignored`).
//!
//! What the write left is recorded when its step is: abort takes back only what is still the
//! agent's (the same three-way revert as a tracked file's), so a change the person made to the
//! file afterwards stays. A write Rein cannot see coming (a command that does not name the
//! file) leaves nothing to restore from: when the watchers see an ignored file change while
//! the agent holds control (inside an ignored directory too, as far as `checkpoint` follows
//! those) and nothing was saved of it, the change is recorded as a step that says so (the
//! agent's where a tool call or command names the file, else unattributed; many under one
//! directory as that directory with their number) and listed in `unrecordedIgnored`, and
//! abort names it as left: never removed, even when it is new, unless a save proves it the
//! agent's.
//!
//! Must never: save or restore a file that a checkpoint holds (those are the chain's), nor a
//! directory.

use std::collections::BTreeMap;

use super::authorship::Evidence;
use super::{ControlError, Engine, Level, Touched};
use crate::checkpoint::{EntryMode, IgnoredChange, IgnoredSave, Saved};
use crate::exec::{Node, NodeKind};
use crate::reconcile::verdict;
use crate::state::{self, Author, Step, StepStatus, UnrecordedIgnored};

/// What abort did to ignored files.
#[derive(Debug, Default)]
pub(super) struct IgnoredUndone {
    /// How many files it put back or removed.
    pub(super) files: usize,
    /// Files it left, each with why (naming the file).
    pub(super) left: Vec<(String, String)>,
}

fn saved(node: Option<Node>) -> Saved {
    node.map(|n| {
        let mode = match n.kind {
            NodeKind::File => EntryMode::Regular,
            NodeKind::Executable => EntryMode::Executable,
            NodeKind::Link => EntryMode::Symlink,
        };
        (n.bytes, mode)
    })
}

fn node(saved: &Saved) -> Option<Node> {
    saved.as_ref().map(|(bytes, mode)| Node {
        kind: match mode {
            EntryMode::Regular => NodeKind::File,
            EntryMode::Executable => NodeKind::Executable,
            EntryMode::Symlink => NodeKind::Link,
        },
        bytes: bytes.clone(),
    })
}

fn side(node: &Option<Node>) -> Option<(&[u8], NodeKind)> {
    node.as_ref().map(|n| (n.bytes.as_slice(), n.kind))
}

/// What a step says of the ignored path `c` (shown as `shown`) that changed with nothing saved.
fn unrecorded_action(c: &IgnoredChange, shown: &str, by_agent: bool) -> String {
    let verb = if c.gone { "removed" } else { "changed" };
    match (c.lost, c.inside, by_agent) {
        (true, _, _) => format!("{shown}, which git ignores, may have changed while the agent ran (more changes than Rein could follow); Rein did not record what it held, so abort leaves it"),
        (false, 0, true) => format!("the agent {verb} {shown}, which git ignores; its previous content was not recorded, so abort cannot put it back"),
        (false, 0, false) => format!("{shown}, which git ignores, was {verb} while the agent ran; Rein cannot tell who did it and did not record its previous content, so abort leaves it"),
        (false, n, true) => format!("the agent changed {n} paths inside {shown}, which git ignores; their previous content was not recorded, so abort cannot put them back"),
        (false, n, false) => format!("{n} paths inside {shown}, which git ignores, changed while the agent ran; Rein cannot tell who changed them and did not record their previous content, so abort leaves them"),
    }
}

impl Engine {
    /// Just before a write to `path` that Rein makes or a tool call announced: when the file
    /// is ignored, saves what it holds, with what the write will leave when known (`after`:
    /// its bytes; the file keeps its mode). A save that fails is told: the write goes ahead,
    /// as it would have without this.
    pub(super) fn save_ignored(&mut self, path: &str, after: Option<&[u8]>) {
        let Ok(now) = self.sandbox.read_node(path) else {
            return;
        };
        let link = now.as_ref().is_some_and(|n| n.kind == NodeKind::Link);
        match self.ckpt.is_ignored_file(path.as_bytes(), link) {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => {
                tracing::warn!(error = %e, "cannot tell whether {path} is ignored");
                return;
            }
        }
        let mode = match now.as_ref().map(|n| n.kind) {
            Some(NodeKind::Executable) => EntryMode::Executable,
            _ => EntryMode::Regular,
        };
        let after: Option<Saved> = after.map(|b| Some((b.to_vec(), mode)));
        if let Err(e) = self
            .ckpt
            .save_ignored(path.as_bytes(), &saved(now), after.as_ref(), true)
        {
            self.say(
                Level::Warning,
                format!("cannot save what {path} (ignored by git) holds before the agent writes it, so abort cannot put it back: {e}"),
            );
        }
    }

    /// Before a command whose line names files (`Evidence::command`): saves each named file
    /// that is ignored, or absent and would be. A named directory is not saved (it may hold a
    /// whole build); a write into it is one Rein cannot see coming.
    pub(super) fn save_named_ignored(&mut self, evidence: &Evidence) {
        self.note_absent_named(evidence);
        for path in evidence.named_paths().to_vec() {
            // `save_ignored` passes over a directory: reading it as a file fails.
            self.save_ignored(&path, None);
        }
    }

    /// An agent step is being recorded: what the writes it names left in the ignored files
    /// saved before them is recorded now, so abort knows what is the agent's.
    pub(super) fn settle_ignored(&mut self, touched: &Touched) {
        let names = |path: &str| match touched {
            Touched::Nothing => false,
            Touched::Path(p) => p == path,
            Touched::Tree(evidence) => evidence.names(path),
        };
        let saves = match self.ckpt.ignored_saves() {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the ignored files' saves");
                return;
            }
        };
        for s in saves.iter().filter(|s| s.after.is_none()) {
            if !names(&s.shown()) {
                continue;
            }
            let Ok(now) = self.sandbox.read_node(&s.path) else {
                continue;
            };
            if let Err(e) = self.ckpt.set_ignored_after(s.seq, &saved(now)) {
                tracing::warn!(error = %e, "cannot record what the agent left in {}", s.shown());
            }
        }
    }

    /// The agent gets control (a resume, a handback): ignored files changed before now are
    /// not its, and saves made before now do not cover what it changes from here on.
    pub(super) fn ignored_hold_begins(&mut self) {
        if let Err(e) = self.ckpt.take_ignored_changes(&|_| false) {
            tracing::debug!(error = %e, "cannot read which ignored files changed");
        }
        self.ignored_from = match self.ckpt.ignored_saves() {
            Ok(saves) => saves.iter().map(|s| s.seq).max().unwrap_or(0),
            Err(_) => self.ignored_from,
        };
    }

    /// An agent step is being recorded: each ignored file the watcher saw change since the
    /// last step, of which nothing was saved since the agent got control, is recorded as a
    /// step saying its previous content was not recorded: the agent's where `evidence` names
    /// it, else unattributed (never claimed for either on a guess).
    pub(super) fn note_unrecorded_ignored(&mut self, evidence: &Evidence) {
        let saves = self.ckpt.ignored_saves().unwrap_or_default();
        let from = self.ignored_from;
        // Saved since the agent got control (abort puts it back), or the temp file of one of
        // Rein's own writes: nothing to report. Left out before many paths are told as their
        // directory.
        let covered = |path: &str| {
            let name = path.rsplit('/').next().unwrap_or(path);
            name.starts_with(crate::exec::TEMP_PREFIX)
                || saves
                    .iter()
                    .any(|s| s.by_agent && s.seq > from && s.shown() == path)
        };
        let changes = match self.ckpt.take_ignored_changes(&covered) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read which ignored files changed");
                return;
            }
        };
        if changes.is_empty() {
            return;
        }
        let listed: Vec<String> = self
            .state()
            .unrecorded_ignored
            .iter()
            .map(|u| u.path.clone())
            .collect();
        for c in changes.iter().filter(|c| !covered(&c.path)) {
            let shown = if c.dir {
                format!("{}/", c.path)
            } else {
                c.path.clone()
            };
            if listed.contains(&shown) {
                continue;
            }
            let inside = format!("{}/", c.path);
            // Many paths told as their directory are the agent's only when its line names it,
            // or its traced processes wrote inside it.
            let by_agent = evidence.names(&c.path)
                || (c.dir && evidence.traced_under(&c.path))
                || (c.dir
                    && c.inside == 0
                    && !c.lost
                    && evidence
                        .named_paths()
                        .iter()
                        .any(|p| p.starts_with(&inside)));
            let n = self.next_n();
            if self.authorship.whole() {
                // Observed: the agent's (`.pytest_cache`, `target/`) is listed quietly with the
                // step about to be recorded, never a step of its own, so steps keep the numbers
                // live output gave them; anyone else's is theirs, and abort never touches it.
                if by_agent {
                    let entry = UnrecordedIgnored {
                        path: shown.clone(),
                        by_agent,
                        gone: c.gone,
                        at_step: n,
                    };
                    self.commit(|s| s.unrecorded_ignored.push(entry));
                }
                continue;
            }
            let action = unrecorded_action(c, &shown, by_agent);
            let author = if by_agent {
                Author::Agent
            } else {
                Author::Unattributed
            };
            let tip = self.tip.clone();
            let entry = UnrecordedIgnored {
                path: shown.clone(),
                by_agent,
                gone: c.gone,
                at_step: n,
            };
            self.commit(|s| {
                s.push_step(Step::new(n, action.clone(), author, tip, StepStatus::Done));
                s.unrecorded_ignored.push(entry);
            });
            super::journal(
                &self.store,
                "ignored_unrecorded",
                serde_json::json!({ "n": n, "path": shown, "by_agent": by_agent, "at": state::now() }),
            );
        }
    }

    /// Abort: every ignored file the agent wrote goes back to what it held before, newest
    /// write first, keeping what the person changed since; one it made is removed, with the
    /// directories made for it.
    pub(super) fn revert_ignored(&mut self) -> IgnoredUndone {
        let mut done = IgnoredUndone::default();
        let saves = match self.ckpt.ignored_saves() {
            Ok(s) => s,
            Err(e) => {
                let why = format!("cannot read what ignored files held before the agent's writes (refs/rein/{}/ignored): {e}", self.state().task.id);
                done.left.push((String::new(), why));
                return done;
            }
        };
        // Per path: what it is to end with, and when the oldest save of it was made.
        let mut target = BTreeMap::<Vec<u8>, (String, Option<Node>, i64)>::new();
        let mut unknown = BTreeMap::<Vec<u8>, String>::new();
        for s in saves.iter().rev().filter(|s| s.by_agent) {
            let shown = s.shown();
            let now = match target.get(&s.path) {
                Some((_, n, _)) => n.clone(),
                None => match self.sandbox.read_node(&s.path) {
                    Ok(n) => n,
                    Err(e) => {
                        done.left.push((shown.clone(), format!("{shown}: {e}")));
                        continue;
                    }
                },
            };
            let before = node(&s.before);
            let Some(after) = &s.after else {
                // The step that wrote it never ended: what it left is not known as the agent's.
                if now != before {
                    unknown.insert(s.path.clone(), shown);
                }
                target.insert(s.path.clone(), (s.shown(), now, s.time));
                continue;
            };
            let after = node(after);
            let next = verdict::revert_node(side(&before), side(&after), side(&now), |k| {
                k != NodeKind::Link
            })
            .map_or(now, |r| r.node.map(|(bytes, kind)| Node { kind, bytes }));
            target.insert(s.path.clone(), (shown, next, s.time));
        }
        let task = self.state().task.id.clone();
        let mut removed = Vec::new();
        for (raw, (path, content, since)) in target {
            if unknown.contains_key(&raw) {
                let why = format!("the agent may have changed {path}, which git ignores, in a step that never ended; what it held before is at refs/rein/{task}/ignored");
                done.left.push((path, why));
                continue;
            }
            let removing = content.is_none();
            let put = self.sandbox.read_node(&raw).and_then(|disk| {
                if disk == content {
                    return Ok(false);
                }
                match &content {
                    Some(c) => self.sandbox.put(&raw, c)?,
                    None => self.sandbox.remove(&raw)?,
                }
                Ok(true)
            });
            match put {
                Ok(false) => {}
                Ok(true) => {
                    done.files += 1;
                    (self.notify)(super::Notice::Wrote {
                        path,
                        unsaved: None,
                    });
                    if removing {
                        removed.push((raw, since));
                    }
                }
                Err(e) => done.left.push((path.clone(), format!("{path}: {e}"))),
            }
        }
        self.remove_made_dirs(&removed);
        done
    }

    /// Rewind to checkpoint `target`: every ignored file the agent wrote after it goes back to
    /// what it held then, while it still holds what the agent's last write left (a change of
    /// the person's since is kept, as a rewind keeps theirs in tracked files; what it holds now
    /// is saved first, as the rewind's own). Returns the paths it changed.
    pub(super) fn rewind_ignored(&mut self, target: &str) -> Result<Vec<String>, ControlError> {
        let saves = self.ckpt.ignored_saves()?;
        if saves.is_empty() {
            return Ok(Vec::new());
        }
        let list = self.ckpt.list()?;
        let Some(at) = list.iter().position(|c| c.id == target) else {
            return Ok(Vec::new());
        };
        // A save made on `target` or a later checkpoint (the list is newest first) follows it.
        let follows = |s: &IgnoredSave| {
            s.tip
                .as_ref()
                .and_then(|t| list.iter().position(|c| &c.id == t))
                .is_none_or(|p| p <= at)
        };
        // Per path, the agent's first write after `target` (what it held then) and its last
        // (what the agent left).
        let mut first = BTreeMap::<Vec<u8>, (&IgnoredSave, &IgnoredSave)>::new();
        for s in saves.iter().filter(|s| s.by_agent && follows(s)) {
            first
                .entry(s.path.clone())
                .and_modify(|(_, last)| *last = s)
                .or_insert((s, s));
        }
        let mut changed = Vec::new();
        for (raw, (s, last)) in first {
            let now = self.sandbox.read_node(&raw)?;
            let then = node(&s.before);
            let left = last.after.as_ref().map(node);
            // Only while it is exactly what the agent left (a write whose step never ended is
            // not known as the agent's).
            if now == then || left != Some(now.clone()) {
                continue;
            }
            self.ckpt
                .save_ignored(&raw, &saved(now), Some(&s.before), false)?;
            match &then {
                Some(n) => self.sandbox.put(&raw, n)?,
                None => self.sandbox.remove(&raw)?,
            }
            changed.push(s.shown());
        }
        Ok(changed)
    }
}
