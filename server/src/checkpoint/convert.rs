//! Which tracked files git may store as other bytes than the ones on disk (a `filter=` driver
//! such as Git LFS, `text`/`eol` conversion, `core.autocrlf`, `ident`,
//! `working-tree-encoding`), and the mark on a private index whose entries still carry git's
//! ids for them.
//!
//! Checkpoints hold the bytes on disk, never git's stored form: that is what a restore writes
//! back. A private index seeded from `.git/index` holds git's stored ids, which for such a
//! file are not its bytes on disk even while its stat data matches, so the first full scan
//! over it reads those files instead of trusting their stat data. Must never decide that a
//! file is unconverted when an attribute might convert it: a file read needlessly costs a read,
//! a file trusted wrongly puts git's form back on disk.

use std::fs;
use std::path::{Path, PathBuf};

use git2::{AttrCheckFlags, AttrValue, Repository};

use super::objects::{bytes_path, path_bytes};
use super::sweep::{Entry, Found};
use super::Checkpoints;

/// The attributes that make git store a file as other bytes than the disk's.
const CONVERTING: [&str; 6] = [
    "text",
    "eol",
    "crlf",
    "filter",
    "ident",
    "working-tree-encoding",
];

/// The marker beside a private index at `index` whose entries may carry git's stored ids for
/// converted files: made before such an index is written, removed once a full scan has read
/// those files and the index holding them is saved. A crash in between leaves it, so the next
/// instance reads them again.
pub(super) fn marker(index: &Path) -> PathBuf {
    index.with_extension("git-ids")
}

/// Which files a full scan must read although their stat data matches.
pub(super) enum Suspect {
    /// None: nothing converts.
    None,
    /// Every regular file (`core.autocrlf` converts any text file).
    All,
    /// Those for which one of these attributes is set.
    Set(Vec<&'static str>),
}

impl Suspect {
    /// What converts in `repo`, whose tracked paths include `paths`: the configuration, then
    /// the text of every attributes file git reads (tracked `.gitattributes`,
    /// `info/attributes`, `core.attributesFile` or its default, the system's), so a repository
    /// whose attributes set none of [`CONVERTING`] costs no attribute lookup per file.
    pub(super) fn of<'a>(repo: &Repository, paths: impl Iterator<Item = &'a [u8]>) -> Suspect {
        let Ok(config) = repo.config() else {
            return Suspect::All;
        };
        let autocrlf = config
            .get_string("core.autocrlf")
            .is_ok_and(|v| !v.eq_ignore_ascii_case("false"));
        if autocrlf {
            return Suspect::All;
        }
        let Some(workdir) = repo.workdir() else {
            return Suspect::None;
        };
        let mut files: Vec<PathBuf> = paths
            .filter(|p| p == b".gitattributes" || p.ends_with(b"/.gitattributes"))
            .map(|p| workdir.join(bytes_path(p)))
            .collect();
        files.push(repo.path().join("info/attributes"));
        files.push(PathBuf::from("/etc/gitattributes"));
        match config.get_path("core.attributesfile") {
            Ok(path) => files.push(path),
            Err(_) => {
                let home = std::env::var_os("XDG_CONFIG_HOME")
                    .filter(|v| !v.is_empty())
                    .map(PathBuf::from)
                    .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")));
                if let Some(home) = home {
                    files.push(home.join("git/attributes"));
                }
            }
        }
        let mut set = Vec::new();
        for file in files {
            let Ok(text) = fs::read(&file) else { continue };
            for name in CONVERTING {
                if !set.contains(&name) && sets(&text, name) {
                    set.push(name);
                }
            }
        }
        if set.is_empty() {
            Suspect::None
        } else {
            Suspect::Set(set)
        }
    }

    /// Whether the tracked regular file `rel` may be converted.
    pub(super) fn applies(&self, repo: &Repository, rel: &Path) -> bool {
        match self {
            Suspect::None => false,
            Suspect::All => true,
            Suspect::Set(names) => names.iter().any(|name| {
                match repo.get_attr_bytes(rel, name, AttrCheckFlags::FILE_THEN_INDEX) {
                    Ok(value) => !matches!(
                        AttrValue::from_bytes(value),
                        AttrValue::Unspecified | AttrValue::False
                    ),
                    // Unknown: read it rather than trust git's id.
                    Err(_) => true,
                }
            }),
        }
    }
}

impl Checkpoints {
    /// The tracked files among `entries` that the sweep `found` left unread although their id
    /// may be git's stored form rather than their bytes on disk: only while the index's ids
    /// may still be git's (`from_git`: the scan read `.git/index` itself; or the marker is
    /// there), and only files something converts. Marks the index as read for them.
    pub(super) fn converted_files(
        &mut self,
        entries: &[Entry<'_>],
        found: &Found,
        from_git: bool,
    ) -> Vec<PathBuf> {
        if !from_git && !marker(&self.index_path).exists() {
            return Vec::new();
        }
        self.git_ids_read = true;
        let paths = entries
            .iter()
            .map(|e| e.path)
            .chain(found.read.iter().map(|p| path_bytes(p)));
        let suspect = Suspect::of(&self.repo, paths);
        if matches!(suspect, Suspect::None) {
            return Vec::new();
        }
        let seen: std::collections::HashSet<&[u8]> = found
            .read
            .iter()
            .chain(&found.gone)
            .map(|p| path_bytes(p))
            .collect();
        entries
            .iter()
            .filter(|e| e.mode & 0o170000 == 0o100000 && !seen.contains(e.path))
            .map(|e| bytes_path(e.path))
            .filter(|rel| suspect.applies(&self.repo, rel))
            .collect()
    }
}

/// Whether the attributes text `text` sets (or gives a value to) attribute `name` anywhere,
/// a macro definition included. Loose on purpose: a word in a quoted pattern may count, which
/// only costs lookups.
fn sets(text: &[u8], name: &str) -> bool {
    text.split(|&b| b == b'\n')
        .map(|line| line.trim_ascii())
        .filter(|line| !line.is_empty() && !line.starts_with(b"#"))
        .any(|line| {
            line.split(|b| b.is_ascii_whitespace()).skip(1).any(|word| {
                word.strip_prefix(name.as_bytes())
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with(b"="))
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attribute_text_is_read_for_the_converting_names_only() {
        let text = b"# text here is a comment\n*.psd filter=lfs diff=lfs merge=lfs -text\n*.sh eol=lf\n[attr]mine text\n*.bin -crlf\n";
        assert!(sets(text, "filter"));
        assert!(sets(text, "eol"));
        assert!(sets(text, "text"), "a macro that sets it");
        assert!(!sets(text, "crlf"), "only unset");
        assert!(!sets(text, "ident"));
        assert!(!sets(
            b"*.md linguist-documentation\n*.rs diff=rust\n",
            "text"
        ));
        assert!(!sets(b"text text\n", "eol"));
    }
}
