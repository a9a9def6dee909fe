//! A place under the home directory an agent's process was denied at its start: the person
//! is asked whether that agent may write it (`agent_place`); an allow is remembered for the
//! agent's command in `rein.toml` (`exec::remember_state`) and the agent starts again with
//! it. Never all of home: the agent names the one directory (`AgentError::NeedsPlace`).

use std::path::PathBuf;

use super::{Engine, Flow, Level, Pending};
use crate::agent::Move;
use crate::exec;
use crate::state::DecisionKind;

/// What an `agent_place` decision is about.
#[derive(Debug, Clone)]
pub(super) struct Place {
    /// The failure the agent's start ended with, kept for a "deny".
    why: String,
    /// The agent's command line, the key of what is remembered.
    command: String,
    /// The directory to grant.
    path: PathBuf,
    /// The same as the person reads it (`~/.local/share/x`).
    shown: String,
}

impl Engine {
    /// Asks whether the agent whose start failed on a denied place under home may write it.
    pub(super) fn ask_place(
        &mut self,
        why: String,
        command: String,
        path: PathBuf,
        shown: String,
    ) -> Flow {
        let question = format!(
            "`{command}` needs to write {shown} (its own state, outside the working tree), which the sandbox denied, so it could not start. Allow it for this agent? Rein remembers the answer in rein.toml ([agent_state]) and never opens your whole home."
        );
        let flow = self.ask(
            DecisionKind::AgentPlace,
            question.clone(),
            &["allow", "deny"],
            Some(why.clone()),
            None,
            Move::Ask(question),
            None,
            None,
        );
        if let Some(p) = &mut self.pending {
            p.place = Some(Place {
                why,
                command,
                path,
                shown,
            });
        }
        flow
    }

    /// Carries out the person's answer: allow lets the agent write the place from its next
    /// start (at once: the task runs on) and remembers it; deny stops as the failure did.
    pub(super) fn answer_place(&mut self, p: Pending) -> Flow {
        let (Some(place), Some(choice)) = (p.place, p.choice) else {
            return Flow::Continue;
        };
        if choice != "allow" {
            self.stop_on_error(format!(
                "{}. You did not let it write {}; to start it, give it a place it may write in its spec's state_dirs",
                place.why, place.shown
            ));
            return Flow::Continue;
        }
        if let Some(agent) = self.agent.as_mut() {
            agent.allow_place(&place.path);
        }
        match exec::remember_state(&self.sandbox, &place.command, &place.shown) {
            Ok(bytes) => {
                // The person's answer wrote it: their change, not the agent's.
                self.authorship.saved("rein.toml".into(), bytes);
                self.say(
                    Level::Info,
                    format!(
                        "`{}` may write {} from now on (remembered in rein.toml); starting it again",
                        place.command, place.shown
                    ),
                );
            }
            Err(e) => self.say(
                Level::Warning,
                format!(
                    "`{}` may write {} for this task, but Rein could not remember it: {e}",
                    place.command, place.shown
                ),
            ),
        }
        Flow::Continue
    }
}
