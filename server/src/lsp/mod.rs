//! The language server: a thin protocol layer over `control`.

pub mod documents;
pub mod steer;
