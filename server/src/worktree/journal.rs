//! A land's journal, `<common git dir>/rein/lands/<task>/`: every write the land will make,
//! with what the file holds before and will hold after (their bytes kept beside it, by blob
//! id), is written before the first write to the person's tree. A land cut short (kill -9 at
//! any point) is finished from it by the next engine of that tree: a file that holds its
//! `before` takes its `after`, one that holds its `after` is done, any other was changed by
//! the person since and is left as it is; the land's temporary files are removed; a planned
//! commit is made, or finished. The journal also keeps the land's open overlaps with both
//! sides' bytes, and the answers given, so a decision outlives the engine, the worktree and
//! `rein gc` (which sweeps refs, never this), and a second land does not ask again what was
//! answered.
//! Must never: write a file that holds neither its `before` nor its `after`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::commit::CommitPlan;
use super::land::{Landed, Overlap};
use super::WorktreeError;
use crate::exec::{Node, NodeKind, Sandbox, TEMP_PREFIX};

/// Where the journals of the repository with common git dir `common` live.
fn lands(common: &Path) -> PathBuf {
    common.join("rein").join("lands")
}

fn dir(common: &Path, task: &str) -> PathBuf {
    lands(common).join(task)
}

fn git_err(e: impl std::fmt::Display) -> WorktreeError {
    WorktreeError::Git(e.to_string())
}

fn io(what: &str, p: &Path) -> impl FnOnce(std::io::Error) -> WorktreeError {
    let what = format!("cannot {what} {}", p.display());
    move |source| WorktreeError::Io { what, source }
}

/// A file's kind, as journaled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
enum Kind {
    File,
    Executable,
    Link,
}

/// A file's content, kept in the journal's `blobs/` by its git blob id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stored {
    kind: Kind,
    id: String,
}

/// One write of the land.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Planned {
    /// Repo-relative path.
    pub path: String,
    /// What the file held when the land was planned (`None`: nothing).
    pub before: Option<Stored>,
    /// What it is to hold (`None`: removed).
    pub after: Option<Stored>,
    /// Whether the person's change is in `after` too (a merge), for the report.
    pub merged: bool,
}

/// An overlap waiting for its answer, with both sides' bytes.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Open {
    overlap: Overlap,
    ours: Option<Stored>,
    theirs: Option<Stored>,
}

/// An overlap answered: the same overlap (path and the agent's side) is not asked again.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Answered {
    path: String,
    theirs: Option<Stored>,
    choice: String,
}

/// A land's journal.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Journal {
    /// The task.
    pub task_id: String,
    /// Its name ("task 2"), kept once the task is gone.
    pub name: String,
    /// The working tree it lands into.
    pub from: PathBuf,
    /// The landing engine's pid: its temporary files are named by it.
    pub pid: u32,
    /// The writes, in order.
    pub writes: Vec<Planned>,
    /// Whether every write was made.
    pub applied: bool,
    /// The commit to make once applied (`as: "commit"`), until it is made.
    pub commit: Option<CommitPlan>,
    /// The overlaps waiting for an answer.
    pub open: Vec<Open>,
    /// The overlaps answered.
    pub answered: Vec<Answered>,
    /// The task's state when landed: what answering an overlap replies with, once the task
    /// is gone.
    pub state: Option<Box<crate::state::TaskState>>,
}

impl Journal {
    /// Task `task`'s journal, or a new one when it has none.
    pub fn for_task(
        common: &Path,
        task: &str,
        name: &str,
        from: &Path,
    ) -> Result<Self, WorktreeError> {
        Ok(match Self::load(&dir(common, task))? {
            Some(mut j) => {
                // A land of it cut short is finished first: its temporary files are named
                // by the engine that made them.
                if !j.applied {
                    let mut out = Landed::default();
                    j.apply(common, from, &mut out)?;
                }
                j.writes.clear();
                j.applied = false;
                j.commit = None;
                j.open.clear();
                j.pid = std::process::id();
                j
            }
            None => Journal {
                task_id: task.to_owned(),
                name: name.to_owned(),
                from: from.to_owned(),
                pid: std::process::id(),
                writes: Vec::new(),
                applied: false,
                commit: None,
                open: Vec::new(),
                answered: Vec::new(),
                state: None,
            },
        })
    }

    fn load(dir: &Path) -> Result<Option<Self>, WorktreeError> {
        let file = dir.join("land.json");
        match std::fs::read(&file) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| git_err(format!("{}: {e}", file.display()))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io("read", &file)(e)),
        }
    }

    /// Writes the journal atomically (a kill -9 leaves the old one or the new one).
    pub fn save(&self, common: &Path) -> Result<(), WorktreeError> {
        let d = dir(common, &self.task_id);
        std::fs::create_dir_all(&d).map_err(io("create", &d))?;
        let bytes = serde_json::to_vec_pretty(self).map_err(git_err)?;
        crate::state::write_atomic(&d.join("land.json"), &bytes).map_err(git_err)
    }

    /// Keeps `node`'s bytes in the journal; how the journal names them.
    pub fn store(
        &self,
        common: &Path,
        node: &Option<Node>,
    ) -> Result<Option<Stored>, WorktreeError> {
        let Some(stored) = Self::id_of(node)? else {
            return Ok(None);
        };
        let bytes = node.as_ref().map_or(&[][..], |n| n.bytes.as_slice());
        let blobs = dir(common, &self.task_id).join("blobs");
        std::fs::create_dir_all(&blobs).map_err(io("create", &blobs))?;
        let file = blobs.join(&stored.id);
        if !file.exists() {
            crate::state::write_atomic(&file, bytes).map_err(git_err)?;
        }
        Ok(Some(stored))
    }

    /// How the journal would name `node`'s bytes, without keeping them.
    fn id_of(node: &Option<Node>) -> Result<Option<Stored>, WorktreeError> {
        let Some(n) = node else { return Ok(None) };
        let kind = match n.kind {
            NodeKind::File => Kind::File,
            NodeKind::Executable => Kind::Executable,
            NodeKind::Link => Kind::Link,
        };
        let id = crate::checkpoint::blob_id(&n.bytes).map_err(git_err)?;
        Ok(Some(Stored { kind, id }))
    }

    fn node(&self, common: &Path, s: &Option<Stored>) -> Result<Option<Node>, WorktreeError> {
        let Some(s) = s else { return Ok(None) };
        let file = dir(common, &self.task_id).join("blobs").join(&s.id);
        let bytes = std::fs::read(&file).map_err(io("read", &file))?;
        let kind = match s.kind {
            Kind::File => NodeKind::File,
            Kind::Executable => NodeKind::Executable,
            Kind::Link => NodeKind::Link,
        };
        Ok(Some(Node { kind, bytes }))
    }

    /// Plans writing `after` at `path`, which holds `before`.
    pub fn plan(
        &mut self,
        common: &Path,
        path: &str,
        before: &Option<Node>,
        after: &Option<Node>,
        merged: bool,
    ) -> Result<(), WorktreeError> {
        let planned = Planned {
            path: path.to_owned(),
            before: self.store(common, before)?,
            after: self.store(common, after)?,
            merged,
        };
        self.writes.push(planned);
        Ok(())
    }

    /// Keeps `o` (with its sides' bytes) as waiting for an answer.
    pub fn ask(&mut self, common: &Path, o: &Overlap) -> Result<(), WorktreeError> {
        let open = Open {
            ours: self.store(common, &o.ours)?,
            theirs: self.store(common, &o.theirs)?,
            overlap: o.clone(),
        };
        self.open.push(open);
        Ok(())
    }

    /// The answer given before to the same overlap (the same path, the same agent's side).
    pub fn answered_before(
        &self,
        path: &str,
        theirs: &Option<Node>,
    ) -> Result<Option<&str>, WorktreeError> {
        let id = Self::id_of(theirs)?;
        Ok(self
            .answered
            .iter()
            .rev()
            .find(|a| a.path == path && a.theirs == id)
            .map(|a| a.choice.as_str()))
    }

    /// Makes every planned write in `root` that is still to make, and reports each in `out`;
    /// removes the land's temporary files. Idempotent: run again after a crash, it finishes.
    pub fn apply(
        &mut self,
        common: &Path,
        root: &Path,
        out: &mut Landed,
    ) -> Result<(), WorktreeError> {
        let tree = Sandbox::new(root).map_err(git_err)?;
        for w in &self.writes {
            let now = match tree.read_node(&w.path) {
                Ok(n) => n,
                Err(e) => {
                    out.failed.push((w.path.clone(), e.to_string()));
                    continue;
                }
            };
            let now_stored = Self::id_of(&now)?;
            let report = |out: &mut Landed| match w.merged {
                true => out.merged.push(w.path.clone()),
                false => out.applied.push(w.path.clone()),
            };
            if now_stored == w.after {
                report(out);
                continue;
            }
            if now_stored != w.before {
                out.failed.push((
                    w.path.clone(),
                    "you changed it while it was being landed: left as you have it; land again to merge it".into(),
                ));
                continue;
            }
            let written = match self.node(common, &w.after)? {
                Some(n) => tree.put(&w.path, &n),
                None => tree.remove(&w.path),
            };
            match written {
                Ok(()) => report(out),
                Err(e) => out.failed.push((w.path.clone(), e.to_string())),
            }
        }
        self.clean_temps(&tree, root);
        self.applied = true;
        self.save(common)
    }

    /// Removes the temporary files a land by this journal's engine left beside its paths.
    fn clean_temps(&self, tree: &Sandbox, root: &Path) {
        let mine = format!("{TEMP_PREFIX}{}-", self.pid);
        let parents: BTreeSet<&str> = self
            .writes
            .iter()
            .map(|w| w.path.rsplit_once('/').map_or("", |(d, _)| d))
            .collect();
        for parent in parents {
            let Ok(entries) = std::fs::read_dir(root.join(parent)) else {
                continue;
            };
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.starts_with(&mine) {
                    let rel = match parent {
                        "" => name,
                        p => format!("{p}/{name}"),
                    };
                    if let Err(e) = tree.remove(&rel) {
                        tracing::warn!("cannot remove a land's temporary file {rel}: {e}");
                    }
                }
            }
        }
    }

    /// The open overlaps, with their sides' bytes.
    pub fn overlaps(&self, common: &Path) -> Result<Vec<Overlap>, WorktreeError> {
        self.open
            .iter()
            .map(|o| {
                let mut overlap = o.overlap.clone();
                overlap.ours = self.node(common, &o.ours)?;
                overlap.theirs = self.node(common, &o.theirs)?;
                Ok(overlap)
            })
            .collect()
    }
}

/// Records the answer to overlap `decision` of `task`; the journal goes once nothing waits
/// and the task's worktree is gone (`gone`), nothing being left to land again.
pub fn answer(
    common: &Path,
    task: &str,
    decision: &str,
    choice: &str,
    gone: bool,
) -> Result<(), WorktreeError> {
    let Some(mut j) = Journal::load(&dir(common, task))? else {
        return Ok(());
    };
    if let Some(i) = j
        .open
        .iter()
        .position(|o| o.overlap.decision_id == decision)
    {
        let o = j.open.remove(i);
        j.answered.push(Answered {
            path: o.overlap.path,
            theirs: o.theirs,
            choice: choice.to_owned(),
        });
    }
    finish(common, &j, gone)
}

/// Saves `j`, or removes it when nothing of it is needed any more: nothing waits, and the
/// task's worktree is gone (`gone`).
pub fn finish(common: &Path, j: &Journal, gone: bool) -> Result<(), WorktreeError> {
    if gone && j.open.is_empty() && j.applied && j.commit.is_none() {
        return forget(common, &j.task_id);
    }
    j.save(common)
}

/// Task `task`'s worktree is gone: its journal goes unless overlaps wait.
pub fn gone(common: &Path, task: &str) -> Result<(), WorktreeError> {
    match Journal::load(&dir(common, task))? {
        Some(j) => finish(common, &j, true),
        None => Ok(()),
    }
}

/// Removes task `task`'s journal (the task is discarded).
pub fn forget(common: &Path, task: &str) -> Result<(), WorktreeError> {
    let d = dir(common, task);
    match std::fs::remove_dir_all(&d) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io("remove", &d)(e)),
    }
}

/// Held by every land and every recovery in this process: a recovery and a land of the
/// same task never run at once.
pub static LANDING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Finishes every land into `root` that a crash cut short (its writes, its temporary files,
/// its commit), and returns every journal into `root` that has overlaps waiting.
pub fn recover(common: &Path, root: &Path) -> Vec<Journal> {
    let _one = LANDING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let Ok(entries) = std::fs::read_dir(lands(common)) else {
        return Vec::new();
    };
    let mut waiting = Vec::new();
    for e in entries.flatten() {
        let j = match Journal::load(&e.path()) {
            Ok(Some(j)) => j,
            Ok(None) => continue,
            Err(err) => {
                tracing::warn!("cannot read a land's journal: {err}");
                continue;
            }
        };
        if j.from != root {
            continue;
        }
        let mut j = j;
        if !j.applied || j.commit.is_some() {
            let mut out = Landed::default();
            if let Err(err) = j.apply(common, root, &mut out) {
                tracing::warn!("cannot finish {}'s land: {err}", j.name);
                continue;
            }
            if let Some(plan) = j.commit.take() {
                match super::commit::resume(root, &plan, &j.task_id) {
                    Ok(id) => {
                        tracing::info!("{}'s land was committed as {id} after a crash", j.name)
                    }
                    Err(err) => tracing::warn!("{}'s land: {err}", j.name),
                }
            }
            tracing::info!(
                "{}'s land, cut short, is finished: {} file(s) written, {} left as you changed them",
                j.name,
                out.applied.len() + out.merged.len(),
                out.failed.len()
            );
            if let Err(err) = j.save(common) {
                tracing::warn!("cannot save {}'s land: {err}", j.name);
            }
        }
        if !j.open.is_empty() {
            waiting.push(j);
        }
    }
    waiting
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn file(s: &str) -> Option<Node> {
        Some(Node {
            kind: NodeKind::File,
            bytes: s.as_bytes().to_vec(),
        })
    }

    fn content(root: &Path, rel: &str) -> Option<String> {
        std::fs::read_to_string(root.join(rel)).ok()
    }

    fn temps(root: &Path) -> Vec<String> {
        let mut left = Vec::new();
        for dir in [root.to_owned(), root.join("d")] {
            for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.starts_with(TEMP_PREFIX) {
                    left.push(name);
                }
            }
        }
        left
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// A land cut by kill -9 after any of its writes, with a temporary file left and the
        /// person writing some files before the next engine starts: the recovery finishes
        /// every write whose file still holds its `before` or `after`, leaves the person's,
        /// and leaves no temporary file.
        #[test]
        fn a_land_cut_after_any_write_is_finished_and_never_overwrites_the_person(
            files in proptest::collection::vec((any::<bool>(), any::<bool>(), any::<bool>()), 1..12),
            cut in 0usize..12,
            temp_left in any::<bool>(),
        ) {
            let root = tempfile::tempdir().expect("root");
            let common = tempfile::tempdir().expect("common");
            let root_path = root.path().canonicalize().expect("canonical");
            let mut j = Journal::for_task(common.path(), "t1", "task 1", &root_path).expect("journal");
            let tree = Sandbox::new(&root_path).expect("tree");
            let mut expected = Vec::new();
            for (i, (existed, removed, person)) in files.iter().enumerate() {
                let rel = if i % 2 == 0 { format!("f{i}") } else { format!("d/f{i}") };
                let before = existed.then(|| format!("before {i}\n"));
                if let Some(b) = &before {
                    tree.put(&rel, &file(b).expect("node")).expect("put");
                }
                let after = (!removed || !existed).then(|| format!("after {i}\n"));
                j.plan(common.path(), &rel, &before.as_deref().and_then(file), &after.as_deref().and_then(file), false)
                    .expect("plan");
                expected.push((rel, after, *person));
            }
            j.save(common.path()).expect("save");
            // The crash: the first `cut` writes made, one temporary file left beside them.
            for w in j.writes.iter().take(cut) {
                match j.node(common.path(), &w.after).expect("node") {
                    Some(n) => tree.put(&w.path, &n).expect("put"),
                    None => tree.remove(&w.path).expect("remove"),
                }
            }
            if temp_left {
                // Beside a path the land writes, where its `put` makes them.
                let at = j.writes[cut.min(j.writes.len() - 1)].path.rsplit_once('/').map_or("", |(d, _)| d);
                std::fs::create_dir_all(root_path.join(at)).expect("dir");
                let name = format!("{TEMP_PREFIX}{}-99", j.pid);
                std::fs::write(root_path.join(at).join(name), "half").expect("temp");
            }
            // The person, before the next engine.
            for (rel, _, person) in &expected {
                if *person {
                    tree.put(rel, &file("the person's\n").expect("node")).expect("put");
                }
            }
            let waiting = recover(common.path(), &root_path);
            prop_assert!(waiting.is_empty());
            for (rel, after, person) in &expected {
                let want = if *person { Some("the person's\n".to_owned()) } else { after.clone() };
                prop_assert_eq!(content(&root_path, rel), want, "{}", rel);
            }
            prop_assert_eq!(temps(&root_path), Vec::<String>::new());
            let saved = Journal::load(&dir(common.path(), "t1")).expect("load").expect("kept");
            prop_assert!(saved.applied);
        }
    }

    #[test]
    fn an_answered_overlap_is_known_again_by_its_path_and_the_agents_side() {
        let common = tempfile::tempdir().expect("common");
        let mut j = Journal::for_task(common.path(), "t1", "task 1", Path::new("/x")).expect("j");
        let overlap = Overlap {
            path: "a.txt".into(),
            decision_id: "land-t1-1".into(),
            clash: super::super::land::Clash::Lines,
            hunks: Vec::new(),
            ours: file("mine\n"),
            theirs: file("agent's\n"),
            unsaved: None,
        };
        j.ask(common.path(), &overlap).expect("ask");
        j.applied = true;
        j.save(common.path()).expect("save");
        let back = Journal::load(&dir(common.path(), "t1"))
            .expect("load")
            .expect("some");
        assert_eq!(
            back.overlaps(common.path()).expect("overlaps")[0].theirs,
            file("agent's\n")
        );
        answer(common.path(), "t1", "land-t1-1", "keep mine", false).expect("answer");
        let j = Journal::for_task(common.path(), "t1", "task 1", Path::new("/x")).expect("j");
        assert_eq!(
            j.answered_before("a.txt", &file("agent's\n")).expect("id"),
            Some("keep mine")
        );
        assert_eq!(
            j.answered_before("a.txt", &file("other\n")).expect("id"),
            None
        );
        // Gone, with nothing waiting: the journal goes.
        gone(common.path(), "t1").expect("gone");
        assert!(!dir(common.path(), "t1").exists());
    }
}
