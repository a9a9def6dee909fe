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
//! The defaults are one table, `KNOWN`: what each harness Rein knows writes, moved by the
//! variables it honours (`CODEX_HOME`, `XDG_*_HOME`…).

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
    /// The home directory the agent gets, for the places a denial names.
    pub home: Option<PathBuf>,
}

impl Domain {
    /// Reads `state_dirs` and `ports` from an ACP spec whose command is `words`, run with
    /// the extra environment `env` (which may set `HOME`, `CODEX_HOME`, `CLAUDE_CONFIG_DIR`),
    /// adding the places the person allowed this command before (`granted`, `~/` or
    /// absolute; others are ignored).
    pub(super) fn from_spec(
        spec: &serde_json::Value,
        words: &[String],
        env: &[(String, String)],
        granted: &[String],
    ) -> Result<Domain, AgentError> {
        let var = |name: &str| {
            env.iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
                .or_else(|| std::env::var(name).ok())
                .filter(|v| !v.is_empty())
        };
        let home = var("HOME").map(PathBuf::from);
        let mut state: Vec<PathBuf> = match spec.get("state_dirs") {
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
        for place in granted.iter().filter_map(|g| expand(g, home.as_deref())) {
            if !state.contains(&place) {
                state.push(place);
            }
        }
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
            home,
        })
    }

    /// The place under home an agent that died at its start was denied, from its stderr
    /// (`EACCES: permission denied, mkdir '/h/.local/share/x'`, Python's `PermissionError`,
    /// `Read-only file system`), as the directory to grant and as the person reads it
    /// (`~/.local/share/x`). `None` when its files are not confined here, no such line names
    /// a path under home, the place is granted already (so the denial is something else),
    /// or it is a file directly in home, which no rule can grant without all of home.
    pub(super) fn wanted(&self, mode: SandboxMode, stderr: &[String]) -> Option<(PathBuf, String)> {
        if mode == SandboxMode::Off || self.own_sandbox {
            return None;
        }
        // The agent may print the path resolved (`..` and links gone) or as HOME spells it.
        let given = self.home.as_deref()?;
        let resolved = std::fs::canonicalize(given).ok();
        let (home, path) = [Some(given), resolved.as_deref()]
            .into_iter()
            .flatten()
            .find_map(|home| Some((home, stderr.iter().find_map(|l| denied_in(l, home))?)))?;
        let rel = path.strip_prefix(home).ok()?;
        let parts: Vec<&std::ffi::OsStr> = rel.iter().collect();
        // Under an XDG base the harness's own directory is the one below the base.
        let depth = match parts.as_slice() {
            [] => return None,
            [a, b, ..] if *a == ".local" && (*b == "share" || *b == "state") => 3,
            [a, ..] if *a == ".config" || *a == ".cache" => 2,
            _ => 1,
        };
        if parts.len() < depth {
            return None;
        }
        let place = home.join(parts[..depth].iter().collect::<PathBuf>());
        if depth == 1 && !place.is_dir() && place.extension().is_some() {
            return None;
        }
        if self.state.iter().any(|s| {
            place.starts_with(s) || std::fs::canonicalize(s).is_ok_and(|c| place.starts_with(c))
        }) {
            return None;
        }
        let shown = format!("~/{}", place.strip_prefix(home).ok()?.display());
        Some((place, shown))
    }

    /// The confinement for the agent process under `mode`, or `None` when it is `off`.
    /// Missing state directories are made first (a rule needs an existing path): an entry
    /// without an extension is taken for a directory, one with (`~/.claude.json`) for a file
    /// the harness makes itself. With a `trace`, everything the process tree changes is
    /// recorded.
    pub(super) fn confinement(
        &self,
        mode: SandboxMode,
        root: &Path,
        trace: Option<&crate::exec::Trace>,
    ) -> Option<Confinement> {
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
        Some(match trace {
            Some(t) => c.with_trace(t.clone()),
            None => c,
        })
    }
}

/// The absolute path a line reporting a denied access names under `home`, if it does.
fn denied_in(line: &str, home: &Path) -> Option<PathBuf> {
    let lower = line.to_lowercase();
    let denial = [
        "eacces",
        "eperm",
        "erofs",
        "permission denied",
        "operation not permitted",
        "read-only file system",
    ];
    if !denial.iter().any(|d| lower.contains(d)) {
        return None;
    }
    line.split(|c: char| c.is_whitespace() || "'\"`‘’,:()[]{}".contains(c))
        .map(Path::new)
        .find(|p| p.is_absolute() && p.starts_with(home) && *p != home)
        .map(Path::to_path_buf)
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

/// Where a known harness keeps a piece of its state.
#[derive(Debug, Clone, Copy)]
enum Place {
    /// A path under the home directory.
    Home(&'static str),
    /// The variable's value when set, else the other place.
    Var(&'static str, &'static Place),
    /// `$XDG_<KIND>_HOME/<name>`, else the XDG default under home.
    Xdg(Xdg, &'static str),
    /// The variable's value, only when it is set.
    IfSet(&'static str),
}

impl Place {
    /// Where it is, given the agent's variables and home.
    fn at(&self, var: &dyn Fn(&str) -> Option<String>, home: Option<&Path>) -> Option<PathBuf> {
        match *self {
            Place::Home(rel) => home.map(|h| h.join(rel)),
            Place::Var(name, or) => var(name).map(PathBuf::from).or_else(|| or.at(var, home)),
            // The XDG spec has a relative value ignored.
            Place::Xdg(kind, rel) => var(kind.var())
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
                .or_else(|| home.map(|h| h.join(kind.default())))
                .map(|base| base.join(rel)),
            Place::IfSet(name) => var(name).map(PathBuf::from),
        }
    }
}

/// The XDG base directories, with their defaults under home.
#[derive(Debug, Clone, Copy)]
enum Xdg {
    Data,
    Config,
    Cache,
    State,
}

impl Xdg {
    fn var(self) -> &'static str {
        match self {
            Xdg::Data => "XDG_DATA_HOME",
            Xdg::Config => "XDG_CONFIG_HOME",
            Xdg::Cache => "XDG_CACHE_HOME",
            Xdg::State => "XDG_STATE_HOME",
        }
    }

    fn default(self) -> &'static str {
        match self {
            Xdg::Data => ".local/share",
            Xdg::Config => ".config",
            Xdg::Cache => ".cache",
            Xdg::State => ".local/state",
        }
    }
}

/// A harness Rein knows the state of: the word of its command that names it, and what it
/// writes outside the tree and temp. `docs/agents.md` ("The agent process's own domain")
/// carries the same table.
struct Known {
    word: &'static str,
    /// A variable that, when set, names the one directory holding all of its state.
    moved_by: Option<&'static str>,
    places: &'static [Place],
}

/// Every harness Rein knows. Claude Code, Codex, Gemini CLI, Qwen Code, OpenCode and
/// Copilot CLI were run under Rein at their pinned versions in `tests/agents` (and traced);
/// Goose and Cline are from their documentation.
const KNOWN: &[Known] = &[
    // Claude Code keeps `.claude.json` beside the `.claude` directory, or both in
    // CLAUDE_CONFIG_DIR.
    Known {
        word: "claude",
        moved_by: Some("CLAUDE_CONFIG_DIR"),
        places: &[Place::Home(".claude"), Place::Home(".claude.json")],
    },
    Known {
        word: "codex",
        moved_by: None,
        places: &[Place::Var("CODEX_HOME", &Place::Home(".codex"))],
    },
    Known {
        word: "gemini",
        moved_by: None,
        places: &[Place::Home(".gemini")],
    },
    // Its runtime output (sessions, logs) moves with QWEN_RUNTIME_DIR.
    Known {
        word: "qwen",
        moved_by: None,
        places: &[
            Place::Var("QWEN_HOME", &Place::Home(".qwen")),
            Place::IfSet("QWEN_RUNTIME_DIR"),
        ],
    },
    // Its database and logs in data, its config (and the plugins it installs there),
    // models in cache, locks in state.
    Known {
        word: "opencode",
        moved_by: None,
        places: &[
            Place::Xdg(Xdg::Data, "opencode"),
            Place::Xdg(Xdg::Config, "opencode"),
            Place::Xdg(Xdg::Cache, "opencode"),
            Place::Xdg(Xdg::State, "opencode"),
        ],
    },
    // The npm package unpacks the CLI into its cache on first start; the
    // telemetry library keeps a device id under Microsoft/DeveloperTools.
    Known {
        word: "copilot",
        moved_by: None,
        places: &[
            Place::Var("COPILOT_HOME", &Place::Home(".copilot")),
            Place::Var("COPILOT_CACHE_HOME", &Place::Xdg(Xdg::Cache, "copilot")),
            Place::Xdg(Xdg::Cache, "Microsoft/DeveloperTools"),
        ],
    },
    Known {
        word: "goose",
        moved_by: Some("GOOSE_PATH_ROOT"),
        places: &[
            Place::Xdg(Xdg::Config, "goose"),
            Place::Xdg(Xdg::Data, "goose"),
            Place::Xdg(Xdg::State, "goose"),
        ],
    },
    Known {
        word: "cline",
        moved_by: None,
        places: &[Place::Var("CLINE_DIR", &Place::Home(".cline"))],
    },
];

/// The state a known harness writes, recognised by a word of its command naming it
/// (`claude-agent-acp`, `codex-acp`, `gemini`, `qwen`…), plus npm's cache for a harness
/// npx starts.
fn defaults(
    words: &[String],
    var: &dyn Fn(&str) -> Option<String>,
    home: Option<&Path>,
) -> Vec<PathBuf> {
    let names = names(words);
    let named = |h: &str| names.iter().any(|n| n.contains(h));
    let in_home = |rel: &str| home.map(|h| h.join(rel));
    let mut state: Vec<PathBuf> = Vec::new();
    for known in KNOWN.iter().filter(|k| named(k.word)) {
        if let Some(dir) = known.moved_by.and_then(var) {
            state.push(PathBuf::from(dir));
            continue;
        }
        for place in known.places {
            if let Some(p) = place.at(var, home).filter(|p| !state.contains(p)) {
                state.push(p);
            }
        }
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
            Domain::from_spec(&json!({}), &words(w), &env, &[])
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
    fn the_harnesses_tried_later_get_their_state_dirs_and_the_variables_move_them() {
        let d = |w: &[&str], extra: &[(&str, &str)]| {
            let mut env = home_env();
            env.extend(
                extra
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
            );
            Domain::from_spec(&json!({}), &words(w), &env, &[])
                .expect("spec")
                .state
        };
        let p = |s: &str| PathBuf::from(s);
        // Rein's own environment must not leak into what is asserted here.
        let unset: Vec<(&str, &str)> = [
            "XDG_DATA_HOME",
            "XDG_CONFIG_HOME",
            "XDG_CACHE_HOME",
            "XDG_STATE_HOME",
            "QWEN_HOME",
            "QWEN_RUNTIME_DIR",
            "COPILOT_HOME",
            "COPILOT_CACHE_HOME",
            "GOOSE_PATH_ROOT",
            "CLINE_DIR",
        ]
        .into_iter()
        .map(|k| (k, ""))
        .collect();
        let with = |more: &[(&'static str, &'static str)]| {
            // The first of a name wins, as in a spec's `env`.
            let mut v = more.to_vec();
            v.extend_from_slice(&unset);
            v
        };
        assert_eq!(d(&["qwen", "--acp"], &with(&[])), [p("/h/.qwen")]);
        assert_eq!(
            d(
                &["qwen", "--acp"],
                &with(&[("QWEN_HOME", "/q"), ("QWEN_RUNTIME_DIR", "/r")])
            ),
            [p("/q"), p("/r")]
        );
        assert_eq!(
            d(&["opencode", "acp"], &with(&[])),
            [
                p("/h/.local/share/opencode"),
                p("/h/.config/opencode"),
                p("/h/.cache/opencode"),
                p("/h/.local/state/opencode")
            ]
        );
        assert_eq!(
            d(
                &["/opt/bin/opencode", "acp"],
                &with(&[
                    ("XDG_DATA_HOME", "/d"),
                    ("XDG_CONFIG_HOME", "/c"),
                    ("XDG_CACHE_HOME", "/k"),
                    ("XDG_STATE_HOME", "relative/is/ignored")
                ])
            ),
            [
                p("/d/opencode"),
                p("/c/opencode"),
                p("/k/opencode"),
                p("/h/.local/state/opencode")
            ]
        );
        assert_eq!(
            d(&["copilot", "--acp"], &with(&[])),
            [
                p("/h/.copilot"),
                p("/h/.cache/copilot"),
                p("/h/.cache/Microsoft/DeveloperTools")
            ]
        );
        assert_eq!(
            d(
                &["copilot", "--acp"],
                &with(&[("COPILOT_HOME", "/ch"), ("XDG_CACHE_HOME", "/k")])
            ),
            [p("/ch"), p("/k/copilot"), p("/k/Microsoft/DeveloperTools")]
        );
        assert_eq!(
            d(&["copilot"], &with(&[("COPILOT_CACHE_HOME", "/cc")]))[1],
            p("/cc")
        );
        assert_eq!(
            d(&["goose", "acp"], &with(&[])),
            [
                p("/h/.config/goose"),
                p("/h/.local/share/goose"),
                p("/h/.local/state/goose")
            ]
        );
        assert_eq!(
            d(&["goose", "acp"], &with(&[("GOOSE_PATH_ROOT", "/g")])),
            [p("/g")]
        );
        assert_eq!(d(&["cline", "--acp"], &with(&[])), [p("/h/.cline")]);
        assert_eq!(
            d(&["cline", "--acp"], &with(&[("CLINE_DIR", "/cl")])),
            [p("/cl")]
        );
    }

    #[test]
    fn state_dirs_and_ports_replace_the_defaults_and_bad_ones_are_refused() {
        let spec = json!({"state_dirs": ["~/.mine", "/var/lib/x"], "ports": [443, 8080]});
        let d = Domain::from_spec(&spec, &words(&["claude-agent-acp"]), &home_env(), &[])
            .expect("spec");
        assert_eq!(
            d.state,
            [PathBuf::from("/h/.mine"), PathBuf::from("/var/lib/x")]
        );
        assert_eq!(d.ports, [443, 8080]);
        assert!(!d.own_sandbox);
        let codex = |spec| Domain::from_spec(&spec, &words(&["codex-acp"]), &home_env(), &[]);
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
            let e = Domain::from_spec(&bad, &words(&["x"]), &home_env(), &[])
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
    fn a_denial_under_home_names_the_harness_dir_to_ask_about_never_home() {
        let tmp = tempfile::tempdir().expect("tmp");
        let h = tmp.path().to_path_buf();
        std::fs::create_dir_all(h.join(".toolx")).expect("dir");
        let env = vec![("HOME".to_owned(), h.display().to_string())];
        let d = Domain::from_spec(&json!({}), &words(&["./my-agent"]), &env, &[]).expect("spec");
        let ww = SandboxMode::WorkspaceWrite;
        let wanted = |d: &Domain, line: &str| {
            d.wanted(ww, &["starting".to_owned(), line.to_owned()])
                .map(|(_, shown)| shown)
        };
        let hs = h.display();
        let cases = [
            (
                format!("Error: EACCES: permission denied, mkdir '{hs}/.local/share/opencode'"),
                Some("~/.local/share/opencode"),
            ),
            (
                format!(
                    "Error: EACCES: permission denied, open '{hs}/.local/state/x/locks/a.lock'"
                ),
                Some("~/.local/state/x"),
            ),
            (
                format!("EPERM: operation not permitted, open \"{hs}/.cache/copilot/pkg/x\""),
                Some("~/.cache/copilot"),
            ),
            (
                format!(
                    "PermissionError: [Errno 13] Permission denied: '{hs}/.qwen/installation_id'"
                ),
                Some("~/.qwen"),
            ),
            (
                format!("mkdir {hs}/.newtool: Read-only file system"),
                Some("~/.newtool"),
            ),
            (
                format!("cannot write {hs}/.toolx: Permission denied"),
                Some("~/.toolx"),
            ),
            // A file directly in home: no rule grants it without all of home.
            (
                format!("EACCES: permission denied, open '{hs}/.tool.json'"),
                None,
            ),
            (format!("EACCES: permission denied, open '{hs}'"), None),
            (
                format!("EACCES: permission denied, open '{hs}/.config'"),
                None,
            ),
            ("EACCES: permission denied, open '/etc/x'".to_owned(), None),
            (format!("could not read {hs}/.qwen/settings.json"), None),
        ];
        for (line, want) in &cases {
            assert_eq!(wanted(&d, line).as_deref(), *want, "{line}");
        }
        // HOME spelt with `..`, the path printed resolved.
        let spelt = vec![("HOME".to_owned(), h.join(".toolx/..").display().to_string())];
        let d2 = Domain::from_spec(&json!({}), &words(&["./my-agent"]), &spelt, &[]).expect("spec");
        assert_eq!(
            wanted(&d2, &cases[0].0).as_deref(),
            Some("~/.local/share/opencode")
        );
        // Granted already (by the table, or remembered): the denial is something else.
        let granted = Domain::from_spec(
            &json!({}),
            &words(&["./my-agent"]),
            &env,
            &["~/.qwen".to_owned(), "relative".to_owned()],
        )
        .expect("spec");
        assert_eq!(granted.state, [h.join(".qwen")]);
        assert_eq!(wanted(&granted, &cases[3].0), None);
        let qwen =
            Domain::from_spec(&json!({}), &words(&["qwen", "--acp"]), &env, &[]).expect("spec");
        assert_eq!(wanted(&qwen, &cases[3].0), None);
        // Nothing to ask where files are not confined.
        assert_eq!(d.wanted(SandboxMode::Off, &[cases[0].0.clone()]), None);
        let codex = Domain::from_spec(&json!({}), &words(&["codex-acp"]), &env, &[]).expect("spec");
        assert_eq!(codex.wanted(ww, &[cases[0].0.clone()]), None);
    }

    #[test]
    fn off_means_no_domain_and_missing_state_dirs_are_made() {
        let tmp = tempfile::tempdir().expect("tmp");
        let d = Domain {
            state: vec![tmp.path().join("a/b"), tmp.path().join("c.json")],
            ports: vec![],
            own_sandbox: false,
            home: None,
        };
        assert!(d.confinement(SandboxMode::Off, tmp.path(), None).is_none());
        let c = d
            .confinement(SandboxMode::WorkspaceWrite, tmp.path(), None)
            .expect("confined");
        assert!(tmp.path().join("a/b").is_dir());
        assert!(!tmp.path().join("c.json").exists());
        assert!(c.network && c.writable.contains(&tmp.path().join("a/b")));
    }
}
