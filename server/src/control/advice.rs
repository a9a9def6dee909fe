//! What the engine tells the user to do, as typed actions. The engine knows nothing of LSP or
//! editors: its messages name an action (`UserAction::Start`), and the layer facing the user
//! renders it the way that user invokes it (`:Rein start`, "Rein: Start Task", `rein.start`).

use std::fmt;

/// An action the user can take on a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UserAction {
    /// Start a new task.
    Start,
    /// Pause the agent.
    Pause,
    /// Resume a paused task.
    Resume,
    /// Steer the agent with a correction.
    Steer,
    /// Abort the task.
    Abort,
    /// Take control from the agent.
    Takeover,
    /// Give control back to the agent.
    Handback,
    /// Answer an open decision.
    Decide,
    /// Hand one held file back to the agent.
    Release,
    /// Put the tree back to a checkpoint.
    Rewind,
    /// Give an ended task's agent a follow-up: the next turn of the conversation.
    Continue,
}

impl UserAction {
    /// Every action.
    pub const ALL: [UserAction; 11] = [
        UserAction::Start,
        UserAction::Pause,
        UserAction::Resume,
        UserAction::Steer,
        UserAction::Abort,
        UserAction::Takeover,
        UserAction::Handback,
        UserAction::Decide,
        UserAction::Release,
        UserAction::Rewind,
        UserAction::Continue,
    ];

    /// The short name of the action (`start`, `takeover`).
    pub fn name(self) -> &'static str {
        match self {
            UserAction::Start => "start",
            UserAction::Pause => "pause",
            UserAction::Resume => "resume",
            UserAction::Steer => "steer",
            UserAction::Abort => "abort",
            UserAction::Takeover => "takeover",
            UserAction::Handback => "handback",
            UserAction::Decide => "decide",
            UserAction::Release => "release",
            UserAction::Rewind => "rewind",
            UserAction::Continue => "continue",
        }
    }
}

/// One piece of a message: words, or an action the user can take.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
enum Part {
    Text(String),
    Action(UserAction),
}

/// A message for the user that names actions, rendered by whoever shows it.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Advice(Vec<Part>);

impl Advice {
    /// A message starting with these words.
    pub fn text(t: impl Into<String>) -> Self {
        Advice(vec![Part::Text(t.into())])
    }

    /// Adds an action.
    pub fn action(mut self, a: UserAction) -> Self {
        self.0.push(Part::Action(a));
        self
    }

    /// Appends another message, its actions kept as actions.
    pub fn and(mut self, more: Advice) -> Self {
        self.0.extend(more.0);
        self
    }

    /// Adds words.
    pub fn then(mut self, t: impl Into<String>) -> Self {
        self.0.push(Part::Text(t.into()));
        self
    }

    /// The actions the message names, in order.
    pub fn actions(&self) -> impl Iterator<Item = UserAction> + '_ {
        self.0.iter().filter_map(|p| match p {
            Part::Action(a) => Some(*a),
            Part::Text(_) => None,
        })
    }

    /// The message with each action named by `name`.
    pub fn render(&self, name: impl Fn(UserAction) -> String) -> String {
        self.0
            .iter()
            .map(|p| match p {
                Part::Text(t) => t.clone(),
                Part::Action(a) => name(*a),
            })
            .collect()
    }
}

/// Without an editor to ask, an action is named by its protocol command (`rein.start`).
impl fmt::Display for Advice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render(|a| format!("rein.{}", a.name())))
    }
}

impl From<String> for Advice {
    fn from(t: String) -> Self {
        Advice::text(t)
    }
}

impl From<&str> for Advice {
    fn from(t: &str) -> Self {
        Advice::text(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_actions_in_place() {
        let a = Advice::text("answer with ")
            .action(UserAction::Decide)
            .then(", or take over with ")
            .action(UserAction::Takeover);
        assert_eq!(
            a.to_string(),
            "answer with rein.decide, or take over with rein.takeover"
        );
        assert_eq!(
            a.render(|a| format!(":Rein {}", a.name())),
            "answer with :Rein decide, or take over with :Rein takeover"
        );
        assert_eq!(
            a.actions().collect::<Vec<_>>(),
            [UserAction::Decide, UserAction::Takeover]
        );
    }
}
