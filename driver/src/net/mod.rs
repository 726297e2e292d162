//! The `Net` trait and its backends.
