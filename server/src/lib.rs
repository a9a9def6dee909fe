//! Rein: keep a person in charge of a coding agent.
//!
//! The engine (`control` and the modules it drives) knows nothing of LSP; `lsp` is a thin
//! protocol layer over `control`. See `docs/architecture.md` for the map and invariants.

pub mod agent;
pub mod checkpoint;
pub mod control;
pub mod engine;
pub mod exec;
pub mod gc;
pub mod lsp;
pub mod reconcile;
pub mod state;
pub mod steer;
pub mod watch;
pub mod worktree;
