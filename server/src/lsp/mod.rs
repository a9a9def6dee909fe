//! The language server: a thin protocol layer over `control`. It translates LSP messages into
//! engine requests and engine notices into LSP notifications; it holds no engine logic.
//!
//! `server` is the event loop, `transport` the stdio framing, `commands` and `actions` the
//! executeCommand and codeAction surfaces, `tasks` the surface of several tasks at once, `documents` the open buffers (and their `rein:`
//! comments, found by `crate::steer`), `config` the settings, `editor` how the client names actions and `log` the client-side
//! log.

mod actions;
mod commands;
pub mod config;
pub mod documents;
pub mod editor;
pub mod log;
mod server;
pub mod sync;
mod tasks;
pub mod transport;

pub use commands::COMMANDS;
pub use server::run;
