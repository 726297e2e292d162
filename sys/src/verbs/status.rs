//! What a failed work completion means and what to try: rdma-core's own words (so a user
//! can search for them) plus the usual causes in a collective library.

use core::fmt;

use super::types::ibv_wc_status;

impl ibv_wc_status {
    /// The C name, e.g. `IBV_WC_RETRY_EXC_ERR`; `None` for values newer than this table.
    pub fn name(self) -> Option<&'static str> {
        Some(match self {
            Self::IBV_WC_SUCCESS => "IBV_WC_SUCCESS",
            Self::IBV_WC_LOC_LEN_ERR => "IBV_WC_LOC_LEN_ERR",
            Self::IBV_WC_LOC_QP_OP_ERR => "IBV_WC_LOC_QP_OP_ERR",
            Self::IBV_WC_LOC_EEC_OP_ERR => "IBV_WC_LOC_EEC_OP_ERR",
            Self::IBV_WC_LOC_PROT_ERR => "IBV_WC_LOC_PROT_ERR",
            Self::IBV_WC_WR_FLUSH_ERR => "IBV_WC_WR_FLUSH_ERR",
            Self::IBV_WC_MW_BIND_ERR => "IBV_WC_MW_BIND_ERR",
            Self::IBV_WC_BAD_RESP_ERR => "IBV_WC_BAD_RESP_ERR",
            Self::IBV_WC_LOC_ACCESS_ERR => "IBV_WC_LOC_ACCESS_ERR",
            Self::IBV_WC_REM_INV_REQ_ERR => "IBV_WC_REM_INV_REQ_ERR",
            Self::IBV_WC_REM_ACCESS_ERR => "IBV_WC_REM_ACCESS_ERR",
            Self::IBV_WC_REM_OP_ERR => "IBV_WC_REM_OP_ERR",
            Self::IBV_WC_RETRY_EXC_ERR => "IBV_WC_RETRY_EXC_ERR",
            Self::IBV_WC_RNR_RETRY_EXC_ERR => "IBV_WC_RNR_RETRY_EXC_ERR",
            Self::IBV_WC_LOC_RDD_VIOL_ERR => "IBV_WC_LOC_RDD_VIOL_ERR",
            Self::IBV_WC_REM_INV_RD_REQ_ERR => "IBV_WC_REM_INV_RD_REQ_ERR",
            Self::IBV_WC_REM_ABORT_ERR => "IBV_WC_REM_ABORT_ERR",
            Self::IBV_WC_INV_EECN_ERR => "IBV_WC_INV_EECN_ERR",
            Self::IBV_WC_INV_EEC_STATE_ERR => "IBV_WC_INV_EEC_STATE_ERR",
            Self::IBV_WC_FATAL_ERR => "IBV_WC_FATAL_ERR",
            Self::IBV_WC_RESP_TIMEOUT_ERR => "IBV_WC_RESP_TIMEOUT_ERR",
            Self::IBV_WC_GENERAL_ERR => "IBV_WC_GENERAL_ERR",
            Self::IBV_WC_TM_ERR => "IBV_WC_TM_ERR",
            Self::IBV_WC_TM_RNDV_INCOMPLETE => "IBV_WC_TM_RNDV_INCOMPLETE",
            _ => return None,
        })
    }

    /// The text `ibv_wc_status_str` returns for this status, without needing the library.
    pub fn summary(self) -> &'static str {
        match self {
            Self::IBV_WC_SUCCESS => "success",
            Self::IBV_WC_LOC_LEN_ERR => "local length error",
            Self::IBV_WC_LOC_QP_OP_ERR => "local QP operation error",
            Self::IBV_WC_LOC_EEC_OP_ERR => "local EE context operation error",
            Self::IBV_WC_LOC_PROT_ERR => "local protection error",
            Self::IBV_WC_WR_FLUSH_ERR => "Work Request Flushed Error",
            Self::IBV_WC_MW_BIND_ERR => "memory management operation error",
            Self::IBV_WC_BAD_RESP_ERR => "bad response error",
            Self::IBV_WC_LOC_ACCESS_ERR => "local access error",
            Self::IBV_WC_REM_INV_REQ_ERR => "remote invalid request error",
            Self::IBV_WC_REM_ACCESS_ERR => "remote access error",
            Self::IBV_WC_REM_OP_ERR => "remote operation error",
            Self::IBV_WC_RETRY_EXC_ERR => "transport retry counter exceeded",
            Self::IBV_WC_RNR_RETRY_EXC_ERR => "RNR retry counter exceeded",
            Self::IBV_WC_LOC_RDD_VIOL_ERR => "local RDD violation error",
            Self::IBV_WC_REM_INV_RD_REQ_ERR => "remote invalid RD request",
            Self::IBV_WC_REM_ABORT_ERR => "aborted error",
            Self::IBV_WC_INV_EECN_ERR => "invalid EE context number",
            Self::IBV_WC_INV_EEC_STATE_ERR => "invalid EE context state",
            Self::IBV_WC_FATAL_ERR => "fatal error",
            Self::IBV_WC_RESP_TIMEOUT_ERR => "response timeout error",
            Self::IBV_WC_GENERAL_ERR => "general error",
            Self::IBV_WC_TM_ERR => "TM error",
            Self::IBV_WC_TM_RNDV_INCOMPLETE => "TM software rendezvous",
            _ => "unknown",
        }
    }

    /// The usual causes of this failure and what to check, for the statuses that have
    /// them; `None` for success and the rare ones.
    pub fn hint(self) -> Option<&'static str> {
        Some(match self {
            Self::IBV_WC_RETRY_EXC_ERR | Self::IBV_WC_RESP_TIMEOUT_ERR => {
                "the peer never acknowledged: on RoCE this is usually a wrong GID index \
                 (NCCL_IB_GID_INDEX: pick the RoCE v2 GID of the address \
                 family both ends use) or a subnet the two ports cannot reach (check that the \
                 addresses of both NICs route to each other, and the switch's MTU and PFC); on \
                 InfiniBand a wrong LID or service level; otherwise the peer process died or \
                 its QP went to the error state"
            }
            Self::IBV_WC_RNR_RETRY_EXC_ERR => {
                "the peer had no receive posted in time: post receives before the sender can \
                 send, or set rnr_retry to 7 (retry forever)"
            }
            Self::IBV_WC_WR_FLUSH_ERR => {
                "the QP was already in the error state: this completion is a consequence; look \
                 for the first failed completion on this QP"
            }
            Self::IBV_WC_LOC_LEN_ERR => {
                "a message was longer than the receive buffer posted for it: both ends must \
                 agree on buffer and slice sizes"
            }
            Self::IBV_WC_LOC_QP_OP_ERR => {
                "the work request does not fit this QP: too many SGEs, inline data above \
                 max_inline_data, or an opcode the QP type does not support"
            }
            Self::IBV_WC_LOC_PROT_ERR | Self::IBV_WC_LOC_ACCESS_ERR => {
                "a local buffer is not covered by its lkey: register it with this QP's \
                 protection domain, with IBV_ACCESS_LOCAL_WRITE for receive and read targets, \
                 and keep the region registered until the completion"
            }
            Self::IBV_WC_REM_ACCESS_ERR => {
                "the peer refused the remote address or rkey: check the address and rkey \
                 exchanged in the handshake, that the peer registered the region with \
                 IBV_ACCESS_REMOTE_WRITE (or _READ), and that it has not deregistered it"
            }
            Self::IBV_WC_REM_INV_REQ_ERR => {
                "the peer's QP rejected the request: a message longer than its receive \
                 buffer, or an operation its QP access flags do not allow"
            }
            Self::IBV_WC_REM_OP_ERR => {
                "the peer could not complete the operation: its QP went to the error state or \
                 its receive buffer was not registered"
            }
            Self::IBV_WC_FATAL_ERR | Self::IBV_WC_GENERAL_ERR => {
                "the NIC reported an internal failure: check the kernel log (dmesg) and the \
                 port state (ibstat / ibv_devinfo); with GPU buffers, check that GPUDirect \
                 RDMA (nvidia-peermem or dma-buf) works"
            }
            _ => return None,
        })
    }
}

/// `IBV_WC_RETRY_EXC_ERR (12): transport retry counter exceeded`, then the hint if any.
impl fmt::Display for ibv_wc_status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => write!(f, "{name} ({}): {}", self.0, self.summary())?,
            None => write!(f, "work completion status {}: unknown", self.0)?,
        }
        match self.hint() {
            Some(hint) => write!(f, "; {hint}"),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn every_status_up_to_the_last_has_a_name_and_summary() {
        for code in 0..=23 {
            let status = ibv_wc_status(code);
            let name = status.name().unwrap();
            assert!(name.starts_with("IBV_WC_"));
            assert_ne!(status.summary(), "unknown", "{name}");
        }
        assert_eq!(ibv_wc_status(24).name(), None);
        assert_eq!(ibv_wc_status(24).summary(), "unknown");
    }

    #[test]
    fn retry_exceeded_points_at_gid_index_and_subnets() {
        let text = ibv_wc_status::IBV_WC_RETRY_EXC_ERR.to_string();
        assert!(text.starts_with("IBV_WC_RETRY_EXC_ERR (12): transport retry counter exceeded; "));
        assert!(text.contains("GID index"), "{text}");
        assert!(text.contains("subnet"), "{text}");
        assert_eq!(
            ibv_wc_status::IBV_WC_SUCCESS.to_string(),
            "IBV_WC_SUCCESS (0): success"
        );
        assert_eq!(
            ibv_wc_status(77).to_string(),
            "work completion status 77: unknown"
        );
    }
}
