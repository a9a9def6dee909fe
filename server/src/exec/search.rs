//! Listing and searching the working tree in-process, the way ripgrep does: `.gitignore` is
//! respected, `.git` and symlinks are never entered, binary files are skipped, and results
//! are capped so a huge tree cannot flood the agent.

use std::io::Read;

use ignore::WalkBuilder;

use super::{ExecError, Sandbox};

/// At most this many entries or matches are returned.
pub const RESULT_CAP: usize = 500;
/// Files larger than this are not searched.
const SEARCH_FILE_CAP: u64 = 4 * 1024 * 1024;

fn walker(sandbox: &Sandbox, dir: &str) -> Result<(ignore::Walk, std::path::PathBuf), ExecError> {
    let start = if dir.is_empty() || dir == "." {
        sandbox.root().to_path_buf()
    } else {
        sandbox.root().join(sandbox.check_dir(dir)?)
    };
    let walk = WalkBuilder::new(&start)
        .hidden(false)
        .follow_links(false)
        .require_git(false)
        .filter_entry(|e| e.file_name() != ".git")
        .sort_by_file_name(std::cmp::Ord::cmp)
        .build();
    Ok((walk, start))
}

fn rel(sandbox: &Sandbox, path: &std::path::Path) -> Option<String> {
    let r = path.strip_prefix(sandbox.root()).ok()?;
    let parts: Vec<String> = r
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    (!parts.is_empty()).then(|| parts.join("/"))
}

impl Sandbox {
    /// Files under `dir` ("" for the whole tree), repo-relative, sorted; the flag says the
    /// list was cut at `RESULT_CAP`.
    pub fn list(&self, dir: &str) -> Result<(Vec<String>, bool), ExecError> {
        let (walk, _) = walker(self, dir)?;
        let mut out = Vec::new();
        for entry in walk.flatten() {
            if entry.file_type().is_some_and(|t| t.is_file()) {
                if let Some(r) = rel(self, entry.path()) {
                    if out.len() == RESULT_CAP {
                        return Ok((out, true));
                    }
                    out.push(r);
                }
            }
        }
        Ok((out, false))
    }

    /// Lines matching the regular expression `pattern` under `dir`, as `path:line: text`;
    /// the flag says the matches were cut at `RESULT_CAP`.
    pub fn search(&self, pattern: &str, dir: &str) -> Result<(Vec<String>, bool), ExecError> {
        let re = regex::Regex::new(pattern).map_err(|e| ExecError::PathRefused {
            path: pattern.chars().take(80).collect(),
            why: format!("not a valid regular expression: {e}"),
        })?;
        let (walk, _) = walker(self, dir)?;
        let mut out = Vec::new();
        for entry in walk.flatten() {
            if !entry.file_type().is_some_and(|t| t.is_file()) {
                continue;
            }
            let Some(r) = rel(self, entry.path()) else {
                continue;
            };
            if entry
                .metadata()
                .map(|m| m.len() > SEARCH_FILE_CAP)
                .unwrap_or(true)
            {
                continue;
            }
            // Read through the sandbox so a file swapped for a symlink is refused.
            let Ok(Some(bytes)) = self.read(&r) else {
                continue;
            };
            if bytes.iter().take(8000).any(|b| *b == 0) {
                continue;
            }
            let mut text = String::new();
            if bytes.as_slice().read_to_string(&mut text).is_err() {
                continue;
            }
            for (i, line) in text.lines().enumerate() {
                if re.is_match(line) {
                    if out.len() == RESULT_CAP {
                        return Ok((out, true));
                    }
                    let shown: String = line.chars().take(300).collect();
                    out.push(format!("{r}:{}: {shown}", i + 1));
                }
            }
        }
        Ok((out, false))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        let w = |p: &str, c: &[u8]| {
            let f = d.path().join(p);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, c).unwrap();
        };
        w(".gitignore", b"target/\n");
        w("src/a.rs", b"fn alpha() {}\nfn beta() {}\n");
        w("src/b.rs", b"// alpha again\n");
        w("target/out.rs", b"fn alpha() {}\n");
        w(".git/config", b"alpha\n");
        w("bin.dat", b"alpha\0\0");
        std::os::unix::fs::symlink("/etc", d.path().join("etc-link")).unwrap();
        d
    }

    #[test]
    fn list_respects_gitignore_and_never_enters_git_or_links() {
        let d = tree();
        let s = Sandbox::new(d.path()).unwrap();
        let (files, cut) = s.list("").unwrap();
        assert!(!cut);
        assert_eq!(files, vec![".gitignore", "bin.dat", "src/a.rs", "src/b.rs"]);
        assert_eq!(s.list("src").unwrap().0, vec!["src/a.rs", "src/b.rs"]);
        assert!(s.list("../").is_err());
    }

    #[test]
    fn search_finds_lines_skips_binary_ignored_and_git() {
        let d = tree();
        let s = Sandbox::new(d.path()).unwrap();
        let (hits, _) = s.search("alpha", "").unwrap();
        assert_eq!(
            hits,
            vec!["src/a.rs:1: fn alpha() {}", "src/b.rs:1: // alpha again"]
        );
        assert!(s
            .search("(", "")
            .unwrap_err()
            .to_string()
            .contains("regular expression"));
    }
}
