//! weft-core: the part of weft that never learns an operating system exists.
//!
//! Layers, in the order data flows through them:
//!
//! - [`wire`]: byte formats that cross a process or host boundary (the mesh handle, connect
//!   infos, bootstrap messages). Each is a checked view over bytes plus a plain `Repr` with
//!   `parse` / `emit`; explicit endianness, a magic and a version on every format.
//! - [`net`]: IPv4/IPv6 subnet math and the choice of (local NIC, peer address) pairs.
//! - [`fifo`]: the step/credit protocol that a sender and a receiver run over a ring of slots.
//! - [`sched`]: chunk and slice sizes, and the per-rank ring programs of each collective.
//! - [`nvls`]: NVLS (NVLink SHARP) buffer layout: per-head, per-channel slots and counters
//!   in the memory bound to a multicast object, and the per-head chunking of a channel.
//! - [`tune`]: NCCL's tuner model (what each protocol costs) and `NCCL_PROTO`.
//! - [`algo`]: the one chooser of a call's algorithm (ring, one-shot, two-shot, NVLS) and
//!   protocol (LL, SIMPLE), for the CPU executor and the GPU kernels alike: the tuner, then
//!   `WEFT_ALGO` or the measured rule for the peer-pointer algorithms.
//! - [`topo`] and [`search`] (feature `alloc`): the topology graph, NCCL's topology XML, and
//!   the ring / tree / NVLS channel search.
//! - [`abi`]: `#[repr(C)]` structs shared with CUDA kernels and C callers.
//!
//! Contract: no `unsafe`, no allocation unless the `alloc` feature is on, and no panic on any
//! input. Arithmetic on sizes from outside is checked; slices are read with `get`.
#![no_std]
#![forbid(unsafe_code)]
#![cfg_attr(
    not(test),
    deny(
        clippy::indexing_slicing,
        clippy::arithmetic_side_effects,
        clippy::panic,
        clippy::unwrap_used,
        clippy::expect_used
    )
)]

#[cfg(any(feature = "alloc", test))]
extern crate alloc;
#[cfg(test)]
extern crate std;

pub mod abi;
pub mod algo;
pub mod element;
pub mod fifo;
pub mod net;
pub mod nvls;
pub mod sched;
#[cfg(feature = "alloc")]
pub mod search;
#[cfg(feature = "alloc")]
pub mod topo;
pub mod tune;
pub mod wire;
