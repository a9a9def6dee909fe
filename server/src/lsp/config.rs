//! Server settings from three sources, highest precedence first: `initializationOptions`,
//! `workspace/configuration` (section `rein`), and `rein.toml` at the workspace root. A bad
//! value is reported and ignored, never fatal.

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

use super::editor::Editor;
use crate::control::{EngineConfig, SandboxMode};
use crate::engine::{Settings, WhenAlone};
use crate::gc::Retention;

/// The plan file the scripted agent plays when no agent is configured and the repository has
/// one (the convention the demo and the tests use).
pub const CONVENTIONAL_PLAN: &str = ".rein/plan.json";

/// The settings the server acts on.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The agent used when `rein.start` names none (None: not configured).
    pub agent: Option<Value>,
    /// Send new steer comments when their file is saved.
    pub steer_on_save: bool,
    /// Extra commands that run without asking.
    pub allow: Vec<String>,
    /// Extra commands that always need approval.
    pub irreversible: Vec<String>,
    /// Time between SIGTERM and SIGKILL.
    pub kill_grace: Duration,
    /// How confined the commands Rein runs are.
    pub sandbox: SandboxMode,
    /// Commands the sandbox lets reach the network.
    pub network: Vec<String>,
    /// How many finished tasks a repository keeps (swept when a task starts).
    pub retention: Retention,
    /// What the engine does with a running task once no client is connected.
    pub when_alone: WhenAlone,
    /// How long it waits first (None: the engine's default).
    pub alone_grace: Option<Duration>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            agent: None,
            steer_on_save: true,
            allow: Vec::new(),
            irreversible: Vec::new(),
            kill_grace: Duration::from_secs(2),
            sandbox: SandboxMode::default(),
            network: Vec::new(),
            retention: Retention::default(),
            when_alone: WhenAlone::default(),
            alone_grace: None,
        }
    }
}

/// The three sources, kept apart so one can change without re-reading the others.
#[derive(Debug, Default, Clone)]
pub struct Sources {
    /// From `initializationOptions`.
    pub init: Option<Value>,
    /// From `workspace/configuration`.
    pub workspace: Option<Value>,
    /// From `rein.toml`.
    pub file: Option<Value>,
}

/// Reads `rein.toml` at `root`: None when absent, an error message when it does not parse.
pub fn read_file(root: &Path) -> Result<Option<Value>, String> {
    let path = root.join("rein.toml");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let table: toml::Table =
        toml::from_str(&text).map_err(|e| format!("{} is not valid TOML: {e}", path.display()))?;
    serde_json::to_value(table)
        .map(Some)
        .map_err(|e| format!("{}: {e}", path.display()))
}

fn merge(into: &mut Value, from: &Value) {
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
        (slot, v) if !v.is_null() => *slot = v.clone(),
        _ => {}
    }
}

impl Sources {
    /// The merged settings, and one message per value that was ignored.
    pub fn resolve(&self) -> (Config, Vec<String>) {
        let mut merged = json!({});
        for src in [&self.file, &self.workspace, &self.init]
            .into_iter()
            .flatten()
        {
            if src.is_object() {
                merge(&mut merged, src);
            }
        }
        let mut cfg = Config::default();
        let mut problems = Vec::new();
        if let Some(agent) = merged.get("agent").filter(|a| !a.is_null()) {
            if agent.get("kind").and_then(Value::as_str).is_some() {
                cfg.agent = Some(agent.clone());
            } else {
                problems.push("rein setting \"agent\" needs a \"kind\" (e.g. {\"kind\": \"script\", \"plan\": \"plan.json\"}); using the default".into());
            }
        }
        if let Some(v) = merged.pointer("/steer/onSave").filter(|v| !v.is_null()) {
            match v.as_bool() {
                Some(b) => cfg.steer_on_save = b,
                None => problems
                    .push("rein setting \"steer.onSave\" must be true or false; using true".into()),
            }
        }
        if let Some(v) = merged.get("sandbox").filter(|v| !v.is_null()) {
            match v.as_str().and_then(SandboxMode::parse) {
                Some(m) => cfg.sandbox = m,
                None => problems.push("rein setting \"sandbox\" must be \"workspace-write\", \"read-only\" or \"off\"; using \"workspace-write\"".into()),
            }
        }
        let mut networked = Vec::new();
        for (key, slot) in [
            ("allow", &mut cfg.allow),
            ("irreversible", &mut cfg.irreversible),
            ("network", &mut cfg.network),
        ] {
            if let Some(v) = merged
                .pointer(&format!("/policy/{key}"))
                .filter(|v| !v.is_null())
            {
                match rules(v) {
                    Some(list) => {
                        *slot = list.iter().map(|(cmd, _)| cmd.clone()).collect();
                        networked.extend(list.into_iter().filter(|(_, n)| *n).map(|(c, _)| c));
                    }
                    None => problems.push(format!(
                        "rein setting \"policy.{key}\" must be a list of commands, each a string or {{ cmd = \"npm install\", network = true }}; ignored"
                    )),
                }
            }
        }
        for cmd in networked {
            if !cfg.network.contains(&cmd) {
                cfg.network.push(cmd);
            }
        }
        for (key, slot, most) in [
            ("keepTasks", &mut cfg.retention.keep_tasks, 100_000),
            ("keepDays", &mut cfg.retention.keep_days, 36_500),
        ] {
            if let Some(v) = merged
                .pointer(&format!("/gc/{key}"))
                .filter(|v| !v.is_null())
            {
                match v.as_u64().filter(|n| *n <= most) {
                    Some(n) => *slot = n,
                    None => problems.push(format!(
                        "rein setting \"gc.{key}\" must be a whole number up to {most}; using {slot}"
                    )),
                }
            }
        }
        if let Some(v) = merged.pointer("/engine/whenAlone").filter(|v| !v.is_null()) {
            match v.as_str() {
                Some("pause") => cfg.when_alone = WhenAlone::Pause,
                Some("keep-running") => cfg.when_alone = WhenAlone::KeepRunning,
                _ => problems.push("rein setting \"engine.whenAlone\" must be \"pause\" or \"keep-running\"; using \"pause\"".into()),
            }
        }
        if let Some(v) = merged.pointer("/engine/graceMs").filter(|v| !v.is_null()) {
            match v.as_u64().filter(|ms| *ms <= 86_400_000) {
                Some(ms) => cfg.alone_grace = Some(Duration::from_millis(ms)),
                None => problems.push("rein setting \"engine.graceMs\" must be a whole number of milliseconds up to 86400000; using the default (10000)".into()),
            }
        }
        if let Some(v) = merged.get("killGraceMs").filter(|v| !v.is_null()) {
            match v.as_u64().filter(|ms| *ms <= 600_000) {
                Some(ms) => cfg.kill_grace = Duration::from_millis(ms),
                None => problems.push("rein setting \"killGraceMs\" must be a whole number of milliseconds up to 600000; using 2000".into()),
            }
        }
        (cfg, problems)
    }
}

/// A list of policy rules: each a command prefix, or a table with `cmd` and `network` (the
/// sandbox lets the command reach the network). `None` when it is neither.
fn rules(v: &Value) -> Option<Vec<(String, bool)>> {
    v.as_array()?
        .iter()
        .map(|r| match r {
            Value::String(cmd) => Some((cmd.clone(), false)),
            Value::Object(t) => {
                let known = t.keys().all(|k| k == "cmd" || k == "network");
                let cmd = t.get("cmd")?.as_str()?.to_owned();
                let network = match t.get("network") {
                    None => false,
                    Some(n) => n.as_bool()?,
                };
                known.then_some((cmd, network))
            }
            _ => None,
        })
        .collect()
}

impl Config {
    /// The agent for a task that names none: the configured one, else the scripted agent on
    /// the repository's `.rein/plan.json` if it has one; None when there is neither.
    pub fn default_agent(&self, root: &Path) -> Option<Value> {
        self.agent.clone().or_else(|| {
            root.join(CONVENTIONAL_PLAN)
                .is_file()
                .then(|| json!({"kind": "script", "plan": CONVENTIONAL_PLAN}))
        })
    }

    /// The engine settings these imply.
    pub fn engine(&self) -> EngineConfig {
        let mut e = EngineConfig::default();
        e.policy.allow.extend(self.allow.iter().cloned());
        e.policy
            .irreversible
            .extend(self.irreversible.iter().cloned());
        e.policy.sandbox = self.sandbox;
        e.policy.network.extend(self.network.iter().cloned());
        e.kill_grace = self.kill_grace;
        e.retention = Some(self.retention);
        e
    }

    /// What a client tells the engine: the engine settings and its lifetime settings.
    pub fn settings(&self) -> Settings {
        Settings::new(&self.engine(), self.when_alone, self.alone_grace)
    }
}

/// What a user is told when a task starts with no agent configured: where to set one in
/// their editor, a `rein.toml` to copy, and where the kinds are described.
pub fn no_agent_message(editor: Editor) -> String {
    let setting = match editor {
        Editor::VsCode => "the setting \"rein.agent\" (Settings, search \"rein.agent\")",
        Editor::Neovim => "require(\"rein\").setup({ agent = { kind = \"acp\", command = { \"npx\", \"-y\", \"@agentclientprotocol/claude-agent-acp\" } } })",
        Editor::Other => "the setting rein.agent (initializationOptions {\"agent\": …} or the workspace/configuration section \"rein\")",
    };
    format!(
        "no agent is configured. Choose one in {setting}, or write a rein.toml at the top of the repository, for example:\n\n\
         [agent]\n\
         kind = \"acp\"\n\
         command = [\"npx\", \"-y\", \"@agentclientprotocol/claude-agent-acp\"]\n\n\
         The kinds (acp for Claude, Codex, Gemini or Goose; openai for Ollama and other OpenAI-compatible servers; script for a JSON plan) and their keys are in docs/agents.md."
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precedence_is_init_then_workspace_then_file() {
        let s = Sources {
            file: Some(
                json!({"steer": {"onSave": false}, "killGraceMs": 10, "agent": {"kind": "script", "plan": "f.json"}}),
            ),
            workspace: Some(json!({"killGraceMs": 20, "agent": {"plan": "w.json"}})),
            init: Some(json!({"killGraceMs": 30})),
        };
        let (cfg, problems) = s.resolve();
        assert!(problems.is_empty(), "{problems:?}");
        assert!(!cfg.steer_on_save);
        assert_eq!(cfg.kill_grace, Duration::from_millis(30));
        assert_eq!(cfg.agent, Some(json!({"kind": "script", "plan": "w.json"})));
    }

    #[test]
    fn bad_values_are_reported_and_ignored() {
        let s = Sources {
            init: Some(
                json!({"steer": {"onSave": "yes"}, "policy": {"allow": "cargo"}, "killGraceMs": -1, "agent": {"plan": "x"}}),
            ),
            ..Default::default()
        };
        let (cfg, problems) = s.resolve();
        assert_eq!(cfg, Config::default());
        assert_eq!(problems.len(), 4, "{problems:?}");
    }

    #[test]
    fn rein_toml_is_read_and_a_broken_one_reported() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_file(dir.path()), Ok(None));
        std::fs::write(
            dir.path().join("rein.toml"),
            "[steer]\nonSave = false\n[policy]\nallow = [\"cargo test\"]\n",
        )
        .unwrap();
        let v = read_file(dir.path()).unwrap().unwrap();
        let (cfg, _) = Sources {
            file: Some(v),
            ..Default::default()
        }
        .resolve();
        assert!(!cfg.steer_on_save);
        assert!(cfg.engine().policy.allow.contains(&"cargo test".to_owned()));
        std::fs::write(dir.path().join("rein.toml"), "[steer\n").unwrap();
        assert!(read_file(dir.path())
            .unwrap_err()
            .contains("not valid TOML"));
    }

    #[test]
    fn a_rule_may_allow_the_network_and_the_sandbox_is_read_from_rein_toml() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("rein.toml"),
            "sandbox = \"read-only\"\n[policy]\nallow = [\"cargo test\", { cmd = \"npm install\", network = true }]\nirreversible = [{ cmd = \"git push\", network = true }, { cmd = \"deploy\" }]\nnetwork = [\"cargo fetch\"]\n",
        )
        .unwrap();
        let (cfg, problems) = Sources {
            file: read_file(dir.path()).unwrap(),
            ..Default::default()
        }
        .resolve();
        assert!(problems.is_empty(), "{problems:?}");
        let policy = cfg.engine().policy;
        assert_eq!(policy.sandbox, SandboxMode::ReadOnly);
        assert!(policy.allow.contains(&"npm install".to_owned()));
        assert!(policy.irreversible.contains(&"deploy".to_owned()));
        assert!(policy.network_for("npm install --save x"));
        assert!(policy.network_for("git push origin main"));
        assert!(policy.network_for("cargo fetch"));
        assert!(!policy.network_for("cargo test"));
        assert!(!policy.network_for("deploy"));
        for bad in [
            json!({"policy": {"allow": [{"cmd": "x", "network": "yes"}]}}),
            json!({"policy": {"allow": [{"command": "x"}]}}),
            json!({"policy": {"allow": [7]}}),
        ] {
            let (_, problems) = Sources {
                init: Some(bad),
                ..Default::default()
            }
            .resolve();
            assert_eq!(problems.len(), 1, "{problems:?}");
            assert!(problems[0].contains("network = true"), "{problems:?}");
        }
    }
}
