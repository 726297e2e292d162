//! Bootstrap messages.
