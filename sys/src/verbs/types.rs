//! The structs and constants of rdma-core's `<infiniband/verbs.h>` that weft uses, laid out
//! as the header lays them out (checked field by field against the installed header by
//! `tests/verbs_layout.rs`).
//!
//! Structs that libibverbs allocates (device, context, pd, mr, cq, qp) are read through
//! pointers; structs that callers fill (attributes, work requests, completions) have a
//! `zeroed()` constructor, since every field of them is valid as zero bytes.
//! C enums are `#[repr(transparent)]` newtypes, so an unknown value from a newer library
//! is never an invalid Rust value; bit flags are plain constants to be or-ed.

#![allow(non_camel_case_types)]

use core::ffi::{c_char, c_int, c_uint, c_void};
use core::fmt;

macro_rules! c_enum {
    ($(#[$doc:meta])* $name:ident : $repr:ty { $($variant:ident = $value:expr,)* }) => {
        $(#[$doc])*
        #[repr(transparent)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub $repr);

        impl $name {
            $(pub const $variant: Self = Self($value);)*
        }
    };
}

/// Implements `zeroed()` for structs every field of which is an integer, a raw pointer,
/// an `Option` of a function pointer, a pthread object, or an array or union of these.
macro_rules! zeroable {
    ($($name:ident),* $(,)?) => {$(
        impl $name {
            /// All fields zero (null pointers, zero counts, state 0).
            pub fn zeroed() -> Self {
                // SAFETY: per the macro's contract, the all-zero bit pattern is a valid
                // value of every field of this struct (integers, raw pointers, Option of
                // fn pointers, glibc pthread objects whose static initialiser is zero).
                unsafe { core::mem::zeroed() }
            }
        }
    )*};
}

c_enum! {
    /// `enum ibv_node_type`.
    ibv_node_type: c_int {
        IBV_NODE_UNKNOWN = -1,
        IBV_NODE_CA = 1,
        IBV_NODE_SWITCH = 2,
        IBV_NODE_ROUTER = 3,
        IBV_NODE_RNIC = 4,
    }
}

c_enum! {
    /// `enum ibv_transport_type`.
    ibv_transport_type: c_int {
        IBV_TRANSPORT_UNKNOWN = -1,
        IBV_TRANSPORT_IB = 0,
        IBV_TRANSPORT_IWARP = 1,
    }
}

c_enum! {
    /// `enum ibv_mtu`.
    ibv_mtu: c_uint {
        IBV_MTU_256 = 1,
        IBV_MTU_512 = 2,
        IBV_MTU_1024 = 3,
        IBV_MTU_2048 = 4,
        IBV_MTU_4096 = 5,
    }
}

c_enum! {
    /// `enum ibv_port_state`.
    ibv_port_state: c_uint {
        IBV_PORT_NOP = 0,
        IBV_PORT_DOWN = 1,
        IBV_PORT_INIT = 2,
        IBV_PORT_ARMED = 3,
        IBV_PORT_ACTIVE = 4,
        IBV_PORT_ACTIVE_DEFER = 5,
    }
}

/// `ibv_port_attr::link_layer` values.
pub const IBV_LINK_LAYER_UNSPECIFIED: u8 = 0;
/// InfiniBand link layer (addressed by LID).
pub const IBV_LINK_LAYER_INFINIBAND: u8 = 1;
/// Ethernet link layer: RoCE (addressed by GID only).
pub const IBV_LINK_LAYER_ETHERNET: u8 = 2;

c_enum! {
    /// `enum ibv_qp_type`.
    ibv_qp_type: c_uint {
        IBV_QPT_RC = 2,
        IBV_QPT_UC = 3,
        IBV_QPT_UD = 4,
        IBV_QPT_RAW_PACKET = 8,
    }
}

c_enum! {
    /// `enum ibv_qp_state`.
    ibv_qp_state: c_uint {
        IBV_QPS_RESET = 0,
        IBV_QPS_INIT = 1,
        IBV_QPS_RTR = 2,
        IBV_QPS_RTS = 3,
        IBV_QPS_SQD = 4,
        IBV_QPS_SQE = 5,
        IBV_QPS_ERR = 6,
        IBV_QPS_UNKNOWN = 7,
    }
}

c_enum! {
    /// `enum ibv_mig_state`.
    ibv_mig_state: c_uint {
        IBV_MIG_MIGRATED = 0,
        IBV_MIG_REARM = 1,
        IBV_MIG_ARMED = 2,
    }
}

c_enum! {
    /// `enum ibv_atomic_cap`.
    ibv_atomic_cap: c_uint {
        IBV_ATOMIC_NONE = 0,
        IBV_ATOMIC_HCA = 1,
        IBV_ATOMIC_GLOB = 2,
    }
}

c_enum! {
    /// `enum ibv_wr_opcode`.
    ibv_wr_opcode: c_uint {
        IBV_WR_RDMA_WRITE = 0,
        IBV_WR_RDMA_WRITE_WITH_IMM = 1,
        IBV_WR_SEND = 2,
        IBV_WR_SEND_WITH_IMM = 3,
        IBV_WR_RDMA_READ = 4,
        IBV_WR_ATOMIC_CMP_AND_SWP = 5,
        IBV_WR_ATOMIC_FETCH_AND_ADD = 6,
        IBV_WR_LOCAL_INV = 7,
        IBV_WR_BIND_MW = 8,
        IBV_WR_SEND_WITH_INV = 9,
    }
}

c_enum! {
    /// `enum ibv_wc_opcode`.
    ibv_wc_opcode: c_uint {
        IBV_WC_SEND = 0,
        IBV_WC_RDMA_WRITE = 1,
        IBV_WC_RDMA_READ = 2,
        IBV_WC_COMP_SWAP = 3,
        IBV_WC_FETCH_ADD = 4,
        IBV_WC_BIND_MW = 5,
        IBV_WC_LOCAL_INV = 6,
        IBV_WC_RECV = 128,
        IBV_WC_RECV_RDMA_WITH_IMM = 129,
    }
}

c_enum! {
    /// `enum ibv_wc_status`; [`summary`](Self::summary) and [`hint`](Self::hint) say what
    /// a failure means.
    ibv_wc_status: c_uint {
        IBV_WC_SUCCESS = 0,
        IBV_WC_LOC_LEN_ERR = 1,
        IBV_WC_LOC_QP_OP_ERR = 2,
        IBV_WC_LOC_EEC_OP_ERR = 3,
        IBV_WC_LOC_PROT_ERR = 4,
        IBV_WC_WR_FLUSH_ERR = 5,
        IBV_WC_MW_BIND_ERR = 6,
        IBV_WC_BAD_RESP_ERR = 7,
        IBV_WC_LOC_ACCESS_ERR = 8,
        IBV_WC_REM_INV_REQ_ERR = 9,
        IBV_WC_REM_ACCESS_ERR = 10,
        IBV_WC_REM_OP_ERR = 11,
        IBV_WC_RETRY_EXC_ERR = 12,
        IBV_WC_RNR_RETRY_EXC_ERR = 13,
        IBV_WC_LOC_RDD_VIOL_ERR = 14,
        IBV_WC_REM_INV_RD_REQ_ERR = 15,
        IBV_WC_REM_ABORT_ERR = 16,
        IBV_WC_INV_EECN_ERR = 17,
        IBV_WC_INV_EEC_STATE_ERR = 18,
        IBV_WC_FATAL_ERR = 19,
        IBV_WC_RESP_TIMEOUT_ERR = 20,
        IBV_WC_GENERAL_ERR = 21,
        IBV_WC_TM_ERR = 22,
        IBV_WC_TM_RNDV_INCOMPLETE = 23,
    }
}

/// `enum ibv_access_flags`: may be written locally (needed for any receive or read target).
pub const IBV_ACCESS_LOCAL_WRITE: c_uint = 1;
/// The peer may RDMA-write into the region.
pub const IBV_ACCESS_REMOTE_WRITE: c_uint = 1 << 1;
/// The peer may RDMA-read the region.
pub const IBV_ACCESS_REMOTE_READ: c_uint = 1 << 2;
/// The peer may run atomics on the region.
pub const IBV_ACCESS_REMOTE_ATOMIC: c_uint = 1 << 3;
/// Relaxed PCIe ordering (needs `ibv_reg_mr_iova2`; ignored where unsupported).
pub const IBV_ACCESS_RELAXED_ORDERING: c_uint = 1 << 20;

/// `enum ibv_send_flags`: order after prior RDMA reads.
pub const IBV_SEND_FENCE: c_uint = 1;
/// Generate a completion for this work request.
pub const IBV_SEND_SIGNALED: c_uint = 1 << 1;
/// Set the solicited-event bit.
pub const IBV_SEND_SOLICITED: c_uint = 1 << 2;
/// Copy the payload into the work request (the buffer is reusable at once).
pub const IBV_SEND_INLINE: c_uint = 1 << 3;

/// `enum ibv_wc_flags`: the completion carries immediate data.
pub const IBV_WC_WITH_IMM: c_uint = 1 << 1;

/// `enum ibv_qp_attr_mask` bits, for `ibv_modify_qp` / `ibv_query_qp`.
pub const IBV_QP_STATE: c_int = 1;
pub const IBV_QP_CUR_STATE: c_int = 1 << 1;
pub const IBV_QP_ACCESS_FLAGS: c_int = 1 << 3;
pub const IBV_QP_PKEY_INDEX: c_int = 1 << 4;
pub const IBV_QP_PORT: c_int = 1 << 5;
pub const IBV_QP_QKEY: c_int = 1 << 6;
pub const IBV_QP_AV: c_int = 1 << 7;
pub const IBV_QP_PATH_MTU: c_int = 1 << 8;
pub const IBV_QP_TIMEOUT: c_int = 1 << 9;
pub const IBV_QP_RETRY_CNT: c_int = 1 << 10;
pub const IBV_QP_RNR_RETRY: c_int = 1 << 11;
pub const IBV_QP_RQ_PSN: c_int = 1 << 12;
pub const IBV_QP_MAX_QP_RD_ATOMIC: c_int = 1 << 13;
pub const IBV_QP_MIN_RNR_TIMER: c_int = 1 << 15;
pub const IBV_QP_SQ_PSN: c_int = 1 << 16;
pub const IBV_QP_MAX_DEST_RD_ATOMIC: c_int = 1 << 17;
pub const IBV_QP_CAP: c_int = 1 << 19;
pub const IBV_QP_DEST_QPN: c_int = 1 << 20;

/// `IBV_SYSFS_NAME_MAX`.
pub const IBV_SYSFS_NAME_MAX: usize = 64;
/// `IBV_SYSFS_PATH_MAX`.
pub const IBV_SYSFS_PATH_MAX: usize = 256;

/// `union ibv_gid`: 16 bytes, an IPv6-format address (RoCE v2 GIDs embed IPv4 as
/// `::ffff:a.b.c.d`).
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_gid {
    /// The address bytes, network order.
    pub raw: [u8; 16],
    /// Subnet prefix and interface id, both big-endian.
    pub global: ibv_gid_global,
}

/// `ibv_gid::global`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ibv_gid_global {
    /// Big-endian subnet prefix.
    pub subnet_prefix: u64,
    /// Big-endian interface id.
    pub interface_id: u64,
}

impl ibv_gid {
    /// The 16 bytes of the GID.
    pub fn bytes(&self) -> [u8; 16] {
        // SAFETY: both members are 16 bytes of plain integers, so any bit pattern is a
        // valid `[u8; 16]`.
        unsafe { self.raw }
    }

    /// A GID from its bytes.
    pub fn from_bytes(raw: [u8; 16]) -> Self {
        Self { raw }
    }
}

impl PartialEq for ibv_gid {
    fn eq(&self, other: &Self) -> bool {
        self.bytes() == other.bytes()
    }
}

impl Eq for ibv_gid {}

impl fmt::Debug for ibv_gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bytes = self.bytes();
        write!(f, "ibv_gid(")?;
        for (i, pair) in bytes.chunks(2).enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            for byte in pair {
                write!(f, "{byte:02x}")?;
            }
        }
        f.write_str(")")
    }
}

/// `struct _ibv_device_ops`: obsolete, kept for layout.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct _ibv_device_ops {
    _dummy1: *mut c_void,
    _dummy2: *mut c_void,
}

/// `struct ibv_device`: one RDMA device, as listed by `ibv_get_device_list`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_device {
    _ops: _ibv_device_ops,
    /// CA, switch, router, RNIC.
    pub node_type: ibv_node_type,
    /// IB or iWARP.
    pub transport_type: ibv_transport_type,
    /// Kernel device name, e.g. `mlx5_0` (NUL-terminated).
    pub name: [c_char; IBV_SYSFS_NAME_MAX],
    /// uverbs device name, e.g. `uverbs0`.
    pub dev_name: [c_char; IBV_SYSFS_NAME_MAX],
    /// sysfs path of the uverbs device.
    pub dev_path: [c_char; IBV_SYSFS_PATH_MAX],
    /// sysfs path of the IB device (its `device` link leads to the PCI function).
    pub ibdev_path: [c_char; IBV_SYSFS_PATH_MAX],
}

/// A slot of the operations table that weft never calls.
type UnusedOp = *mut c_void;

/// `int (*post_send)(struct ibv_qp *, struct ibv_send_wr *, struct ibv_send_wr **)`.
pub type PostSendFn =
    unsafe extern "C" fn(*mut ibv_qp, *mut ibv_send_wr, *mut *mut ibv_send_wr) -> c_int;
/// `int (*post_recv)(struct ibv_qp *, struct ibv_recv_wr *, struct ibv_recv_wr **)`.
pub type PostRecvFn =
    unsafe extern "C" fn(*mut ibv_qp, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;
/// `int (*poll_cq)(struct ibv_cq *, int, struct ibv_wc *)`.
pub type PollCqFn = unsafe extern "C" fn(*mut ibv_cq, c_int, *mut ibv_wc) -> c_int;
/// `int (*req_notify_cq)(struct ibv_cq *, int solicited_only)`.
pub type ReqNotifyCqFn = unsafe extern "C" fn(*mut ibv_cq, c_int) -> c_int;

/// `struct ibv_context_ops`: the provider's data-path entry points, which rdma-core's
/// `static inline` `ibv_post_send` / `ibv_post_recv` / `ibv_poll_cq` call directly (32
/// pointer slots; the ones weft does not call are kept opaque).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_context_ops {
    /// `_compat_query_device` ... `dealloc_mw`.
    _before_poll_cq: [UnusedOp; 11],
    /// Poll a CQ for up to `num_entries` completions.
    pub poll_cq: Option<PollCqFn>,
    /// Arm a CQ's completion channel.
    pub req_notify_cq: Option<ReqNotifyCqFn>,
    /// `_compat_cq_event` ... `_compat_destroy_srq`.
    _before_post_srq_recv: [UnusedOp; 7],
    /// Post to a shared receive queue.
    pub post_srq_recv: Option<unsafe extern "C" fn() -> c_int>,
    /// `_compat_create_qp` ... `_compat_destroy_qp`.
    _before_post_send: [UnusedOp; 4],
    /// Post a chain of send work requests.
    pub post_send: Option<PostSendFn>,
    /// Post a chain of receive work requests.
    pub post_recv: Option<PostRecvFn>,
    /// `_compat_create_ah` ... `_compat_async_event`.
    _after_post_recv: [UnusedOp; 5],
}

/// `struct ibv_context`: an open device.
#[repr(C)]
pub struct ibv_context {
    /// The device it was opened from.
    pub device: *mut ibv_device,
    /// The provider's data-path operations.
    pub ops: ibv_context_ops,
    /// Command file descriptor.
    pub cmd_fd: c_int,
    /// Asynchronous event file descriptor (poll it for `ibv_get_async_event`).
    pub async_fd: c_int,
    /// Number of completion vectors.
    pub num_comp_vectors: c_int,
    /// The library's lock.
    pub mutex: libc::pthread_mutex_t,
    /// Private to libibverbs.
    pub abi_compat: *mut c_void,
}

/// `struct ibv_device_attr` (from `ibv_query_device`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_device_attr {
    pub fw_ver: [c_char; 64],
    /// Big-endian.
    pub node_guid: u64,
    /// Big-endian.
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: c_int,
    pub max_qp_wr: c_int,
    pub device_cap_flags: c_uint,
    pub max_sge: c_int,
    pub max_sge_rd: c_int,
    pub max_cq: c_int,
    pub max_cqe: c_int,
    pub max_mr: c_int,
    pub max_pd: c_int,
    pub max_qp_rd_atom: c_int,
    pub max_ee_rd_atom: c_int,
    pub max_res_rd_atom: c_int,
    pub max_qp_init_rd_atom: c_int,
    pub max_ee_init_rd_atom: c_int,
    pub atomic_cap: ibv_atomic_cap,
    pub max_ee: c_int,
    pub max_rdd: c_int,
    pub max_mw: c_int,
    pub max_raw_ipv6_qp: c_int,
    pub max_raw_ethy_qp: c_int,
    pub max_mcast_grp: c_int,
    pub max_mcast_qp_attach: c_int,
    pub max_total_mcast_qp_attach: c_int,
    pub max_ah: c_int,
    pub max_fmr: c_int,
    pub max_map_per_fmr: c_int,
    pub max_srq: c_int,
    pub max_srq_wr: c_int,
    pub max_srq_sge: c_int,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
}

/// `struct ibv_port_attr` (from `ibv_query_port`). The exported `ibv_query_port` fills
/// the fields up to `link_layer`; `flags` and `port_cap_flags2` stay as passed in (zero
/// from [`zeroed`](Self::zeroed)).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_port_attr {
    pub state: ibv_port_state,
    pub max_mtu: ibv_mtu,
    pub active_mtu: ibv_mtu,
    pub gid_tbl_len: c_int,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    /// `IBV_LINK_LAYER_*`.
    pub link_layer: u8,
    pub flags: u8,
    pub port_cap_flags2: u16,
}

/// `struct ibv_pd`: a protection domain.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_pd {
    pub context: *mut ibv_context,
    pub handle: u32,
}

/// `struct ibv_mr`: a registered memory region.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_mr {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub addr: *mut c_void,
    pub length: usize,
    pub handle: u32,
    /// Key for local SGEs.
    pub lkey: u32,
    /// Key the peer uses to access the region.
    pub rkey: u32,
}

/// `struct ibv_comp_channel`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_comp_channel {
    pub context: *mut ibv_context,
    pub fd: c_int,
    pub refcnt: c_int,
}

/// `struct ibv_cq`: a completion queue.
#[repr(C)]
pub struct ibv_cq {
    pub context: *mut ibv_context,
    pub channel: *mut ibv_comp_channel,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: c_int,
    pub mutex: libc::pthread_mutex_t,
    pub cond: libc::pthread_cond_t,
    pub comp_events_completed: u32,
    pub async_events_completed: u32,
}

/// `struct ibv_srq` (only pointed to).
#[repr(C)]
#[derive(Debug)]
pub struct ibv_srq {
    _private: [u8; 0],
}

/// `struct ibv_ah` (only pointed to).
#[repr(C)]
#[derive(Debug)]
pub struct ibv_ah {
    _private: [u8; 0],
}

/// `struct ibv_mw` (only pointed to).
#[repr(C)]
#[derive(Debug)]
pub struct ibv_mw {
    _private: [u8; 0],
}

/// `struct ibv_qp`: a queue pair.
#[repr(C)]
pub struct ibv_qp {
    pub context: *mut ibv_context,
    pub qp_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub handle: u32,
    /// What the peer addresses (`dest_qp_num`).
    pub qp_num: u32,
    pub state: ibv_qp_state,
    pub qp_type: ibv_qp_type,
    pub mutex: libc::pthread_mutex_t,
    pub cond: libc::pthread_cond_t,
    pub events_completed: u32,
}

/// `struct ibv_qp_cap`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ibv_qp_cap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

/// `struct ibv_qp_init_attr` (for `ibv_create_qp`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_qp_init_attr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub cap: ibv_qp_cap,
    pub qp_type: ibv_qp_type,
    /// Non-zero: every send generates a completion.
    pub sq_sig_all: c_int,
}

/// `struct ibv_global_route`: the GRH part of an address vector (always used on RoCE).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_global_route {
    pub dgid: ibv_gid,
    pub flow_label: u32,
    /// Local GID table index: on RoCE this picks v1/v2 and IPv4/IPv6 (`NCCL_IB_GID_INDEX`).
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

/// `struct ibv_ah_attr`: an address vector.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_ah_attr {
    pub grh: ibv_global_route,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    /// Non-zero when `grh` is used (required on RoCE).
    pub is_global: u8,
    pub port_num: u8,
}

/// `struct ibv_qp_attr` (for `ibv_modify_qp` / `ibv_query_qp`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_qp_attr {
    pub qp_state: ibv_qp_state,
    pub cur_qp_state: ibv_qp_state,
    pub path_mtu: ibv_mtu,
    pub path_mig_state: ibv_mig_state,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: c_uint,
    pub cap: ibv_qp_cap,
    pub ah_attr: ibv_ah_attr,
    pub alt_ah_attr: ibv_ah_attr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    /// Local ACK timeout: 4.096 us * 2^timeout.
    pub timeout: u8,
    pub retry_cnt: u8,
    /// 7 means retry forever.
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub rate_limit: u32,
}

/// `struct ibv_sge`: one scatter/gather element.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ibv_sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// `ibv_send_wr::wr.rdma`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ibv_send_wr_rdma {
    pub remote_addr: u64,
    pub rkey: u32,
}

/// `ibv_send_wr::wr.atomic`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ibv_send_wr_atomic {
    pub remote_addr: u64,
    pub compare_add: u64,
    pub swap: u64,
    pub rkey: u32,
}

/// `ibv_send_wr::wr.ud`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_send_wr_ud {
    pub ah: *mut ibv_ah,
    pub remote_qpn: u32,
    pub remote_qkey: u32,
}

/// `ibv_send_wr::wr`: the opcode-specific part.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_wr {
    /// RDMA write / read.
    pub rdma: ibv_send_wr_rdma,
    /// Atomics.
    pub atomic: ibv_send_wr_atomic,
    /// Unreliable datagram sends.
    pub ud: ibv_send_wr_ud,
}

/// `ibv_send_wr::qp_type.xrc`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ibv_send_wr_xrc {
    pub remote_srqn: u32,
}

/// `struct ibv_mw_bind_info`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_mw_bind_info {
    pub mr: *mut ibv_mr,
    pub addr: u64,
    pub length: u64,
    pub mw_access_flags: c_uint,
}

/// `ibv_send_wr::bind_mw`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_send_wr_bind_mw {
    pub mw: *mut ibv_mw,
    pub rkey: u32,
    pub bind_info: ibv_mw_bind_info,
}

/// `ibv_send_wr::tso`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_send_wr_tso {
    pub hdr: *mut c_void,
    pub hdr_sz: u16,
    pub mss: u16,
}

/// The trailing anonymous union of `struct ibv_send_wr` (`bind_mw` / `tso`).
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_bind_mw_or_tso {
    pub bind_mw: ibv_send_wr_bind_mw,
    pub tso: ibv_send_wr_tso,
}

/// `struct ibv_send_wr`: a send work request; `next` chains several into one post.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr {
    /// Returned in the completion.
    pub wr_id: u64,
    pub next: *mut ibv_send_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
    pub opcode: ibv_wr_opcode,
    /// `IBV_SEND_*` bits.
    pub send_flags: c_uint,
    /// Immediate data (network order) for `*_WITH_IMM`; the rkey to invalidate for
    /// `*_INV` (`invalidate_rkey` in C shares this slot).
    pub imm_data: u32,
    /// Opcode-specific: remote address and key.
    pub wr: ibv_send_wr_wr,
    /// `qp_type.xrc`.
    pub qp_type: ibv_send_wr_xrc,
    /// Memory-window bind or TSO (C's anonymous union).
    pub bind_mw_or_tso: ibv_send_wr_bind_mw_or_tso,
}

impl fmt::Debug for ibv_send_wr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The union members are shown only as the RDMA view, which is valid as integers
        // whatever the opcode (every member starts with a u64 or a pointer).
        // SAFETY: `rdma` is two integers; any bit pattern is a valid value of them.
        let rdma = unsafe { self.wr.rdma };
        f.debug_struct("ibv_send_wr")
            .field("wr_id", &self.wr_id)
            .field("next", &self.next)
            .field("sg_list", &self.sg_list)
            .field("num_sge", &self.num_sge)
            .field("opcode", &self.opcode)
            .field("send_flags", &self.send_flags)
            .field("imm_data", &self.imm_data)
            .field("wr.rdma", &rdma)
            .finish_non_exhaustive()
    }
}

/// `struct ibv_recv_wr`: a receive work request.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_recv_wr {
    pub wr_id: u64,
    pub next: *mut ibv_recv_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
}

/// `struct ibv_wc`: a work completion.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ibv_wc {
    /// The `wr_id` of the work request that completed.
    pub wr_id: u64,
    pub status: ibv_wc_status,
    pub opcode: ibv_wc_opcode,
    /// Vendor error code; quote it when reporting a failure.
    pub vendor_err: u32,
    pub byte_len: u32,
    /// Immediate data (network order) when `wc_flags & IBV_WC_WITH_IMM`; the invalidated
    /// rkey with `IBV_WC_WITH_INV` (`invalidated_rkey` in C shares this slot).
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: c_uint,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

c_enum! {
    /// `enum ibv_event_type`.
    ibv_event_type: c_uint {
        IBV_EVENT_CQ_ERR = 0,
        IBV_EVENT_QP_FATAL = 1,
        IBV_EVENT_QP_REQ_ERR = 2,
        IBV_EVENT_QP_ACCESS_ERR = 3,
        IBV_EVENT_COMM_EST = 4,
        IBV_EVENT_PATH_MIG_ERR = 7,
        IBV_EVENT_DEVICE_FATAL = 8,
        IBV_EVENT_PORT_ACTIVE = 9,
        IBV_EVENT_PORT_ERR = 10,
        IBV_EVENT_GID_CHANGE = 18,
    }
}

/// `ibv_async_event::element`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_async_event_element {
    pub cq: *mut ibv_cq,
    pub qp: *mut ibv_qp,
    pub srq: *mut ibv_srq,
    pub port_num: c_int,
}

/// `struct ibv_async_event` (from `ibv_get_async_event`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_async_event {
    /// The object the event is about; which member depends on `event_type`.
    pub element: ibv_async_event_element,
    pub event_type: ibv_event_type,
}

impl fmt::Debug for ibv_async_event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // SAFETY: reading the pointer member is valid for any bit pattern (a raw pointer
        // that is only printed, never dereferenced).
        let element = unsafe { self.element.cq };
        f.debug_struct("ibv_async_event")
            .field("element", &element)
            .field("event_type", &self.event_type)
            .finish()
    }
}

/// `enum ibv_gid_type` (in `ibv_gid_entry::gid_type`).
pub const IBV_GID_TYPE_IB: u32 = 0;
/// RoCE v1 (layer 2).
pub const IBV_GID_TYPE_ROCE_V1: u32 = 1;
/// RoCE v2 (UDP/IP, routable).
pub const IBV_GID_TYPE_ROCE_V2: u32 = 2;

/// `struct ibv_gid_entry` (from `ibv_query_gid_ex`, rdma-core 32+).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ibv_gid_entry {
    pub gid: ibv_gid,
    pub gid_index: u32,
    pub port_num: u32,
    /// `IBV_GID_TYPE_*`.
    pub gid_type: u32,
    /// The netdev's ifindex (RoCE).
    pub ndev_ifindex: u32,
}

zeroable!(
    ibv_context,
    ibv_context_ops,
    ibv_device_attr,
    ibv_port_attr,
    ibv_cq,
    ibv_qp,
    ibv_qp_init_attr,
    ibv_qp_attr,
    ibv_send_wr,
    ibv_recv_wr,
    ibv_wc,
    ibv_gid_entry,
    ibv_async_event,
);

impl fmt::Debug for ibv_context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ibv_context")
            .field("device", &self.device)
            .field("cmd_fd", &self.cmd_fd)
            .field("async_fd", &self.async_fd)
            .field("num_comp_vectors", &self.num_comp_vectors)
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for ibv_cq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ibv_cq")
            .field("context", &self.context)
            .field("handle", &self.handle)
            .field("cqe", &self.cqe)
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for ibv_qp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ibv_qp")
            .field("context", &self.context)
            .field("qp_num", &self.qp_num)
            .field("state", &self.state)
            .field("qp_type", &self.qp_type)
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for ibv_send_wr_wr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // SAFETY: `rdma` is two integers; any bit pattern is valid for it.
        let rdma = unsafe { self.rdma };
        f.debug_struct("ibv_send_wr_wr")
            .field("rdma", &rdma)
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for ibv_send_wr_bind_mw_or_tso {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ibv_send_wr_bind_mw_or_tso { .. }")
    }
}

impl fmt::Debug for ibv_async_event_element {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ibv_async_event_element { .. }")
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn a_gid_reads_back_its_bytes_and_prints_as_ipv6_groups() {
        // ::ffff:10.1.2.3, the RoCE v2 GID of an IPv4 address.
        let raw = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 1, 2, 3];
        let gid = ibv_gid::from_bytes(raw);
        assert_eq!(gid.bytes(), raw);
        // SAFETY: both members are plain integers over the same 16 bytes.
        let global = unsafe { gid.global };
        assert_eq!(u64::from_be(global.subnet_prefix), 0);
        assert_eq!(u64::from_be(global.interface_id), 0x0000_ffff_0a01_0203);
        assert_eq!(
            format!("{gid:?}"),
            "ibv_gid(0000:0000:0000:0000:0000:ffff:0a01:0203)"
        );
        assert_ne!(gid, ibv_gid::from_bytes([0; 16]));
    }

    #[test]
    fn zeroed_work_requests_have_null_pointers_and_zero_fields() {
        let wr = ibv_send_wr::zeroed();
        // SAFETY: `rdma` is two integers; any bit pattern is valid for it.
        let rdma = unsafe { wr.wr.rdma };
        assert_eq!(rdma, ibv_send_wr_rdma::default());
        assert_eq!(
            (wr.wr_id, wr.num_sge, wr.send_flags, wr.imm_data),
            (0, 0, 0, 0)
        );
        assert_eq!(wr.opcode, ibv_wr_opcode::IBV_WR_RDMA_WRITE);
        assert!(wr.sg_list.is_null());
        assert!(wr.next.is_null());
        assert_eq!(ibv_qp_attr::zeroed().qp_state, ibv_qp_state::IBV_QPS_RESET);
    }
}
