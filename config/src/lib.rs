//! weft-config: every `WEFT_*` / `NCCL_*` environment variable weft reads, read and checked
//! in one place into typed settings that the rest of weft takes as arguments.
//!
//! NCCL reads each of its variables through one table (`NCCL_PARAM(Name, "ENV", default)`),
//! so each has one default and one parser, and `NCCL_DEBUG=INFO` can list what was set.
//! This crate is that table for weft, low in the crate graph (it depends on weft-core only)
//! so that every crate can take its settings from it:
//!
//! - [`table`]: every variable: its names (`WEFT_` first, then NCCL's), its default, the
//!   values it takes, what it does, and its parser; [`table::TABLE`] lists them all.
//! - [`parse`]: the parsers; [`choice`]: the named choices (transport, address family...).
//! - [`settings`]: [`Settings`], the variables read once ([`Settings::from_env`], or
//!   [`Settings::from_lookup`] in tests), grouped as weft is: net, bootstrap, topology,
//!   transport, gpu, kernels, debug; with where each value came from.
//! - [`listing`]: what `weft config` prints, and NCCL_DEBUG=INFO's list of what was set;
//!   [`doc`]: docs/environment.md.
//! - [`lookup`]: the lookups values come from (blank counts as unset).
//!
//! A bad value is a [`ConfigError`] naming the variable, the value and what is allowed.

pub mod choice;
pub mod doc;
mod error;
pub mod listing;
pub mod lookup;
pub mod parse;
pub mod settings;
pub mod table;

pub use choice::{AddressFamily, DebugLevel, MeshTransport, NetBackend, TransportChoice};
pub use error::{BadValue, ConfigError};
pub use lookup::Lookup;
pub use settings::{
    BootstrapSettings, DebugSettings, GpuDirectSettings, GpuSettings, IbSettings, KernelSettings,
    MeshSettings, NetSettings, Origin, Settings, SocketSettings, TopologySettings,
    TransportSettings,
};
pub use table::Group;

#[cfg(test)]
mod tests;
