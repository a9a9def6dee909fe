//! Side effects: the only place that touches the world (files and processes).
//!
//! Everything the agent asks for arrives here as hostile input. `Sandbox` confines file
//! access to one working tree, `Policy` decides which shell commands may run without a
//! human, and `Process` runs a command in its own process group so it can be frozen,
//! resumed and killed as a whole; `Terminals` keeps the commands an agent runs in the
//! background. `Tree` does the same for an agent process and everything it started, wherever
//! that moved to (new sessions, double forks). A `Tap` follows a command's output live.

mod confine;
mod granted;
mod policy;
mod process;
mod sandbox;
mod search;
mod shell;
mod tap;
mod terminal;
mod trace;
mod tree;

use std::io;

pub use confine::{
    abi as landlock_abi, available as sandbox_available, coverage as sandbox_coverage, denial_hint,
    denied_path, ConfineError, Confinement, Coverage, SandboxMode, FORCE_VAR as SANDBOX_FORCE_VAR,
};
pub use granted::{granted_state, remember_state, GrantError};
pub use policy::{shared_git_write, Policy, Verdict};
pub use process::{end_tagged, Output, Process, OUTPUT_CAP, TAG_VAR};
pub use sandbox::{Node, NodeKind, Sandbox, MAX_COMPONENT_BYTES, MAX_PATH_BYTES, TEMP_PREFIX};
pub use search::RESULT_CAP;
pub use shell::written_words;
pub use tap::{Taken, Tap, CHUNK_CAP, TAIL_CAP};
pub use terminal::{Denied, Exit, Snapshot, TerminalError, Terminals, TERMINAL_OUTPUT_CAP};
pub use trace::{Trace, TraceError, Traced};
pub use tree::{
    descendants, make_subreaper, reap_orphans, state as process_state, Tree, AGENT_TAG_VAR,
};

/// Why touching the world failed.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The path is unsafe or malformed, so Rein refused to touch it.
    #[error("path {path:?} refused: {why}")]
    PathRefused {
        /// The path as given (shortened if very long).
        path: String,
        /// What is wrong with it and what to use instead.
        why: String,
    },
    /// The path names something that is not a regular file (a directory, a FIFO, ...).
    #[error("{path:?} is {what}, not a regular file; name a regular file instead")]
    NotAFile {
        /// The clean repo-relative path.
        path: String,
        /// What the path turned out to be, with its article ("a directory").
        what: &'static str,
    },
    /// The operating system refused a file operation inside the working tree.
    #[error("file operation on {path:?} failed: {source}; check that the path and its permissions are right")]
    Io {
        /// The path involved, repo-relative where possible.
        path: String,
        /// The underlying OS error.
        source: io::Error,
    },
    /// The sandbox a command must run in could not be set up.
    #[error("cannot confine command {cmd:?}: {why}; set sandbox = \"off\" in rein.toml to run it unconfined")]
    Confine {
        /// The command line.
        cmd: String,
        /// What Landlock said.
        why: String,
    },
    /// `sh` could not be started for a command.
    #[error("cannot start command {cmd:?}: {source}; check that the working directory exists and `sh` is installed")]
    Spawn {
        /// The command line.
        cmd: String,
        /// The underlying OS error.
        source: io::Error,
    },
    /// Sending a signal to a command's process group failed.
    #[error("cannot send {1} to process group {0}: {2}; the command may belong to another user")]
    Signal(i32, nix::sys::signal::Signal, #[source] nix::errno::Errno),
    /// Sending a signal to one process of an agent's tree failed.
    #[error("cannot send {1} to process {0}: {2}; the process may belong to another user")]
    SignalProcess(i32, nix::sys::signal::Signal, #[source] nix::errno::Errno),
    /// Rein could not become a child subreaper, so double-forked orphans of an agent go to
    /// init and may escape its tree.
    #[error("cannot make Rein a child subreaper: {0}; orphans of an agent's commands may escape pause and abort")]
    Subreaper(#[source] nix::errno::Errno),
    /// Waiting for a command to exit failed.
    #[error("waiting for process {pid} failed: {source}; the command's exit status is lost")]
    Wait {
        /// The process id of the command's shell.
        pid: u32,
        /// The underlying OS error.
        source: io::Error,
    },
    /// `Process::spawn` was called outside a tokio runtime.
    #[error("cannot run command {cmd:?}: no tokio runtime is running; call `Process::spawn` from async code")]
    NoRuntime {
        /// The command line.
        cmd: String,
    },
}
