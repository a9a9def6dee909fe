//! Ignored files' saved contents: `refs/rein/<task>/ignored`.
//!
//! A checkpoint's tree never holds an ignored file (a restore of it would then add the file,
//! and a diff would show it as the human's or the agent's), so what an ignored file held
//! before a write Rein saw coming is kept apart: one commit, without parents, whose tree has a
//! directory per save (`00000001/`, in the order made) holding `path` (the file's path, its
//! bytes), `meta` (the checkpoint the save follows, its time, whose write it preceded, whether
//! what the write left is known), and `before` and `after` (the file's bytes with its mode as
//! the entry's mode; absent when the file was). Nothing in it is ever in the working tree.
//!
//! Must never: write the working tree, or put an ignored file into a checkpoint's tree.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use git2::build::TreeUpdateBuilder;
use git2::{ErrorCode, FileMode, Oid, Signature, Tree};

use super::chain::EMAIL;
use super::ignored_watch::grouped;
use super::objects::{bytes_path, entry_mode};
use super::walk::is_ignored;
use super::{CheckpointError, Checkpoints, EntryMode, Result};

/// The ref under `refs/rein/<task>/` that holds the saves.
const IGNORED_REF: &str = "ignored";

/// A file's saved state: its bytes (a link's target) and mode, or None when it was absent.
pub type Saved = Option<(Vec<u8>, EntryMode)>;

/// One save of an ignored file, made just before a write Rein saw coming.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IgnoredSave {
    /// Its place among the task's saves (from 1), to name it when what the write left is known.
    pub seq: u32,
    /// The repo-relative path, as its bytes.
    pub path: Vec<u8>,
    /// The checkpoint tip when it was saved: the write follows that checkpoint.
    pub tip: Option<String>,
    /// When it was saved, unix seconds.
    pub time: i64,
    /// Whether the write it precedes is the agent's (else a rewind's, saved for recovery).
    pub by_agent: bool,
    /// What the file held before the write.
    pub before: Saved,
    /// What the write left, once known.
    pub after: Option<Saved>,
}

impl IgnoredSave {
    /// The path as shown to a person.
    pub fn shown(&self) -> String {
        String::from_utf8_lossy(&self.path).into_owned()
    }
}

/// An ignored path that changed, as the watcher saw it: what it held before is unknown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IgnoredChange {
    /// The repo-relative path, as shown to a person.
    pub path: String,
    /// It is gone now.
    pub gone: bool,
    /// It is a directory.
    pub dir: bool,
    /// How many paths inside this directory changed, when they are told as it (too many to
    /// name); 0 when it is the path itself that changed.
    pub inside: usize,
    /// Events of this directory were lost: something inside may have changed.
    pub lost: bool,
}

/// A change of `rel` as told.
fn change(rel: &Path, gone: bool, dir: bool, inside: usize) -> IgnoredChange {
    IgnoredChange {
        path: rel.to_string_lossy().into_owned(),
        gone,
        dir,
        inside,
        lost: false,
    }
}

impl Checkpoints {
    /// Whether `path` (repo-relative bytes) is an ignored file: no checkpoint holds it (it is
    /// not in the tip's tree) and git ignores it. `link` says it is a symlink on disk.
    pub fn is_ignored_file(&self, path: &[u8], link: bool) -> Result<bool> {
        let rel = bytes_path(path);
        let tree = self.tip_tree()?;
        match tree.get_path(&rel) {
            Ok(_) => return Ok(false),
            Err(e) if e.code() == ErrorCode::NotFound => {}
            Err(e) => return Err(e.into()),
        }
        let Some(workdir) = self.repo.workdir() else {
            return Ok(false);
        };
        is_ignored(&self.repo, workdir, &rel, link)
    }

    /// The outermost ignored directories Rein does not follow all the way down (a budget of
    /// directories per task, or a watch the kernel refused): a change deep inside them is
    /// not seen, so the person is told rather than left to think nothing changed there.
    pub fn ignored_partly_followed(&self) -> Vec<String> {
        self.live
            .as_ref()
            .and_then(|live| live.ignored.as_ref())
            .map(|w| {
                w.partly_followed()
                    .map(|p| p.to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The ignored paths the watchers saw change since the last call, each once: files and
    /// directories no checkpoint holds and git ignores, those inside an ignored directory
    /// included as far as they are followed (`ignored_watch`); many under one directory are
    /// told as it, leaving out first the paths `known` says are accounted for (saved before
    /// the write). A new ignored directory is followed from now on. Empty when nothing is
    /// watched.
    pub fn take_ignored_changes(
        &mut self,
        known: &dyn Fn(&str) -> bool,
    ) -> Result<Vec<IgnoredChange>> {
        if self.live.is_none() || self.read_only {
            return Ok(Vec::new());
        }
        self.drain_into_pending()?;
        let Some(workdir) = self.repo.workdir().map(Path::to_path_buf) else {
            return Ok(Vec::new());
        };
        let (seen, inside) = match self.live.as_mut() {
            Some(live) => (
                std::mem::take(&mut live.seen),
                live.ignored
                    .as_mut()
                    .map(|w| w.drain(&workdir))
                    .unwrap_or_default(),
            ),
            None => return Ok(Vec::new()),
        };
        let tree = self.tip_tree()?;
        let mut found = BTreeMap::new();
        let mut new_dirs = Vec::new();
        // What lies under an ignored directory is ignored (git cannot take back a file whose
        // parent it excludes), so only the tree's watcher's paths are asked about.
        let asked = seen.into_iter().map(|p| (p, true));
        for (rel, ask) in asked.chain(inside.paths.into_iter().map(|p| (p, false))) {
            match tree.get_path(&rel) {
                Ok(_) => continue,
                Err(e) if e.code() == ErrorCode::NotFound => {}
                Err(e) => return Err(e.into()),
            }
            let meta = std::fs::symlink_metadata(workdir.join(&rel)).ok();
            let link = meta.as_ref().is_some_and(|m| m.file_type().is_symlink());
            if ask && !is_ignored(&self.repo, &workdir, &rel, link)? {
                continue;
            }
            let dir = meta.as_ref().is_some_and(|m| m.is_dir());
            if dir {
                new_dirs.push(rel.clone());
            }
            if !known(&rel.to_string_lossy()) {
                found.insert(rel, (meta.is_none(), dir));
            }
        }
        drop(tree);
        let Some(watch) = self.live.as_mut().and_then(|l| l.ignored.as_mut()) else {
            return Ok(found
                .into_iter()
                .map(|(rel, (gone, dir))| change(&rel, gone, dir, 0))
                .collect());
        };
        let groups = grouped(found.keys().map(PathBuf::as_path), |p| {
            watch.root_of(p).cloned()
        });
        let mut out: Vec<IgnoredChange> = groups
            .into_iter()
            .map(|(rel, inside)| {
                let (gone, dir) = found.get(&rel).copied().unwrap_or_else(|| {
                    let meta = std::fs::symlink_metadata(workdir.join(&rel)).ok();
                    (meta.is_none(), meta.is_some_and(|m| m.is_dir()))
                });
                change(&rel, gone, dir, inside)
            })
            .collect();
        out.extend(inside.lost.iter().map(|rel| IgnoredChange {
            lost: true,
            ..change(rel, false, true, 0)
        }));
        // An ignored directory that appeared (a build's first output) is followed from now on.
        let new_dirs: Vec<PathBuf> = new_dirs
            .into_iter()
            .filter(|d| watch.root_of(d).is_none())
            .collect();
        watch.add(&workdir, new_dirs);
        Ok(out)
    }

    /// Saves what the ignored file `path` holds (`before`) ahead of a write, with what the
    /// write will leave when known. Returns the save's `seq`.
    pub fn save_ignored(
        &mut self,
        path: &[u8],
        before: &Saved,
        after: Option<&Saved>,
        by_agent: bool,
    ) -> Result<u32> {
        self.writable()?;
        let saves = self.ignored_tree()?;
        let seq = match &saves {
            Some(tree) => tree
                .iter()
                .filter_map(|e| e.name().ok().and_then(|n| n.parse::<u32>().ok()))
                .max()
                .unwrap_or(0),
            None => 0,
        } + 1;
        let tip = self.tip()?.unwrap_or_default();
        let time = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let by = if by_agent { "agent" } else { "rewind" };
        let dir = format!("{seq:08}");
        let mut builder = TreeUpdateBuilder::new();
        let path_blob = self.repo.blob(path)?;
        builder.upsert(format!("{dir}/path"), path_blob, FileMode::Blob);
        self.put_side(&mut builder, &dir, "before", before)?;
        let known = match after {
            Some(after) => {
                self.put_side(&mut builder, &dir, "after", after)?;
                "known"
            }
            None => "unknown",
        };
        let meta = format!("tip {tip}\ntime {time}\nby {by}\nafter {known}\n");
        let meta = self.repo.blob(meta.as_bytes())?;
        builder.upsert(format!("{dir}/meta"), meta, FileMode::Blob);
        self.write_ignored(builder, saves.as_ref())?;
        Ok(seq)
    }

    /// Records what the write after save `seq` left.
    pub fn set_ignored_after(&mut self, seq: u32, after: &Saved) -> Result<()> {
        self.writable()?;
        let Some(saves) = self.ignored_tree()? else {
            return Ok(());
        };
        let dir = format!("{seq:08}");
        let meta = match saves.get_path(Path::new(&format!("{dir}/meta"))) {
            Ok(e) => self.repo.find_blob(e.id())?.content().to_vec(),
            Err(e) if e.code() == ErrorCode::NotFound => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        let meta = String::from_utf8_lossy(&meta).replace("after unknown", "after known");
        let mut builder = TreeUpdateBuilder::new();
        let had = saves.get_path(Path::new(&format!("{dir}/after"))).is_ok();
        if had && after.is_none() {
            builder.remove(format!("{dir}/after"));
        }
        self.put_side(&mut builder, &dir, "after", after)?;
        let meta = self.repo.blob(meta.as_bytes())?;
        builder.upsert(format!("{dir}/meta"), meta, FileMode::Blob);
        self.write_ignored(builder, Some(&saves))
    }

    /// Every save of the task, oldest first.
    pub fn ignored_saves(&self) -> Result<Vec<IgnoredSave>> {
        let Some(saves) = self.ignored_tree()? else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for entry in saves.iter() {
            let Some(seq) = entry.name().ok().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            let dir = self.repo.find_tree(entry.id())?;
            let blob = |name: &str| -> Result<Option<(Vec<u8>, Option<EntryMode>)>> {
                match dir.get_name(name) {
                    Some(e) => Ok(Some((
                        self.repo.find_blob(e.id())?.content().to_vec(),
                        entry_mode(e.filemode()),
                    ))),
                    None => Ok(None),
                }
            };
            let side = |name: &str| -> Result<Saved> {
                Ok(blob(name)?.and_then(|(bytes, mode)| Some((bytes, mode?))))
            };
            let (Some((path, _)), Some((meta, _))) = (blob("path")?, blob("meta")?) else {
                return Err(CheckpointError::NotACheckpoint(format!(
                    "{} entry {seq}",
                    self.ref_name(IGNORED_REF)
                )));
            };
            let meta = String::from_utf8_lossy(&meta).into_owned();
            let field = |key: &str| {
                meta.lines()
                    .find_map(|l| l.strip_prefix(key)?.strip_prefix(' '))
                    .unwrap_or_default()
                    .to_owned()
            };
            let tip = field("tip");
            out.push(IgnoredSave {
                seq,
                path,
                tip: (!tip.is_empty()).then_some(tip),
                time: field("time").parse().unwrap_or(0),
                by_agent: field("by") == "agent",
                before: side("before")?,
                after: match field("after").as_str() {
                    "known" => Some(side("after")?),
                    _ => None,
                },
            });
        }
        Ok(out)
    }

    /// The tree of saves, if any save was made.
    fn ignored_tree(&self) -> Result<Option<Tree<'_>>> {
        match self.repo.refname_to_id(&self.ref_name(IGNORED_REF)) {
            Ok(id) => Ok(Some(self.repo.find_commit(id)?.tree()?)),
            Err(e) if e.code() == ErrorCode::NotFound => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Adds `side` of save `dir` to `builder`: the blob with the file's mode, or nothing.
    fn put_side(
        &self,
        builder: &mut TreeUpdateBuilder,
        dir: &str,
        name: &str,
        side: &Saved,
    ) -> Result<()> {
        if let Some((bytes, mode)) = side {
            let id = self.repo.blob(bytes)?;
            let mode = match mode {
                EntryMode::Regular => FileMode::Blob,
                EntryMode::Executable => FileMode::BlobExecutable,
                EntryMode::Symlink => FileMode::Link,
            };
            builder.upsert(format!("{dir}/{name}"), id, mode);
        }
        Ok(())
    }

    /// Writes the saves' tree `base` updated by `builder` as the ref's new commit.
    fn write_ignored(&self, mut builder: TreeUpdateBuilder, base: Option<&Tree<'_>>) -> Result<()> {
        let empty;
        let base = match base {
            Some(b) => b,
            None => {
                empty = self.repo.find_tree(self.repo.treebuilder(None)?.write()?)?;
                &empty
            }
        };
        let tree: Oid = builder.create_updated(&self.repo, base)?;
        let tree = self.repo.find_tree(tree)?;
        let sig = Signature::now("Rein", EMAIL)?;
        let commit = self.repo.commit(
            None,
            &sig,
            &sig,
            "rein: what ignored files held before the task's writes",
            &tree,
            &[],
        )?;
        self.repo.reference(
            &self.ref_name(IGNORED_REF),
            commit,
            true,
            "rein: save an ignored file",
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::testutil::*;

    #[test]
    fn saves_round_trip_with_modes_absence_and_a_later_after() {
        let tmp = new_repo();
        let dir = tmp.path();
        write(dir, ".gitignore", b".env\nbuild/\n");
        commit_all(dir, "base");
        write(dir, ".env", b"SECRET=1\n");
        let mut cps = open(dir, "t", Some("HEAD")).expect("open");
        cps.snapshot(meta(0, "start")).expect("snapshot");
        assert!(cps.is_ignored_file(b".env", false).expect("ignored"));
        assert!(cps
            .is_ignored_file(b"build/new.log", false)
            .expect("ignored"));
        assert!(!cps.is_ignored_file(b".gitignore", false).expect("tracked"));
        assert!(!cps.is_ignored_file(b"new.txt", false).expect("untracked"));

        let env = Some((b"SECRET=1\n".to_vec(), EntryMode::Executable));
        let first = cps.save_ignored(b".env", &env, None, true).expect("save");
        let second = cps
            .save_ignored(
                b"build/new.log",
                &None,
                Some(&Some((b"log\n".to_vec(), EntryMode::Regular))),
                true,
            )
            .expect("save");
        assert_eq!((first, second), (1, 2));
        cps.set_ignored_after(first, &None).expect("after");
        let saves = cps.ignored_saves().expect("saves");
        assert_eq!(saves.len(), 2);
        assert_eq!(saves[0].path, b".env");
        assert_eq!(saves[0].before, env);
        assert_eq!(saves[0].after, Some(None));
        assert_eq!(saves[0].tip, cps.tip().expect("tip"));
        assert!(saves[0].by_agent);
        assert_eq!(saves[1].before, None);
        assert_eq!(
            saves[1].after,
            Some(Some((b"log\n".to_vec(), EntryMode::Regular)))
        );
        // Kept apart from the checkpoints: no checkpoint's tree holds them.
        let tip = cps.tip().expect("tip").expect("a tip");
        assert_eq!(cps.file_at(&tip, ".env").expect("file_at"), None);
        assert_eq!(
            git(
                dir,
                &["cat-file", "-p", "refs/rein/t/ignored:00000001/before"]
            ),
            "SECRET=1\n"
        );
    }
}
