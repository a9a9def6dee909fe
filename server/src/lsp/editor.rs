//! The user's editor, from `clientInfo.name`, and how it names the user's actions: messages
//! from the engine carry typed actions (`control::UserAction`), shown here as the user
//! invokes them — `:Rein start` in Neovim, "Rein: Start Task" in VS Code (the Rein
//! extension's command titles), the command `rein.start` in any other client.

use crate::control::{Advice, UserAction};

/// The kind of client, as far as naming actions goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Editor {
    /// Neovim with the Rein plugin (`:Rein …`).
    Neovim,
    /// VS Code or a fork (code-server, VSCodium) with the Rein extension.
    VsCode,
    /// Any other LSP client: actions are its `workspace/executeCommand` commands.
    #[default]
    Other,
}

impl Editor {
    /// The editor a client named itself as in `initialize`.
    pub fn from_client_name(name: Option<&str>) -> Self {
        let Some(name) = name.map(str::to_lowercase) else {
            return Editor::Other;
        };
        if name == "neovim" || name == "nvim" {
            Editor::Neovim
        } else if name.contains("visual studio code")
            || name.contains("code-server")
            || name.contains("vscodium")
            || name.contains("code - oss")
            || name == "vscode"
        {
            Editor::VsCode
        } else {
            Editor::Other
        }
    }

    /// How the user invokes an action in this editor.
    pub fn name(self, a: UserAction) -> String {
        match self {
            Editor::Neovim => format!(":Rein {}", a.name()),
            Editor::VsCode => format!("\"Rein: {}\"", vscode_title(a)),
            Editor::Other => format!("rein.{}", a.name()),
        }
    }

    /// A message with its actions named for this editor.
    pub fn render(self, advice: &Advice) -> String {
        advice.render(|a| self.name(a))
    }
}

/// The Rein extension's command title for an action (editors/vscode/package.json, without
/// the trailing "…" of commands that ask for more).
fn vscode_title(a: UserAction) -> &'static str {
    match a {
        UserAction::Start => "Start Task",
        UserAction::Pause => "Pause the Agent",
        UserAction::Resume => "Resume the Agent",
        UserAction::Steer => "Steer the Agent",
        UserAction::Abort => "Abort the Task",
        UserAction::Takeover => "Take Over",
        UserAction::Handback => "Hand Back to the Agent",
        UserAction::Decide => "Answer Decision",
        UserAction::Release => "Hand This File Back",
        UserAction::Rewind => "Rewind to a Checkpoint",
        UserAction::Continue => "Continue the Task",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_are_told_apart_by_name() {
        for (name, want) in [
            (Some("Neovim"), Editor::Neovim),
            (Some("Visual Studio Code"), Editor::VsCode),
            (Some("Visual Studio Code - Insiders"), Editor::VsCode),
            (Some("code-server"), Editor::VsCode),
            (Some("VSCodium"), Editor::VsCode),
            (Some("Emacs"), Editor::Other),
            (Some("helix"), Editor::Other),
            (None, Editor::Other),
        ] {
            assert_eq!(Editor::from_client_name(name), want, "{name:?}");
        }
    }

    /// The titles are the extension's own: a renamed command in package.json fails here.
    #[test]
    fn vscode_titles_are_the_extensions_commands() {
        let manifest: serde_json::Value =
            serde_json::from_str(include_str!("../../../editors/vscode/package.json")).unwrap();
        let commands = manifest["contributes"]["commands"].as_array().unwrap();
        for a in UserAction::ALL {
            let title = vscode_title(a);
            assert!(
                commands.iter().any(|c| c["category"] == "Rein"
                    && c["title"]
                        .as_str()
                        .is_some_and(|t| t.trim_end_matches('…') == title)),
                "no Rein command titled {title:?} in editors/vscode/package.json"
            );
        }
    }

    /// Every action is a `:Rein` subcommand of the Neovim plugin.
    #[test]
    fn neovim_names_are_the_plugins_subcommands() {
        let commands = include_str!("../../../editors/nvim/lua/rein/commands.lua");
        for a in UserAction::ALL {
            assert!(
                commands.contains(&format!("\nsub.{} = {{", a.name())),
                ":Rein {} is not a subcommand in editors/nvim/lua/rein/commands.lua",
                a.name()
            );
        }
    }
}
