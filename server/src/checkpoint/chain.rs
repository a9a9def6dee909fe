//! The per-task checkpoint chain: `refs/rein/<task>/checkpoints` and the task's other refs.
//!
//! Owns turning a tree into a checkpoint commit (with its `Rein-*` trailers), reading the chain
//! back (tip, list, info) and the task's named refs (`aborted`, ...). Must never move the user's
//! branch or HEAD, nor write a ref outside `refs/rein/<task>/`.

use git2::{Commit, ErrorCode, Oid, Signature, Tree};

use crate::state::Author;

use super::{CheckpointError, CheckpointInfo, Checkpoints, Result, Snapshot, SnapshotMeta};

pub(super) const CHECKPOINTS_REF: &str = "checkpoints";

pub(super) const EMAIL: &str = "rein@localhost";

pub(super) fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

pub(super) fn commit_message(task_id: &str, meta: &SnapshotMeta<'_>) -> String {
    let action = one_line(meta.action);
    let author = meta.author.as_str();
    let step = meta.step;
    let summary = if action.is_empty() {
        format!("step {step} ({author})")
    } else {
        format!("step {step} ({author}): {action}")
    };
    format!(
        "{summary}\n\nRein-Step: {step}\nRein-Author: {author}\nRein-Action: {action}\nRein-Task: {task_id}\n"
    )
}

impl Checkpoints {
    pub(super) fn commit_tree(&mut self, tree_id: Oid, meta: SnapshotMeta<'_>) -> Result<Snapshot> {
        self.writable()?;
        let (old_tip, id) = {
            let tip = self.tip_commit()?;
            let old_tip = tip.as_ref().map(|t| t.id());
            if let Some(tip) = &tip {
                if tip.tree_id() == tree_id {
                    return Ok(Snapshot {
                        id: tip.id().to_string(),
                        created: false,
                    });
                }
            }
            let parent = match tip {
                Some(tip) => Some(tip),
                None => self.base.map(|b| self.repo.find_commit(b)).transpose()?,
            };
            let tree = self.repo.find_tree(tree_id)?;
            let sig = Signature::now(&format!("Rein ({})", meta.author.as_str()), EMAIL)?;
            let message = commit_message(&self.task_id, &meta);
            let parents: Vec<&Commit<'_>> = parent.iter().collect();
            let id = self
                .repo
                .commit(None, &sig, &sig, &message, &tree, &parents)?;
            (old_tip, id)
        };
        // The ref only once the commit and all it holds are on disk.
        self.flush_objects()?;
        let name = self.ref_name(CHECKPOINTS_REF);
        let log = format!("rein: step {}", meta.step);
        // Refused if the tip moved under us (or appeared, for a new chain).
        match old_tip {
            Some(old) => self.repo.reference_matching(&name, id, true, old, &log)?,
            None => self.repo.reference(&name, id, false, &log)?,
        };
        Ok(Snapshot {
            id: id.to_string(),
            created: true,
        })
    }

    /// The current tip of `refs/rein/<task>/checkpoints`, if the chain has begun.
    pub fn tip(&self) -> Result<Option<String>> {
        Ok(self.tip_commit()?.map(|c| c.id().to_string()))
    }

    /// The task's checkpoints, newest first, stopping before the base commit.
    pub fn list(&self) -> Result<Vec<CheckpointInfo>> {
        let mut out = Vec::new();
        let mut next = self.tip_commit()?;
        while let Some(commit) = next {
            if Some(commit.id()) == self.base {
                break;
            }
            let Some(info) = self.parse_checkpoint(&commit) else {
                break;
            };
            out.push(info);
            next = match commit.parent_count() {
                0 => None,
                _ => Some(commit.parent(0)?),
            };
        }
        Ok(out)
    }

    /// The step, author, action and time recorded in checkpoint `id`.
    pub fn info(&self, id: &str) -> Result<CheckpointInfo> {
        let commit = self.find_commit(id)?;
        self.parse_checkpoint(&commit)
            .ok_or_else(|| CheckpointError::NotACheckpoint(commit.id().to_string()))
    }

    /// Points `refs/rein/<task>/<name>` (e.g. "aborted") at `commit`, replacing any old value.
    pub fn set_ref(&self, name: &str, commit: &str) -> Result<()> {
        self.writable()?;
        let full = self.checked_ref_name(name)?;
        let id = self.find_commit(commit)?.id();
        self.repo
            .reference(&full, id, true, &format!("rein: set {name}"))?;
        Ok(())
    }

    /// The commit `refs/rein/<task>/<name>` points at, if that ref exists.
    pub fn ref_target(&self, name: &str) -> Result<Option<String>> {
        let full = self.checked_ref_name(name)?;
        match self.repo.refname_to_id(&full) {
            Ok(id) => Ok(Some(id.to_string())),
            Err(e) if e.code() == ErrorCode::NotFound => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    pub(super) fn ref_name(&self, name: &str) -> String {
        format!("refs/rein/{}/{name}", self.task_id)
    }

    pub(super) fn checked_ref_name(&self, name: &str) -> Result<String> {
        let full = self.ref_name(name);
        if name.is_empty() || name.contains('/') || !git2::Reference::is_valid_name(&full) {
            return Err(CheckpointError::InvalidRefName(name.to_owned()));
        }
        Ok(full)
    }

    pub(super) fn tip_commit(&self) -> Result<Option<Commit<'_>>> {
        match self.repo.refname_to_id(&self.ref_name(CHECKPOINTS_REF)) {
            Ok(id) => Ok(Some(self.repo.find_commit(id)?)),
            Err(e) if e.code() == ErrorCode::NotFound => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    pub(super) fn parse_checkpoint(&self, commit: &Commit<'_>) -> Option<CheckpointInfo> {
        let message = String::from_utf8_lossy(commit.message_bytes());
        let (_, body) = message.split_once("\n\n")?;
        let mut step = None;
        let mut author = None;
        let mut action = None;
        let mut task = None;
        for line in body.lines() {
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            let value = value.trim();
            match key {
                "Rein-Step" => step = value.parse::<u32>().ok(),
                "Rein-Author" => {
                    author = match value {
                        "agent" => Some(Author::Agent),
                        "human" => Some(Author::Human),
                        "unattributed" => Some(Author::Unattributed),
                        _ => None,
                    }
                }
                "Rein-Action" => action = Some(value.to_owned()),
                "Rein-Task" => task = Some(value),
                _ => {}
            }
        }
        if task != Some(self.task_id.as_str()) {
            return None;
        }
        Some(CheckpointInfo {
            id: commit.id().to_string(),
            step: step?,
            author: author?,
            action: action?,
            time: commit.time().seconds(),
        })
    }

    /// The tree of the chain's tip, else of the base, else the empty tree.
    pub(super) fn tip_tree(&self) -> Result<Tree<'_>> {
        if let Some(tip) = self.tip_commit()? {
            return Ok(tip.tree()?);
        }
        if let Some(base) = self.base {
            return Ok(self.repo.find_commit(base)?.tree()?);
        }
        let empty = self.repo.treebuilder(None)?.write()?;
        Ok(self.repo.find_tree(empty)?)
    }
}

#[cfg(test)]
mod tests {

    use crate::checkpoint::testutil::*;
    use crate::checkpoint::*;

    use std::time::SystemTime;

    use crate::state::Author;

    #[test]
    fn unchanged_tree_returns_previous_checkpoint() {
        let repo = new_repo();
        let dir = repo.path();
        write(dir, "a.txt", b"a\n");
        let base = commit_all(dir, "base");
        let mut cps = open(dir, "t", Some(&base)).expect("open");
        let first = cps.snapshot(meta(1, "one")).expect("snapshot");
        let again = cps.snapshot(meta(2, "two")).expect("snapshot");
        assert!(first.created);
        assert_eq!(
            again,
            Snapshot {
                id: first.id.clone(),
                created: false
            }
        );
        assert_eq!(cps.list().expect("list").len(), 1);
        assert_eq!(cps.tip().expect("tip"), Some(first.id));
    }

    #[test]
    fn trailers_round_trip_through_list_info_and_git() {
        let repo = new_repo();
        let dir = repo.path();
        write(dir, "f", b"0");
        let base = commit_all(dir, "base");
        let mut cps = open(dir, "task-7", Some(&base)).expect("open");
        write(dir, "f", b"1");
        let s1 = cps
            .snapshot(meta(1, "  rewrite parser\n\tsecond line  "))
            .expect("snapshot");
        write(dir, "f", b"2");
        let s2 = cps
            .snapshot(SnapshotMeta {
                step: 2,
                author: Author::Human,
                action: "",
            })
            .expect("snapshot");
        write(dir, "f", b"3");
        let s3 = cps.snapshot(meta(2, "Rein-Step: 99")).expect("snapshot");

        let list = cps.list().expect("list");
        let ids: Vec<&str> = list.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, [s3.id.as_str(), s2.id.as_str(), s1.id.as_str()]);
        let first = cps.info(&s1.id).expect("info");
        assert_eq!(first, list[2]);
        assert_eq!(
            (first.step, first.author, first.action.as_str()),
            (1, Author::Agent, "rewrite parser second line")
        );
        let second = cps.info(&s2.id).expect("info");
        assert_eq!(
            (second.step, second.author, second.action.as_str()),
            (2, Author::Human, "")
        );
        let third = cps.info(&s3.id).expect("info");
        assert_eq!((third.step, third.action.as_str()), (2, "Rein-Step: 99"));
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .expect("after epoch")
            .as_secs();
        assert!(first.time > 0 && first.time as u64 <= now);

        assert_eq!(
            git(dir, &["log", "-1", "--format=%s", &s1.id]).trim(),
            "step 1 (agent): rewrite parser second line"
        );
        assert_eq!(
            git(dir, &["log", "-1", "--format=%s", &s2.id]).trim(),
            "step 2 (human)"
        );
        let trailers = |id: &str| git(dir, &["log", "-1", "--format=%(trailers:only,unfold)", id]);
        assert_eq!(
            trailers(&s1.id),
            "Rein-Step: 1\nRein-Author: agent\nRein-Action: rewrite parser second line\nRein-Task: task-7\n\n"
        );
        assert_eq!(
            git(dir, &["log", "-1", "--format=%an <%ae>", &s2.id]).trim(),
            "Rein (human) <rein@localhost>"
        );
        assert!(matches!(
            cps.info(&base),
            Err(CheckpointError::NotACheckpoint(id)) if id == base
        ));
    }

    #[test]
    fn chain_starts_at_base_and_list_stops_before_it() {
        let repo = new_repo();
        let dir = repo.path();
        write(dir, "a", b"1");
        commit_all(dir, "first");
        write(dir, "a", b"2");
        let base = commit_all(dir, "second");
        let mut cps = open(dir, "t", Some(&base)).expect("open");
        assert_eq!(cps.tip().expect("tip"), None);
        assert!(cps.list().expect("list").is_empty());
        let s1 = cps.snapshot(meta(0, "start")).expect("snapshot");
        assert!(
            s1.created,
            "the first checkpoint exists even when equal to the base"
        );
        write(dir, "a", b"3");
        let s2 = cps.snapshot(meta(1, "edit")).expect("snapshot");

        assert_eq!(
            git(dir, &["rev-parse", &format!("{}^", s1.id)]).trim(),
            base
        );
        assert_eq!(
            git(dir, &["rev-parse", &format!("{}^", s2.id)]).trim(),
            s1.id
        );
        assert_eq!(
            git(dir, &["rev-parse", "refs/rein/t/checkpoints"]).trim(),
            s2.id
        );
        let steps: Vec<u32> = cps.list().expect("list").iter().map(|c| c.step).collect();
        assert_eq!(steps, [1, 0]);

        // Reopening continues the chain rather than starting over.
        drop(cps);
        let mut cps = open(dir, "t", Some(&base)).expect("reopen");
        write(dir, "a", b"4");
        let s3 = cps.snapshot(meta(2, "more")).expect("snapshot");
        assert_eq!(
            git(dir, &["rev-parse", &format!("{}^", s3.id)]).trim(),
            s2.id
        );
        assert_eq!(cps.list().expect("list").len(), 3);
    }

    #[test]
    fn unborn_head_gives_a_root_checkpoint() {
        let repo = new_repo();
        let dir = repo.path();
        write(dir, "src/main.rs", b"fn main() {}\n");
        assert_eq!(head_commit(dir).expect("head"), None);
        let before = user_state(dir);
        let mut cps = open(dir, "t", None).expect("open");
        let snap = cps.snapshot(meta(0, "start")).expect("snapshot");
        assert_eq!(
            git(dir, &["rev-list", "--parents", "-n1", &snap.id]).trim(),
            snap.id
        );
        assert_eq!(tree_of(dir, &snap.id), git_worktree_tree(dir));
        assert_eq!(cps.list().expect("list").len(), 1);
        assert_eq!(user_state(dir), before);
        assert!(!dir.join(".git/index").exists());

        let first = commit_all(dir, "first");
        assert_eq!(head_commit(dir).expect("head"), Some(first));
    }

    #[test]
    fn set_ref_and_ref_target() {
        let repo = new_repo();
        let dir = repo.path();
        write(dir, "f", b"x");
        let base = commit_all(dir, "base");
        let mut cps = open(dir, "t", Some(&base)).expect("open");
        let snap = cps.snapshot(meta(0, "start")).expect("snapshot");
        assert_eq!(cps.ref_target("aborted").expect("read"), None);
        cps.set_ref("aborted", &snap.id).expect("set");
        assert_eq!(
            git(dir, &["rev-parse", "refs/rein/t/aborted"]).trim(),
            snap.id
        );
        cps.set_ref("aborted", &base).expect("overwrite");
        assert_eq!(cps.ref_target("aborted").expect("read"), Some(base));
        for bad in ["", "a/b", "x..y", "bad name", "end.lock"] {
            assert!(
                matches!(
                    cps.set_ref(bad, &snap.id),
                    Err(CheckpointError::InvalidRefName(_))
                ),
                "{bad:?} accepted"
            );
        }
        assert!(matches!(
            cps.set_ref("x", "step:42"),
            Err(CheckpointError::UnknownCheckpoint(_))
        ));
    }
}
