//! Reliable-connected queue pairs whose state is a type: [`Qp<Reset>`] is what
//! `Qp::create` gives, and only `Reset -> Init -> Rtr -> Rts` can be written, each step
//! consuming the previous state; only [`Qp<Rts>`] can post. A failed step destroys the QP and
//! says which transition failed with which attributes.
//!
//! ```compile_fail
//! # use weft_net::ib::qp::{Qp, Reset, PathConfig, RemoteQp};
//! fn skip(qp: Qp<Reset>, path: &PathConfig, remote: &RemoteQp) {
//!     let _ = qp.ready_to_receive(path, remote); // RESET -> RTR does not exist
//! }
//! ```

use std::marker::PhantomData;
use std::sync::Arc;

use weft_sys::verbs::types::*;

use super::verbs::{Cq, Pd, errno_error, last_errno};
use crate::{NetError, NetErrorKind};

/// Just created: nothing can be posted.
#[derive(Debug)]
pub struct Reset;
/// Bound to a port with access rights: receives could be posted, nothing flows.
#[derive(Debug)]
pub struct Init;
/// Ready to receive: knows its peer QP.
#[derive(Debug)]
pub struct Rtr;
/// Ready to send.
#[derive(Debug)]
pub struct Rts;

/// How this side reaches its peer: port, GID index, MTU and the RC timers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathConfig {
    /// The local port (1-based).
    pub port: u8,
    /// The local GID index (`NCCL_IB_GID_INDEX`).
    pub gid_index: u8,
    /// The path MTU (`ibv_mtu` value, 1 = 256 ... 5 = 4096).
    pub mtu: u32,
    /// Local ACK timeout exponent: 4.096 us * 2^timeout per try (`NCCL_IB_TIMEOUT`).
    pub timeout: u8,
    /// Transport retries before `IBV_WC_RETRY_EXC_ERR` (`NCCL_IB_RETRY_CNT`, at most 7).
    pub retry_cnt: u8,
    /// IP traffic class / DSCP (`NCCL_IB_TC`).
    pub traffic_class: u8,
    /// Service level (`NCCL_IB_SL`).
    pub service_level: u8,
}

/// What the peer sent about its QP in the handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteQp {
    /// QP number.
    pub qpn: u32,
    /// Its first packet sequence number.
    pub psn: u32,
    /// Its GID (RoCE) ...
    pub gid: [u8; 16],
    /// ... or LID (InfiniBand).
    pub lid: u16,
}

struct Raw {
    pd: Arc<Pd>,
    // Keeps the CQ alive as long as the QP that reports to it.
    _cq: Arc<Cq>,
    qp: *mut ibv_qp,
    qpn: u32,
}

impl Drop for Raw {
    fn drop(&mut self) {
        // SAFETY: the QP is ours; its CQ and PD are kept alive by the Arcs above.
        let rc = unsafe { (self.pd.ctx.verbs.ibv_destroy_qp)(self.qp) };
        if rc != 0 {
            log::warn!(
                "ibv_destroy_qp({} QP {}) failed: {}",
                self.pd.ctx.name,
                self.qpn,
                errno_error(rc)
            );
        }
    }
}

/// An RC queue pair in state `S`.
pub struct Qp<S> {
    raw: Raw,
    caps: ibv_qp_cap,
    _state: PhantomData<S>,
}

// SAFETY: verbs are thread safe; the QP pointer is owned by this value.
unsafe impl<S> Send for Qp<S> {}
// SAFETY: `&Qp<Rts>` only posts, which rdma-core's providers lock per queue.
unsafe impl<S> Sync for Qp<S> {}

impl<S> std::fmt::Debug for Qp<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Qp<{}>({} QP {})",
            std::any::type_name::<S>()
                .rsplit("::")
                .next()
                .unwrap_or("?"),
            self.raw.pd.ctx.name,
            self.raw.qpn
        )
    }
}

impl<S> Qp<S> {
    /// The QP number the peer needs.
    pub fn qpn(&self) -> u32 {
        self.raw.qpn
    }
    /// The capacities the provider granted (max inline data among them).
    pub fn caps(&self) -> ibv_qp_cap {
        self.caps
    }

    fn modify<T>(self, attr: &mut ibv_qp_attr, mask: i32, step: &str) -> Result<Qp<T>, NetError> {
        // SAFETY: a live QP and attributes valid for `mask`.
        let rc = unsafe { (self.raw.pd.ctx.verbs.ibv_modify_qp)(self.raw.qp, attr, mask) };
        if rc != 0 {
            return Err(NetError::new(
                NetErrorKind::Io(std::io::ErrorKind::Other),
                format!(
                    "ibv_modify_qp({} QP {}) {step} failed",
                    self.raw.pd.ctx.name, self.raw.qpn
                ),
            )
            .cause(errno_error(rc))
            .hint(
                "EINVAL here usually means a GID index without a GID, or GIDs of different \
                 address families at the two ends (NCCL_IB_GID_INDEX / NCCL_IB_ADDR_FAMILY must \
                 pick the same family on both), an MTU above the port's, or a port that is not \
                 ACTIVE",
            ));
        }
        Ok(Qp {
            raw: self.raw,
            caps: self.caps,
            _state: PhantomData,
        })
    }
}

impl Qp<Reset> {
    /// Creates an RC QP on `pd` reporting to `cq`, with room for `send_wr` sends and
    /// `recv_wr` receives, and asks for `max_inline` bytes of inline data.
    pub(crate) fn create(
        pd: Arc<Pd>,
        cq: Arc<Cq>,
        send_wr: u32,
        recv_wr: u32,
        max_inline: u32,
    ) -> Result<Self, NetError> {
        let mut init = ibv_qp_init_attr {
            qp_context: std::ptr::null_mut(),
            send_cq: cq.raw,
            recv_cq: cq.raw,
            srq: std::ptr::null_mut(),
            cap: ibv_qp_cap {
                max_send_wr: send_wr,
                max_recv_wr: recv_wr,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: max_inline,
            },
            qp_type: ibv_qp_type::IBV_QPT_RC,
            // Selective signalling: only the requests that ask for a completion get one.
            sq_sig_all: 0,
        };
        // SAFETY: a live PD and CQ, and a filled attribute struct.
        let mut qp = unsafe { (pd.ctx.verbs.ibv_create_qp)(pd.raw, &mut init) };
        if qp.is_null() && max_inline > 0 {
            // Some providers refuse inline data or that much of it: go without.
            init.cap.max_inline_data = 0;
            // SAFETY: as above.
            qp = unsafe { (pd.ctx.verbs.ibv_create_qp)(pd.raw, &mut init) };
        }
        if qp.is_null() {
            return Err(NetError::new(
                NetErrorKind::Io(std::io::ErrorKind::Other),
                format!(
                    "ibv_create_qp({}, RC, {send_wr} send / {recv_wr} receive requests) failed",
                    pd.ctx.name
                ),
            )
            .cause(last_errno()));
        }
        // SAFETY: a fresh QP.
        let qpn = unsafe { (*qp).qp_num };
        Ok(Qp {
            raw: Raw {
                pd,
                _cq: cq,
                qp,
                qpn,
            },
            // ibv_create_qp writes the granted capacities back into `init.cap`.
            caps: init.cap,
            _state: PhantomData,
        })
    }

    /// RESET -> INIT: binds the port and allows remote writes (the peer writes data and
    /// FIFO entries into this side's memory).
    pub fn init(self, path: &PathConfig) -> Result<Qp<Init>, NetError> {
        let mut attr = ibv_qp_attr::zeroed();
        attr.qp_state = ibv_qp_state::IBV_QPS_INIT;
        attr.pkey_index = 0;
        attr.port_num = path.port;
        attr.qp_access_flags =
            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
        let mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
        self.modify(&mut attr, mask, "RESET -> INIT")
    }
}

impl Qp<Init> {
    /// INIT -> RTR: points the QP at the peer's QP over `path`.
    pub fn ready_to_receive(
        self,
        path: &PathConfig,
        remote: &RemoteQp,
    ) -> Result<Qp<Rtr>, NetError> {
        let mut attr = ibv_qp_attr::zeroed();
        attr.qp_state = ibv_qp_state::IBV_QPS_RTR;
        attr.path_mtu = ibv_mtu(path.mtu);
        attr.dest_qp_num = remote.qpn;
        attr.rq_psn = remote.psn;
        attr.max_dest_rd_atomic = 1;
        attr.min_rnr_timer = 12;
        attr.ah_attr.is_global = 1;
        attr.ah_attr.grh.dgid = ibv_gid::from_bytes(remote.gid);
        attr.ah_attr.grh.sgid_index = path.gid_index;
        attr.ah_attr.grh.hop_limit = 255;
        attr.ah_attr.grh.traffic_class = path.traffic_class;
        attr.ah_attr.dlid = remote.lid;
        attr.ah_attr.sl = path.service_level;
        attr.ah_attr.port_num = path.port;
        let mask = IBV_QP_STATE
            | IBV_QP_AV
            | IBV_QP_PATH_MTU
            | IBV_QP_DEST_QPN
            | IBV_QP_RQ_PSN
            | IBV_QP_MAX_DEST_RD_ATOMIC
            | IBV_QP_MIN_RNR_TIMER;
        self.modify(&mut attr, mask, "INIT -> RTR")
    }
}

impl Qp<Rtr> {
    /// RTR -> RTS, starting at packet sequence number `psn` (the one sent to the peer).
    pub fn ready_to_send(self, path: &PathConfig, psn: u32) -> Result<Qp<Rts>, NetError> {
        let mut attr = ibv_qp_attr::zeroed();
        attr.qp_state = ibv_qp_state::IBV_QPS_RTS;
        attr.sq_psn = psn;
        attr.timeout = path.timeout;
        attr.retry_cnt = path.retry_cnt;
        // Receivers always have their receives posted before the sender can write (the FIFO
        // entry is written after them), so receiver-not-ready retries never wait long.
        attr.rnr_retry = 7;
        attr.max_rd_atomic = 1;
        let mask = IBV_QP_STATE
            | IBV_QP_TIMEOUT
            | IBV_QP_RETRY_CNT
            | IBV_QP_RNR_RETRY
            | IBV_QP_SQ_PSN
            | IBV_QP_MAX_QP_RD_ATOMIC;
        self.modify(&mut attr, mask, "RTR -> RTS")
    }
}

impl Qp<Rts> {
    /// Posts a chain of send work requests.
    ///
    /// # Safety
    /// Every SGE must name memory registered in this QP's PD (or be inline), which stays
    /// registered and unmodified until the request completes (or, unsignaled, until a later
    /// signaled request on this QP completes); remote addresses and keys must be the peer's.
    pub(crate) unsafe fn post_send(&self, wr: &mut ibv_send_wr) -> Result<(), NetError> {
        let mut bad: *mut ibv_send_wr = std::ptr::null_mut();
        // SAFETY: a live QP; the caller vouches for the chain.
        let rc = unsafe { weft_sys::verbs::ibv_post_send(self.raw.qp, wr, &mut bad) };
        if rc != 0 {
            return Err(NetError::new(
                NetErrorKind::Io(std::io::ErrorKind::Other),
                format!(
                    "ibv_post_send({} QP {}) failed",
                    self.raw.pd.ctx.name, self.raw.qpn
                ),
            )
            .cause(errno_error(rc))
            .hint(
                "ENOMEM means the send queue is full: a bug in weft's signalling, please report it",
            ));
        }
        Ok(())
    }

    /// Posts a chain of receive work requests.
    ///
    /// # Safety
    /// As for [`Qp::post_send`], for the receive buffers (none for write-with-immediate).
    pub(crate) unsafe fn post_recv(&self, wr: &mut ibv_recv_wr) -> Result<(), NetError> {
        let mut bad: *mut ibv_recv_wr = std::ptr::null_mut();
        // SAFETY: a live QP; the caller vouches for the chain.
        let rc = unsafe { weft_sys::verbs::ibv_post_recv(self.raw.qp, wr, &mut bad) };
        if rc != 0 {
            return Err(NetError::new(
                NetErrorKind::Io(std::io::ErrorKind::Other),
                format!(
                    "ibv_post_recv({} QP {}) failed",
                    self.raw.pd.ctx.name, self.raw.qpn
                ),
            )
            .cause(errno_error(rc)));
        }
        Ok(())
    }
}
