//! The constants of `weft_core::abi` under the C names the kernels (and C callers) use.
//!
//! cbindgen reads only literals, so each is written out here and checked against core at
//! compile time. `scripts/gen-header.sh` turns these and the `weft_core::abi` structs into
//! `include/weft_abi.h`, the header every kernel source includes; weft-capi's `weft.h` carries
//! the same items for C callers.

/// Layout version of the shared structs (`weft_abi_version()` gives the library's).
pub const WEFT_ABI_VERSION: u32 = 7;
/// FIFO protocols (LL, LL128, SIMPLE): NCCL's `NCCL_NUM_PROTOCOLS`.
pub const WEFT_NUM_PROTOCOLS: usize = 3;
/// Slots in each connection's FIFO: NCCL's `NCCL_STEPS`.
pub const WEFT_STEPS: u32 = 8;
/// Most channels per communicator: NCCL's `MAXCHANNELS`.
pub const WEFT_MAX_CHANNELS: u32 = 64;
/// Most children of a tree node: NCCL's `NCCL_MAX_TREE_ARITY`.
pub const WEFT_TREE_MAX_CHILDREN: usize = 3;
/// `weft_conn_info.flags`: the peer reads this rank's buffer directly (P2P read).
pub const WEFT_CONN_DIRECT_READ: u32 = 1 << 0;
/// `weft_conn_info.flags`: this rank writes into the peer's user buffer (P2P write).
pub const WEFT_CONN_DIRECT_WRITE: u32 = 1 << 1;
/// `weft_conn_info.flags`: the connection goes through an NVLS multicast buffer.
pub const WEFT_CONN_NVLS: u32 = 1 << 2;
/// `weft_conn_info.flags`: a proxy thread moves the data (NET), fed by `sizes_fifo`.
pub const WEFT_CONN_PROXY_DRIVEN: u32 = 1 << 3;
/// `weft_conn_info.flags`: buffers are shared between channels.
pub const WEFT_CONN_SHARED_BUFFERS: u32 = 1 << 4;
/// `weft_conn_info.flags`: buffers live in host memory (SHM, NET without GPUDirect).
pub const WEFT_CONN_HOST_MEMORY: u32 = 1 << 5;
/// Most operations in one `weft_p2p_args`.
pub const WEFT_P2P_MAX_OPS: usize = 16;
/// Most collectives of one ring launch (`weft_kernel_args.works`).
pub const WEFT_COLL_BATCH_MAX: usize = 8;
/// Most collectives of one peer-algorithm launch (`weft_peer_batch.works`).
pub const WEFT_PEER_BATCH_MAX: usize = 4;
/// `weft_kernel_fault.code`: nothing went wrong.
pub const WEFT_FAULT_NONE: u32 = 0;
/// `weft_kernel_fault.code`: a wait on a peer passed `weft_dev_comm.timeout_ns`.
pub const WEFT_FAULT_TIMEOUT: u32 = 1;
/// `weft_kernel_fault.code`: the host raised the abort flag during a wait.
pub const WEFT_FAULT_ABORTED: u32 = 2;
/// `weft_kernel_fault.code`: a kernel thread claimed the record and is writing it (the
/// block's warp groups share one record; the first to give up names the peer).
pub const WEFT_FAULT_CLAIMED: u32 = 3;
/// `weft_kernel_fault.code`: a point-to-point receive found no tag of its size from the
/// peer (`wait` is `WEFT_WAIT_P2P_TAG`).
pub const WEFT_FAULT_MISMATCH: u32 = 4;
/// `weft_kernel_fault.wait`: waiting for the peer's data.
pub const WEFT_WAIT_RECV: u32 = 0;
/// `weft_kernel_fault.wait`: waiting for the peer to free a FIFO slot.
pub const WEFT_WAIT_SEND: u32 = 1;
/// `weft_kernel_fault.wait`: waiting for the peer to start the collective (direct writes).
pub const WEFT_WAIT_PEER_START: u32 = 2;
/// `weft_kernel_fault.wait`: waiting for the peer to reach a one-/two-shot barrier.
pub const WEFT_WAIT_PEER_FLAG: u32 = 3;
/// `weft_kernel_fault.wait`: NVLS, waiting for scattered or reduced data.
pub const WEFT_WAIT_NVLS_POSTED: u32 = 4;
/// `weft_kernel_fault.wait`: NVLS, waiting for a slot to be freed.
pub const WEFT_WAIT_NVLS_FREED: u32 = 5;
/// `weft_kernel_fault.wait`: a point-to-point receive found no tag of its size from the
/// peer (`step`: the tag found, `waited_ns`: the tag expected).
pub const WEFT_WAIT_P2P_TAG: u32 = 6;
/// Most ranks a `weft_peer_work` addresses.
pub const WEFT_PEER_MAX_RANKS: usize = 8;
/// `weft_peer_work.algorithm`: one-shot all-reduce.
pub const WEFT_PEER_ALGO_ONE_SHOT: u32 = 0;
/// `weft_peer_work.algorithm`: two-shot all-reduce.
pub const WEFT_PEER_ALGO_TWO_SHOT: u32 = 1;
/// `weft_peer_work.algorithm`: NVLS through a multicast object.
pub const WEFT_PEER_ALGO_NVLS: u32 = 2;
/// `weft_peer_work.algorithm`: NVLS in its unicast form over peer mappings.
pub const WEFT_PEER_ALGO_NVLS_UNICAST: u32 = 3;
/// Bytes of one channel's flags in a one-/two-shot window's flag area.
pub const WEFT_PEER_FLAGS_STRIDE: u64 = 128;
/// Lanes of the LL one-shot's data window: at most this many channels per one-shot call.
pub const WEFT_PEER_LANES: u32 = 32;
/// `weft_coll_work.red_op_flags`: the Avg kernels run PreMulSum (pre-multiply every type,
/// no final division).
pub const WEFT_RED_OP_PREMUL: u32 = 1 << 0;
/// `weft_coll_work.red_op_flags`: `red_op_arg` is the device address of the factor.
pub const WEFT_RED_OP_ARG_DEVICE_PTR: u32 = 1 << 1;

const _: () = {
    use weft_core::abi as core_abi;
    assert!(WEFT_ABI_VERSION == core_abi::ABI_VERSION);
    assert!(WEFT_NUM_PROTOCOLS == core_abi::NUM_PROTOCOLS);
    assert!(WEFT_STEPS == core_abi::STEPS);
    assert!(WEFT_MAX_CHANNELS == core_abi::MAX_CHANNELS);
    assert!(WEFT_TREE_MAX_CHILDREN == core_abi::TREE_MAX_CHILDREN);
    assert!(WEFT_CONN_DIRECT_READ == core_abi::CONN_DIRECT_READ);
    assert!(WEFT_CONN_DIRECT_WRITE == core_abi::CONN_DIRECT_WRITE);
    assert!(WEFT_CONN_NVLS == core_abi::CONN_NVLS);
    assert!(WEFT_CONN_PROXY_DRIVEN == core_abi::CONN_PROXY_DRIVEN);
    assert!(WEFT_CONN_SHARED_BUFFERS == core_abi::CONN_SHARED_BUFFERS);
    assert!(WEFT_CONN_HOST_MEMORY == core_abi::CONN_HOST_MEMORY);
    assert!(WEFT_P2P_MAX_OPS == core_abi::P2P_MAX_OPS);
    assert!(WEFT_COLL_BATCH_MAX == core_abi::COLL_BATCH_MAX);
    assert!(WEFT_PEER_BATCH_MAX == core_abi::PEER_BATCH_MAX);
    assert!(WEFT_FAULT_NONE == core_abi::FAULT_NONE);
    assert!(WEFT_FAULT_TIMEOUT == core_abi::FAULT_TIMEOUT);
    assert!(WEFT_FAULT_ABORTED == core_abi::FAULT_ABORTED);
    assert!(WEFT_FAULT_CLAIMED == core_abi::FAULT_CLAIMED);
    assert!(WEFT_FAULT_MISMATCH == core_abi::FAULT_MISMATCH);
    assert!(WEFT_WAIT_RECV == core_abi::WAIT_RECV);
    assert!(WEFT_WAIT_SEND == core_abi::WAIT_SEND);
    assert!(WEFT_WAIT_PEER_START == core_abi::WAIT_PEER_START);
    assert!(WEFT_WAIT_PEER_FLAG == core_abi::WAIT_PEER_FLAG);
    assert!(WEFT_WAIT_NVLS_POSTED == core_abi::WAIT_NVLS_POSTED);
    assert!(WEFT_WAIT_NVLS_FREED == core_abi::WAIT_NVLS_FREED);
    assert!(WEFT_WAIT_P2P_TAG == core_abi::WAIT_P2P_TAG);
    assert!(WEFT_PEER_MAX_RANKS == core_abi::PEER_MAX_RANKS);
    assert!(WEFT_PEER_ALGO_ONE_SHOT == core_abi::PEER_ALGO_ONE_SHOT);
    assert!(WEFT_PEER_ALGO_TWO_SHOT == core_abi::PEER_ALGO_TWO_SHOT);
    assert!(WEFT_PEER_ALGO_NVLS == core_abi::PEER_ALGO_NVLS);
    assert!(WEFT_PEER_ALGO_NVLS_UNICAST == core_abi::PEER_ALGO_NVLS_UNICAST);
    assert!(WEFT_PEER_FLAGS_STRIDE == core_abi::PEER_FLAGS_STRIDE);
    assert!(WEFT_PEER_LANES == core_abi::PEER_LANES);
    assert!(WEFT_RED_OP_PREMUL == core_abi::RED_OP_PREMUL);
    assert!(WEFT_RED_OP_ARG_DEVICE_PTR == core_abi::RED_OP_ARG_DEVICE_PTR);
    assert!(core_abi::RED_OP_KNOWN_FLAGS == WEFT_RED_OP_PREMUL | WEFT_RED_OP_ARG_DEVICE_PTR);
    assert!(
        core_abi::CONN_KNOWN_FLAGS
            == WEFT_CONN_DIRECT_READ
                | WEFT_CONN_DIRECT_WRITE
                | WEFT_CONN_NVLS
                | WEFT_CONN_PROXY_DRIVEN
                | WEFT_CONN_SHARED_BUFFERS
                | WEFT_CONN_HOST_MEMORY
    );
};
