//! `#[repr(C)]` structs shared with CUDA kernels and C callers.
//!
//! These are the only weft types whose byte layout is a promise: the kernels (CUDA C++)
//! and C callers include `weft.h`, which cbindgen generates from this module, and read the
//! same bytes. Every struct therefore has explicit padding (`reserved` fields), `u64` for
//! every address, `u32` for every enumerated value, and compile-time size and offset
//! assertions next to its definition: a change that moves a field fails the build here
//! before it silently corrupts a kernel's view. Byte order is the host's (these never leave
//! the machine; wire formats in [`crate::wire`] are the ones that do).
//!
//! - [`kinds`]: `DataType`, `RedOp`, `CollKind`, `Algorithm`, `Protocol` with NCCL's numbers.
//! - [`conn`]: `ConnInfo`, one direction of one connection (buffers, head, tail, step, flags).
//! - [`work`]: `CollWork` and `KernelArgs`, what a ring launch asks for (up to
//!   `COLL_BATCH_MAX` collectives of a group); `P2pOp` and `P2pArgs`, what a point-to-point
//!   launch asks for.
//! - [`peer_work`]: `PeerWork` and `PeerBatch`, what a launch of a peer-pointer algorithm
//!   (one-shot, two-shot, NVLS) asks for.
//! - [`channel`]: `RingInfo`, `TreeInfo`, `ChannelPeer`, `DevChannel`, `DevComm`, and
//!   `KernelFault`, where a kernel that gave up on a peer says why.

pub mod channel;
pub mod conn;
pub mod kinds;
pub mod peer_work;
pub mod work;

pub use channel::{
    ChannelPeer, DevChannel, DevComm, FAULT_ABORTED, FAULT_CLAIMED, FAULT_MISMATCH, FAULT_NONE,
    FAULT_TIMEOUT, KernelFault, RingInfo, TreeInfo, WAIT_NVLS_FREED, WAIT_NVLS_POSTED,
    WAIT_P2P_TAG, WAIT_PEER_FLAG, WAIT_PEER_START, WAIT_RECV, WAIT_SEND,
};
pub use conn::{
    CONN_DIRECT_READ, CONN_DIRECT_WRITE, CONN_HOST_MEMORY, CONN_KNOWN_FLAGS, CONN_NVLS,
    CONN_PROXY_DRIVEN, CONN_SHARED_BUFFERS, ConnInfo, P2P_TAG_BYTES, P2P_TAG_MARK, PtrExchange,
    p2p_tag,
};
pub use kinds::{Algorithm, CollKind, DataType, Protocol, RedOp, UnknownName};
pub use peer_work::{
    PEER_ALGO_NVLS, PEER_ALGO_NVLS_UNICAST, PEER_ALGO_ONE_SHOT, PEER_ALGO_TWO_SHOT, PEER_BATCH_MAX,
    PEER_FLAGS_STRIDE, PEER_LANES, PEER_MAX_RANKS, PeerBatch, PeerWork,
};
pub use work::{
    COLL_BATCH_MAX, CollSpec, CollWork, KernelArgs, P2P_MAX_OPS, P2pArgs, P2pOp,
    RED_OP_ARG_DEVICE_PTR, RED_OP_KNOWN_FLAGS, RED_OP_PREMUL,
};

/// Version of the layouts in this module. Bumped on any change to a struct, a field's
/// meaning or an enum's numbers, so a kernel or C caller built against another `weft.h`
/// can refuse to run instead of misreading memory.
pub const ABI_VERSION: u32 = 7;

/// Number of FIFO protocols (LL, LL128, SIMPLE): NCCL's `NCCL_NUM_PROTOCOLS`.
pub const NUM_PROTOCOLS: usize = 3;

/// Slots in each connection's FIFO: NCCL's `NCCL_STEPS`.
pub const STEPS: u32 = 8;

/// Most channels a communicator uses: NCCL's `MAXCHANNELS`.
pub const MAX_CHANNELS: u32 = 64;

/// Most children of a rank in a tree: NCCL's `NCCL_MAX_TREE_ARITY`.
pub const TREE_MAX_CHILDREN: usize = 3;
