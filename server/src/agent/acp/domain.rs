//! The Landlock domain an ACP agent process runs in: what its harness writes besides the
//! working tree and temp (its state directories, by default the ones each known harness
//! uses), and which TCP ports it may reach. Spec keys: `state_dirs` (replaces the defaults),
//! `ports` (none: every port) and `own_sandbox`.
//!
//! Codex confines the commands it runs with bubblewrap, which mounts; no process inside a
//! Landlock file domain may mount (the kernel forbids it), so Codex's commands would all
//! fail. A harness with its `own_sandbox` (Codex's default) is therefore confined only in
//! its network and signals, and its files are left to its own sandbox.
//!
//! The defaults were found by tracing the real harnesses (Claude Code through
//! claude-agent-acp, Codex through codex-acp) at their pinned versions.

use std::path::{Path, PathBuf};

use crate::agent::AgentError;
use crate::exec::{Confinement, SandboxMode};

/// Where an agent process may write besides the tree and temp, and what it may connect to.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Domain {
    /// Directories (or files) the harness keeps its state in.
    pub state: Vec<PathBuf>,
    /// The only TCP ports it may connect to; empty: every port.
    pub ports: Vec<u16>,
    /// The harness confines its commands with a sandbox of its own that mounts (Codex's
    /// bubblewrap): its files are left to that.
    pub own_sandbox: bool,
}

impl Domain {
    /// Reads `state_dirs` and `ports` from an ACP spec whose command is `words`, run with
    /// the extra environment `env` (which may set `HOME`, `CODEX_HOME`, `CLAUDE_CONFIG_DIR`).
    pub(super) fn from_spec(
        spec: &serde_json::Value,
        words: &[String],
        env: &[(String, String)],
    ) -> Result<Domain, AgentError> {
        let var = |name: &str| {
            env.iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
                .or_else(|| std::env::var(name).ok())
                .filter(|v| !v.is_empty())
        };
        let home = var("HOME").map(PathBuf::from);
        let state = match spec.get("state_dirs") {
            None | Some(serde_json::Value::Null) => defaults(words, &var, home.as_deref()),
            Some(serde_json::Value::Array(dirs)) => dirs
                .iter()
                .map(|d| {
                    d.as_str()
                        .and_then(|d| expand(d, home.as_deref()))
                        .ok_or_else(|| {
                            AgentError::Spec(format!(
                                "every entry of \"state_dirs\" must be an absolute path or one starting with ~/, e.g. [\"~/.claude\", \"~/.claude.json\"]; {d} is not"
                            ))
                        })
                })
                .collect::<Result<_, _>>()?,
            Some(_) => {
                return Err(AgentError::Spec(
                    "\"state_dirs\" must be a list of paths, e.g. [\"~/.claude\", \"~/.claude.json\"]"
                        .into(),
                ))
            }
        };
        let ports = match spec.get("ports") {
            None | Some(serde_json::Value::Null) => Vec::new(),
            Some(v) => serde_json::from_value::<Vec<u16>>(v.clone())
                .ok()
                .filter(|p| !p.contains(&0))
                .ok_or_else(|| {
                    AgentError::Spec(
                        "\"ports\" must be a list of TCP port numbers (1 to 65535) the agent may connect to, e.g. [443]"
                            .into(),
                    )
                })?,
        };
        let own_sandbox = match spec.get("own_sandbox") {
            None | Some(serde_json::Value::Null) => harness_sandboxes(words),
            Some(serde_json::Value::Bool(b)) => *b,
            Some(_) => {
                return Err(AgentError::Spec(
                    "\"own_sandbox\" must be true (the harness confines its commands itself; Rein confines only its network) or false".into(),
                ))
            }
        };
        Ok(Domain {
            state,
            ports,
            own_sandbox,
        })
    }

    /// The confinement for the agent process under `mode`, or `None` when it is `off`.
    /// Missing state directories are made first (a rule needs an existing path): an entry
    /// without an extension is taken for a directory, one with (`~/.claude.json`) for a file
    /// the harness makes itself.
    pub(super) fn confinement(&self, mode: SandboxMode, root: &Path) -> Option<Confinement> {
        if mode == SandboxMode::Off {
            return None;
        }
        for dir in self.state.iter().filter(|d| d.extension().is_none()) {
            if let Err(e) = std::fs::create_dir_all(dir) {
                tracing::warn!("cannot make the agent's state dir {}: {e}", dir.display());
            }
        }
        let mut c = Confinement::for_agent(mode, root, &self.state, &self.ports);
        c.files = !self.own_sandbox;
        Some(c)
    }
}

/// `~/x` against the home directory; absolute paths as they are; anything else is refused.
fn expand(entry: &str, home: Option<&Path>) -> Option<PathBuf> {
    match entry.strip_prefix("~/") {
        Some(rest) => home.map(|h| h.join(rest)),
        None => Some(PathBuf::from(entry)).filter(|p| p.is_absolute()),
    }
}

/// The words of a command, lowercased file names (`@scope/codex-acp` → `codex-acp`).
fn names(words: &[String]) -> Vec<String> {
    words
        .iter()
        .map(|w| {
            Path::new(w)
                .file_name()
                .map(|n| n.to_string_lossy().to_lowercase())
                .unwrap_or_default()
        })
        .collect()
}

/// Whether the harness is one known to confine its commands with bubblewrap (Codex).
fn harness_sandboxes(words: &[String]) -> bool {
    names(words).iter().any(|n| n.contains("codex"))
}

/// The state a known harness writes, recognised by a word of its command naming it
/// (`claude-agent-acp`, `codex-acp`, `gemini`), plus npm's cache for a harness npx starts.
fn defaults(
    words: &[String],
    var: &dyn Fn(&str) -> Option<String>,
    home: Option<&Path>,
) -> Vec<PathBuf> {
    let names = names(words);
    let named = |h: &str| names.iter().any(|n| n.contains(h));
    let in_home = |rel: &str| home.map(|h| h.join(rel));
    let mut state = Vec::new();
    if named("claude") {
        // Claude Code keeps `.claude.json` beside the `.claude` directory, or in
        // CLAUDE_CONFIG_DIR when that is set.
        match var("CLAUDE_CONFIG_DIR") {
            Some(dir) => state.push(PathBuf::from(dir)),
            None => state.extend(
                [in_home(".claude"), in_home(".claude.json")]
                    .into_iter()
                    .flatten(),
            ),
        }
    }
    if named("codex") {
        state.extend(
            var("CODEX_HOME")
                .map(PathBuf::from)
                .or_else(|| in_home(".codex")),
        );
    }
    if named("gemini") {
        state.extend(in_home(".gemini"));
    }
    let runner = names.first().is_some_and(|p| {
        ["npx", "npm", "pnpm", "pnpx", "yarn", "bunx", "bun"].contains(&p.as_str())
    });
    if runner {
        state.extend([in_home(".npm"), in_home(".cache")].into_iter().flatten());
    }
    state
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn words(w: &[&str]) -> Vec<String> {
        w.iter().map(|s| (*s).to_owned()).collect()
    }

    fn home_env() -> Vec<(String, String)> {
        vec![("HOME".into(), "/h".into())]
    }

    #[test]
    fn each_known_harness_gets_its_own_state_dirs() {
        let d = |w: &[&str], env: Vec<(String, String)>| {
            Domain::from_spec(&json!({}), &words(w), &env)
                .expect("spec")
                .state
        };
        let p = |s: &str| PathBuf::from(s);
        assert_eq!(
            d(
                &["npx", "-y", "@agentclientprotocol/claude-agent-acp"],
                home_env()
            ),
            [
                p("/h/.claude"),
                p("/h/.claude.json"),
                p("/h/.npm"),
                p("/h/.cache")
            ]
        );
        let mut env = home_env();
        env.push(("CODEX_HOME".into(), "/c".into()));
        assert_eq!(d(&["/opt/bin/codex-acp"], env), [p("/c")]);
        assert_eq!(d(&["codex-acp"], home_env()), [p("/h/.codex")]);
        assert_eq!(
            d(&["gemini", "--experimental-acp"], home_env()),
            [p("/h/.gemini")]
        );
        let mut env = home_env();
        env.push(("CLAUDE_CONFIG_DIR".into(), "/cc".into()));
        assert_eq!(d(&["claude-agent-acp"], env), [p("/cc")]);
        assert!(d(&["./my-agent"], home_env()).is_empty());
    }

    #[test]
    fn state_dirs_and_ports_replace_the_defaults_and_bad_ones_are_refused() {
        let spec = json!({"state_dirs": ["~/.mine", "/var/lib/x"], "ports": [443, 8080]});
        let d = Domain::from_spec(&spec, &words(&["claude-agent-acp"]), &home_env()).expect("spec");
        assert_eq!(
            d.state,
            [PathBuf::from("/h/.mine"), PathBuf::from("/var/lib/x")]
        );
        assert_eq!(d.ports, [443, 8080]);
        assert!(!d.own_sandbox);
        let codex = |spec| Domain::from_spec(&spec, &words(&["codex-acp"]), &home_env());
        assert!(
            codex(json!({})).expect("spec").own_sandbox,
            "Codex has bubblewrap"
        );
        assert!(
            !codex(json!({"own_sandbox": false}))
                .expect("spec")
                .own_sandbox
        );
        for bad in [
            json!({"state_dirs": ["relative/dir"]}),
            json!({"state_dirs": "~/.claude"}),
            json!({"ports": [0]}),
            json!({"ports": ["https"]}),
            json!({"ports": [70000]}),
            json!({"own_sandbox": "yes"}),
        ] {
            let e = Domain::from_spec(&bad, &words(&["x"]), &home_env())
                .expect_err("refused")
                .to_string();
            assert!(
                ["state_dirs", "ports", "own_sandbox"]
                    .iter()
                    .any(|k| e.contains(k)),
                "{e}"
            );
        }
    }

    #[test]
    fn off_means_no_domain_and_missing_state_dirs_are_made() {
        let tmp = tempfile::tempdir().expect("tmp");
        let d = Domain {
            state: vec![tmp.path().join("a/b"), tmp.path().join("c.json")],
            ports: vec![],
            own_sandbox: false,
        };
        assert!(d.confinement(SandboxMode::Off, tmp.path()).is_none());
        let c = d
            .confinement(SandboxMode::WorkspaceWrite, tmp.path())
            .expect("confined");
        assert!(tmp.path().join("a/b").is_dir());
        assert!(!tmp.path().join("c.json").exists());
        assert!(c.network && c.writable.contains(&tmp.path().join("a/b")));
    }
}
