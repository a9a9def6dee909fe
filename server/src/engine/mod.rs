//! One engine per working tree: the process that runs the task (`host`), found by its lock
//! and socket in the tree's git dir (`place`), and the clients' side of the socket (`link`),
//! which every editor (`rein lsp`) and terminal command uses, so all of them see and control
//! the same task. The socket's messages are in `wire`. `control` knows nothing of this.

pub mod host;
pub mod link;
pub mod place;
pub mod wire;

pub use host::{serve, Served};
pub use link::{Heard, Listener, Remote};
pub use place::Place;
pub use wire::{Settings, WhenAlone};

/// Why the engine could not be reached or run.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// Finding the working tree.
    #[error(transparent)]
    Checkpoint(#[from] crate::checkpoint::CheckpointError),
    /// A file or socket operation.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The failure.
        source: std::io::Error,
    },
    /// A place Rein will not trust with its socket.
    #[error("{0}")]
    Unsafe(String),
    /// The engine refused the connection; its words say why.
    #[error("{0}")]
    Refused(String),
    /// The working tree is gone (a worktree task's, landed or discarded, under an editor
    /// still open on it).
    #[error("the working tree {} is gone (a worktree task's, landed or discarded?): close what is open on it", .0.display())]
    TreeGone(std::path::PathBuf),
    /// No engine runs, and the client was not to start one.
    #[error("no Rein engine runs on {root}")]
    NotRunning {
        /// The working tree.
        root: String,
    },
    /// No engine answered.
    #[error("the Rein engine of {root} did not start or answer; its log is {log}")]
    NoEngine {
        /// The working tree.
        root: String,
        /// The engine's log file.
        log: String,
    },
}
