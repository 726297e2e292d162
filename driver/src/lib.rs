//! weft runtime.
