//! The shared task state: the one object both the agent side and the human side read and write.

use serde::{Deserialize, Serialize};

/// Who made a change or holds control of a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Author {
    /// The agent, acting through the engine.
    Agent,
    /// The person at the editor (or anything else that changed the tree outside the agent).
    Human,
}

impl Author {
    /// The lowercase name used in trailers and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Author::Agent => "agent",
            Author::Human => "human",
        }
    }
}
