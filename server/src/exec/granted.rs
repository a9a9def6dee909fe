//! Places under the home directory the person let an agent process write, remembered per
//! agent command in `rein.toml` (`[agent_state]`, the command line as the key, a list of
//! `~/` paths as the value) so the next start of the same command has them without asking.
//! Read when an agent's domain is built; added to when the person allows one.

use crate::exec::{ExecError, Sandbox};

/// The settings file, at the top of the working tree.
const FILE: &str = "rein.toml";
/// Its table of remembered places.
const TABLE: &str = "agent_state";

/// Why a place could not be remembered.
#[derive(Debug, thiserror::Error)]
pub enum GrantError {
    /// `rein.toml` does not parse: Rein does not rewrite a file it cannot read whole.
    #[error("rein.toml is not valid TOML ({0}); fix it, then add {1} to [agent_state] by hand")]
    Unreadable(String, String),
    /// `[agent_state]` or the command's entry is not what Rein writes there.
    #[error("rein.toml's [agent_state] entry for `{0}` is not a list of paths; fix it, then add {1} by hand")]
    Shape(String, String),
    /// Reading or writing the file failed.
    #[error(transparent)]
    Exec(#[from] ExecError),
}

/// The places remembered for `command` in the tree's `rein.toml`, as written (`~/…` or
/// absolute). A missing or broken file remembers nothing (a broken one is reported where
/// settings are read).
pub fn granted_state(root: &std::path::Path, command: &str) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(root.join(FILE)) else {
        return Vec::new();
    };
    let Ok(table) = toml::from_str::<toml::Table>(&text) else {
        return Vec::new();
    };
    table
        .get(TABLE)
        .and_then(|t| t.get(command))
        .and_then(|v| v.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Adds `place` to what `command` may write, in the tree's `rein.toml` (made if missing),
/// keeping everything else in the file as it was. Returns the file's new bytes.
pub fn remember_state(
    sandbox: &Sandbox,
    command: &str,
    place: &str,
) -> Result<Vec<u8>, GrantError> {
    let old = sandbox.read(FILE)?.unwrap_or_default();
    let text = String::from_utf8(old)
        .map_err(|_| GrantError::Unreadable("not UTF-8".into(), place.to_owned()))?;
    let mut doc: toml_edit::DocumentMut = text.parse().map_err(|e: toml_edit::TomlError| {
        GrantError::Unreadable(e.to_string(), place.to_owned())
    })?;
    let shape = || GrantError::Shape(command.to_owned(), place.to_owned());
    let table = doc
        .entry(TABLE)
        .or_insert_with(|| toml_edit::Item::Table(toml_edit::Table::new()))
        .as_table_like_mut()
        .ok_or_else(shape)?;
    let list = table
        .entry(command)
        .or_insert(toml_edit::value(toml_edit::Array::new()))
        .as_array_mut()
        .ok_or_else(shape)?;
    if !list.iter().any(|v| v.as_str() == Some(place)) {
        list.push(place);
    }
    let bytes = doc.to_string().into_bytes();
    sandbox.write(FILE, &bytes)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_place_is_remembered_per_command_and_the_rest_of_the_file_is_kept() {
        let dir = tempfile::tempdir().expect("tmp");
        let sandbox = Sandbox::new(dir.path()).expect("sandbox");
        assert!(granted_state(dir.path(), "opencode acp").is_empty());
        let before = "# my settings\nsandbox = \"workspace-write\"  # keep it\n\n[policy]\nallow = [\"cargo test\"]\n";
        std::fs::write(dir.path().join(FILE), before).expect("write");
        remember_state(&sandbox, "opencode acp", "~/.local/share/opencode").expect("remembered");
        remember_state(&sandbox, "opencode acp", "~/.local/share/opencode").expect("twice");
        remember_state(&sandbox, "opencode acp", "~/.cache/x").expect("another");
        remember_state(&sandbox, "./bin/my agent", "~/.mine").expect("another agent");
        let after = std::fs::read_to_string(dir.path().join(FILE)).expect("read");
        assert!(
            after.starts_with(before),
            "the person's text is kept as it was:\n{after}"
        );
        assert_eq!(
            granted_state(dir.path(), "opencode acp"),
            ["~/.local/share/opencode", "~/.cache/x"]
        );
        assert_eq!(granted_state(dir.path(), "./bin/my agent"), ["~/.mine"]);
        assert!(granted_state(dir.path(), "opencode").is_empty());
        // What the settings reader makes of it is still the same settings.
        let table: toml::Table = toml::from_str(&after).expect("valid TOML");
        assert_eq!(table["sandbox"].as_str(), Some("workspace-write"));
    }

    #[test]
    fn a_broken_or_odd_file_is_not_rewritten() {
        let dir = tempfile::tempdir().expect("tmp");
        let sandbox = Sandbox::new(dir.path()).expect("sandbox");
        for text in [
            "[policy\n",
            "agent_state = 3\n",
            "[agent_state]\n\"x\" = \"~/.a\"\n",
        ] {
            std::fs::write(dir.path().join(FILE), text).expect("write");
            let e = remember_state(&sandbox, "x", "~/.b").expect_err("refused");
            assert!(e.to_string().contains("by hand"), "{e}");
            assert_eq!(
                std::fs::read_to_string(dir.path().join(FILE)).expect("read"),
                text
            );
        }
    }
}
