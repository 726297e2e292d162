//! Shared helpers for weft cross-crate tests.
