//! Checkpoints of the working tree into git, through a private index.
