//! Reconcile: what the human changed, and merging agent writes so human fixes survive.
//!
//! `merge` is the line-based three-way merge; `verdict` decides what an agent write, an
//! edit or an abort may do to a file; `report` tells both sides what the human changed;
//! `unsaved` brings an editor buffer typed over an older text onto the file as it is now.

pub mod merge;
pub mod report;
pub mod unsaved;
pub mod verdict;

pub use report::{FileReport, Report};
pub use verdict::Verdict;
