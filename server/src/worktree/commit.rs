//! Committing a land (`as: "commit"`): the commit is the person's HEAD plus the task's landed
//! change, and nothing else. Their staged and unstaged lines stay where they were: each
//! landed path's index entry takes the task's change too, so what is staged and what is not
//! is the same after the land as before. The commit is built in a temporary index, so a hook
//! that refuses it leaves the person's index exactly as it was; their hooks run, as for any
//! commit of theirs.
//!
//! Git's filters (LFS, eol, ident) decide what a file's bytes are in a commit, so every blob
//! is made by git from the bytes on disk or through `git hash-object --path`, and what HEAD
//! and the index hold is read back through `git cat-file --filters`: the merge is of the
//! bytes as the person sees them.
//! Must never: commit a line the person had not committed, or change their index but for the
//! task's change.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::path::Path;
use std::process::Stdio;

use serde::{Deserialize, Serialize};

use super::land::Landed;
use super::WorktreeError;
use crate::checkpoint;
use crate::exec::{Node, NodeKind};
use crate::reconcile::merge::{merge3, Merge};

/// One run of git in `root`, optionally on index file `index` and with `input` on stdin.
fn git(
    root: &Path,
    index: Option<&Path>,
    args: &[&str],
    input: Option<&[u8]>,
) -> Result<Vec<u8>, WorktreeError> {
    let mut cmd = checkpoint::layout::git(root);
    cmd.args(args);
    if let Some(i) = index {
        cmd.env("GIT_INDEX_FILE", i);
    }
    cmd.stdin(if input.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| WorktreeError::Io {
        what: "cannot run git".into(),
        source: e,
    })?;
    if let (Some(bytes), Some(mut stdin)) = (input, child.stdin.take()) {
        // A failed write shows as git's own failure below.
        let _ = stdin.write_all(bytes);
    }
    let out = child.wait_with_output().map_err(|e| WorktreeError::Io {
        what: "cannot run git".into(),
        source: e,
    })?;
    if !out.status.success() {
        let said = String::from_utf8_lossy(&out.stderr).trim().to_owned();
        let said = if said.is_empty() {
            String::from_utf8_lossy(&out.stdout).trim().to_owned()
        } else {
            said
        };
        return Err(WorktreeError::Git(format!("git {}: {said}", args[0])));
    }
    Ok(out.stdout)
}

/// The paths of `root` with any uncommitted change (staged, unstaged or untracked), read
/// before landing: their commit and index entries need the slow, exact path.
pub fn uncommitted(root: &Path) -> Result<BTreeSet<String>, WorktreeError> {
    let out = git(
        root,
        None,
        &[
            "status",
            "--porcelain=v1",
            "-z",
            "--untracked-files=all",
            "--no-renames",
        ],
        None,
    )?;
    Ok(out
        .split(|&b| b == 0)
        .filter(|r| r.len() > 3)
        .map(|r| String::from_utf8_lossy(&r[3..]).into_owned())
        .collect())
}

/// An index entry: its mode and blob id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    mode: u32,
    id: String,
}

fn mode_of(kind: NodeKind) -> u32 {
    match kind {
        NodeKind::File => 0o100644,
        NodeKind::Executable => 0o100755,
        NodeKind::Link => 0o120000,
    }
}

fn kind_of(mode: u32) -> NodeKind {
    match mode {
        0o120000 => NodeKind::Link,
        0o100755 => NodeKind::Executable,
        _ => NodeKind::File,
    }
}

/// `path`'s entry in `what` (`HEAD` or the index, `""`).
fn entry(root: &Path, what: &str, path: &str) -> Result<Option<Entry>, WorktreeError> {
    let out = if what.is_empty() {
        git(root, None, &["ls-files", "-s", "-z", "--", path], None)?
    } else {
        match git(root, None, &["ls-tree", "-z", what, "--", path], None) {
            Ok(o) => o,
            // An unborn branch: nothing committed yet.
            Err(_) if head(root).is_none() => Vec::new(),
            Err(e) => return Err(e),
        }
    };
    let line = String::from_utf8_lossy(&out);
    let Some(rec) = line.split('\0').find(|r| !r.is_empty()) else {
        return Ok(None);
    };
    let mut f = rec.split_whitespace();
    let mode = f.next().and_then(|m| u32::from_str_radix(m, 8).ok());
    let id = if what.is_empty() { f.next() } else { f.nth(1) };
    match (mode, id) {
        (Some(mode), Some(id)) if mode != 0o160000 => Ok(Some(Entry {
            mode,
            id: id.to_owned(),
        })),
        _ => Ok(None),
    }
}

/// An entry's content as the person's files would hold it (filters applied).
fn smudged(root: &Path, path: &str, e: &Option<Entry>) -> Result<Option<Node>, WorktreeError> {
    let Some(e) = e else { return Ok(None) };
    let kind = kind_of(e.mode);
    let bytes = if kind == NodeKind::Link {
        git(root, None, &["cat-file", "blob", &e.id], None)?
    } else {
        let at = format!("--path={path}");
        git(root, None, &["cat-file", "--filters", &at, &e.id], None)?
    };
    Ok(Some(Node { kind, bytes }))
}

/// The entry git makes of `node` at `path` (its clean filters applied to a file).
fn hashed(root: &Path, path: &str, node: &Node) -> Result<Entry, WorktreeError> {
    let id = if node.kind == NodeKind::Link {
        git(
            root,
            None,
            &["hash-object", "-w", "--stdin"],
            Some(&node.bytes),
        )?
    } else {
        let at = format!("--path={path}");
        git(
            root,
            None,
            &["hash-object", "-w", &at, "--stdin"],
            Some(&node.bytes),
        )?
    };
    Ok(Entry {
        mode: mode_of(node.kind),
        id: String::from_utf8_lossy(&id).trim().to_owned(),
    })
}

/// `side` with the task's change (`base` to `theirs`) brought in; `None` when it cannot be
/// brought in cleanly, and `side` stays.
fn with_change(
    base: &Option<Node>,
    side: &Option<Node>,
    theirs: &Option<Node>,
) -> Option<Option<Node>> {
    if side == base {
        return Some(theirs.clone());
    }
    if side == theirs {
        return Some(side.clone());
    }
    let (Some(b), Some(s), Some(t)) = (base, side, theirs) else {
        return None;
    };
    if [b, s, t].iter().any(|n| n.kind == NodeKind::Link) {
        return None;
    }
    let text = |n: &Node| String::from_utf8(n.bytes.clone()).ok();
    match merge3(&text(b)?, &text(s)?, &text(t)?) {
        Merge::Clean(m) => Some(Some(Node {
            kind: if s.kind == b.kind { t.kind } else { s.kind },
            bytes: m.into_bytes(),
        })),
        Merge::Conflict { .. } => None,
    }
}

/// `--index-info` records setting (or, with no entry, removing) each path.
fn index_info(entries: &BTreeMap<String, Option<Entry>>) -> Vec<u8> {
    let mut v = Vec::new();
    for (path, e) in entries {
        match e {
            Some(e) => v.extend_from_slice(format!("{:o} {}\t{path}", e.mode, e.id).as_bytes()),
            None => v.extend_from_slice(
                format!("0 0000000000000000000000000000000000000000\t{path}").as_bytes(),
            ),
        }
        v.push(0);
    }
    v
}

/// How a land is committed, worked out before anything is committed and journaled, so a
/// commit cut short by a crash is finished exactly as planned.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CommitPlan {
    /// The commit's message.
    pub message: String,
    /// HEAD before the commit (`None`: an unborn branch).
    pub head: Option<String>,
    /// Paths the person had not touched: both indexes take them from disk.
    pub fast: Vec<String>,
    /// The commit's entries for the other paths (`None`: removed).
    pub commit: BTreeMap<String, Option<Entry>>,
    /// The person's index entries for those paths after the commit.
    pub index: BTreeMap<String, Option<Entry>>,
}

fn head(root: &Path) -> Option<String> {
    git(root, None, &["rev-parse", "--verify", "-q", "HEAD"], None)
        .ok()
        .map(|o| String::from_utf8_lossy(&o).trim().to_owned())
}

/// Plans committing what `landed` wrote in `root` on its current branch: HEAD plus the task's
/// change to each path and nothing else; `before` is [`uncommitted`] as it was before
/// landing. Paths whose change cannot be put on HEAD cleanly go to `landed.not_committed`.
pub fn plan(
    root: &Path,
    landed: &mut Landed,
    before: &BTreeSet<String>,
    message: &str,
) -> Result<CommitPlan, WorktreeError> {
    let written = landed.written();
    let (fast, slow): (Vec<String>, Vec<String>) =
        written.into_iter().partition(|p| !before.contains(p));
    let mut plan = CommitPlan {
        message: message.to_owned(),
        head: head(root),
        fast,
        commit: BTreeMap::new(),
        index: BTreeMap::new(),
    };
    for path in &slow {
        let Some((base, theirs)) = landed.sides.get(path) else {
            landed.not_committed.push(path.clone());
            continue;
        };
        let head = entry(root, "HEAD", path)?;
        let staged = entry(root, "", path)?;
        let head_node = smudged(root, path, &head)?;
        let Some(c) = with_change(base, &head_node, theirs) else {
            landed.not_committed.push(path.clone());
            continue;
        };
        let c_entry = c.as_ref().map(|n| hashed(root, path, n)).transpose()?;
        plan.commit.insert(path.clone(), c_entry.clone());
        let i_entry = if staged == head {
            c_entry
        } else {
            let staged_node = smudged(root, path, &staged)?;
            match with_change(base, &staged_node, theirs) {
                Some(n) => n.as_ref().map(|n| hashed(root, path, n)).transpose()?,
                None => staged,
            }
        };
        plan.index.insert(path.clone(), i_entry);
    }
    if plan.fast.is_empty() && plan.commit.is_empty() {
        return Err(WorktreeError::Git(
            "nothing of the task's change could be put on your commits: nothing was committed"
                .into(),
        ));
    }
    Ok(plan)
}

const UPDATE: [&str; 5] = ["update-index", "--add", "--remove", "-z", "--stdin"];
const INFO: [&str; 3] = ["update-index", "-z", "--index-info"];

fn nul_list(paths: &[String]) -> Vec<u8> {
    let mut v = Vec::new();
    for p in paths {
        v.extend_from_slice(p.as_bytes());
        v.push(0);
    }
    v
}

/// Makes `plan`'s commit in a temporary index (named for `task`): the person's index is not
/// touched. Their hooks run; one that refuses ends it with the hook's words.
pub fn make(root: &Path, plan: &CommitPlan, task: &str) -> Result<String, WorktreeError> {
    let gitdir = checkpoint::layout::open(root)
        .map_err(|e| WorktreeError::Git(e.to_string()))?
        .path()
        .to_path_buf();
    // One per task: two tasks may land into the same tree at once.
    let index = gitdir.join(format!("rein-land-index-{task}"));
    let _guard = IndexGuard(index.clone());
    match &plan.head {
        Some(h) => git(root, Some(&index), &["read-tree", h], None)?,
        None => git(root, Some(&index), &["read-tree", "--empty"], None)?,
    };
    if !plan.fast.is_empty() {
        git(root, Some(&index), &UPDATE, Some(&nul_list(&plan.fast)))?;
    }
    if !plan.commit.is_empty() {
        git(root, Some(&index), &INFO, Some(&index_info(&plan.commit)))?;
    }
    git(
        root,
        Some(&index),
        &["commit", "--quiet", "-m", &plan.message],
        None,
    )?;
    head(root).ok_or_else(|| WorktreeError::Git("the commit left no HEAD".into()))
}

/// Gives the person's index the task's change to each path of `plan`, once committed.
pub fn update_index(root: &Path, plan: &CommitPlan) -> Result<(), WorktreeError> {
    if !plan.fast.is_empty() {
        git(root, None, &UPDATE, Some(&nul_list(&plan.fast)))?;
    }
    if !plan.index.is_empty() {
        git(root, None, &INFO, Some(&index_info(&plan.index)))?;
    }
    Ok(())
}

/// Finishes `plan` after a crash: commits it if HEAD has not moved, else only updates the
/// index if HEAD is its commit; the commit's id, or why it was left.
pub fn resume(root: &Path, plan: &CommitPlan, task: &str) -> Result<String, WorktreeError> {
    let now = head(root);
    if now == plan.head {
        let id = make(root, plan, task)?;
        update_index(root, plan)?;
        return Ok(id);
    }
    let parent = head_parent(root);
    let message = git(root, None, &["log", "-1", "--format=%B"], None)
        .map(|m| String::from_utf8_lossy(&m).trim().to_owned())
        .unwrap_or_default();
    match now {
        Some(id) if parent == plan.head && message == plan.message.trim() => {
            update_index(root, plan)?;
            Ok(id)
        }
        _ => Err(WorktreeError::Git(
            "HEAD moved before the land's commit was made: the files are landed, not committed"
                .into(),
        )),
    }
}

fn head_parent(root: &Path) -> Option<String> {
    git(root, None, &["rev-parse", "--verify", "-q", "HEAD^"], None)
        .ok()
        .map(|o| String::from_utf8_lossy(&o).trim().to_owned())
}

/// Removes the temporary index (and a lock git may have left) however the commit ends.
struct IndexGuard(std::path::PathBuf);

impl Drop for IndexGuard {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        let mut lock = self.0.clone().into_os_string();
        lock.push(".lock");
        let _ = std::fs::remove_file(lock);
    }
}
