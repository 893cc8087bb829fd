//! Ferrite host runtime (in progress).
