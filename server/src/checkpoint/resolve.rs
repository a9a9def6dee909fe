//! Turning what a person types (a full or abbreviated id, `step:N`) into a checkpoint commit.
//!
//! Must never resolve to a commit outside the task's chain, except a full 40-digit id, which
//! names the base or a user commit on purpose.

use git2::{Commit, ErrorCode, Oid};

use super::{CheckpointError, Checkpoints, Result};

pub(super) const MIN_ABBREV: usize = 4;

/// Hex length of a SHA-1 id, the only object format this git2 build reads.
pub(super) const FULL_HEX: usize = 40;

pub(super) fn unknown(e: git2::Error, spec: &str) -> CheckpointError {
    match e.code() {
        ErrorCode::NotFound | ErrorCode::InvalidSpec | ErrorCode::Ambiguous => {
            CheckpointError::UnknownCheckpoint(spec.to_owned())
        }
        _ => e.into(),
    }
}

impl Checkpoints {
    /// Turns a full or abbreviated (4+ hex digits) checkpoint id, or `step:N` (the newest
    /// checkpoint recorded for step N), into the full id of a checkpoint in this task's chain.
    /// A step that made no checkpoint of its own is resolved by the control layer, which
    /// knows the checkpoint each step ended on.
    pub fn resolve(&self, spec: &str) -> Result<String> {
        let spec_trim = spec.trim();
        let list = self.list()?;
        if let Some(step) = spec_trim.strip_prefix("step:") {
            let step: u32 = step
                .trim()
                .parse()
                .map_err(|_| CheckpointError::UnknownCheckpoint(spec.to_owned()))?;
            return list
                .into_iter()
                .find(|c| c.step == step)
                .map(|c| c.id)
                .ok_or_else(|| CheckpointError::UnknownCheckpoint(spec.to_owned()));
        }
        if spec_trim.len() < MIN_ABBREV || !spec_trim.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(CheckpointError::UnknownCheckpoint(spec.to_owned()));
        }
        let prefix = spec_trim.to_ascii_lowercase();
        let mut matches = list.into_iter().filter(|c| c.id.starts_with(&prefix));
        match (matches.next(), matches.next()) {
            (Some(only), None) => Ok(only.id),
            (Some(_), Some(_)) => Err(CheckpointError::AmbiguousCheckpoint(spec.to_owned())),
            (None, _) => Err(CheckpointError::UnknownCheckpoint(spec.to_owned())),
        }
    }

    /// A full commit id is looked up directly (so the base and user commits work too);
    /// anything else goes through [`Checkpoints::resolve`].
    pub(super) fn find_commit(&self, spec: &str) -> Result<Commit<'_>> {
        let spec = spec.trim();
        let id = if spec.len() == FULL_HEX && spec.bytes().all(|b| b.is_ascii_hexdigit()) {
            Oid::from_str(spec)?
        } else {
            Oid::from_str(&self.resolve(spec)?)?
        };
        self.repo.find_commit(id).map_err(|e| unknown(e, spec))
    }
}

#[cfg(test)]
mod tests {

    use crate::checkpoint::testutil::*;
    use crate::checkpoint::*;

    #[test]
    fn resolve_accepts_abbreviations_and_steps() {
        let repo = new_repo();
        let dir = repo.path();
        write(dir, "f", b"0");
        let base = commit_all(dir, "base");
        let mut cps = open(dir, "t", Some(&base)).expect("open");
        let mut ids = Vec::new();
        for (step, content) in [(0, "a"), (1, "b"), (1, "c"), (2, "d")] {
            write(dir, "f", content.as_bytes());
            ids.push(cps.snapshot(meta(step, content)).expect("snapshot").id);
        }
        for id in &ids {
            assert_eq!(&cps.resolve(id).expect("full"), id);
            assert_eq!(&cps.resolve(&id[..10].to_uppercase()).expect("abbrev"), id);
            let short = &id[..4];
            let sharing = ids.iter().filter(|o| o.starts_with(short)).count();
            match cps.resolve(short) {
                Ok(found) => assert!(sharing == 1 && &found == id),
                Err(CheckpointError::AmbiguousCheckpoint(_)) => assert!(sharing > 1),
                Err(e) => panic!("unexpected error {e}"),
            }
        }
        assert_eq!(
            cps.resolve("step:1").expect("step"),
            ids[2],
            "newest of the step"
        );
        assert_eq!(cps.resolve("step:0").expect("step"), ids[0]);
        for bad in ["step:9", "step:x", "abc", "zzzzzzz", "", &base[..8]] {
            let err = cps.resolve(bad).expect_err("must not resolve");
            assert!(
                matches!(&err, CheckpointError::UnknownCheckpoint(s) if s == bad),
                "{bad:?}: {err}"
            );
            assert!(
                err.to_string().contains("step:N"),
                "actionable message: {err}"
            );
        }
        assert!(matches!(
            cps.info("0000000000000000000000000000000000000000"),
            Err(CheckpointError::UnknownCheckpoint(_))
        ));
    }
}
