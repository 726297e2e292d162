//! Shared helpers for weft cross-crate tests.
//!
//! - [`elf`]: the symbols a shared library exports (its ELF `.dynsym`).

pub mod elf;
