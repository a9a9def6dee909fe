//! The language server: a thin protocol layer over `control`.
