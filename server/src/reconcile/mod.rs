//! Reconcile: what the human changed, and merging agent writes so human fixes survive.
