//! Side effects: the only place that touches the world (files and processes).
