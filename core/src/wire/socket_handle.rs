//! The socket NET backend listen handle.
