//! The GPUDirect flush (NCCL's `gpuFlush`): after a receive into GPU memory completes, the
//! NIC's writes may still sit in PCIe buffers on their way to the GPU, so the CPU's "done"
//! does not yet mean the GPU sees the data. An RDMA READ of the received buffer, issued by
//! the same NIC, cannot complete before those earlier writes landed (PCIe ordering: a read
//! pushes the posted writes ahead of it), so its completion is the flush.
//!
//! The read needs a queue pair: a loopback RC QP per receive comm, connected to itself
//! (its own QPN, GID and LID as the "peer"), reading into a small host buffer. It has a CQ of
//! its own so that flush completions never compete with the data path's CQ for room.
//! Reads on one QP complete in order, so a flush is a ticket: done once that many reads
//! completed.

use std::sync::Arc;

use weft_sys::verbs::types::*;

use super::comm::{DmaBuf, wr_id};
use super::device::Port;
use super::qp::{PathConfig, Qp, RemoteQp, Rts};
use super::verbs::Cq;
use crate::{NetError, NetErrorKind};

/// Work-request kind of a flush read (next to `comm::KIND_*`).
pub(crate) const KIND_FLUSH: u64 = 4;
/// The most flushes in flight per receive comm (one per request slot, twice over).
pub(crate) const MAX_FLUSHES: u32 = 2 * super::fifo::SLOTS as u32;
/// How many trailing bytes of the received data a flush reads (NCCL reads one; a few more
/// cost nothing and let a test compare them with what arrived).
pub(crate) const FLUSH_BYTES: usize = 8;

/// One receive comm's loopback QP, its CQ and the host bytes its reads land in.
pub(crate) struct FlushQp {
    qp: Qp<Rts>,
    cq: Arc<Cq>,
    host: DmaBuf<u8>,
    /// Reads posted and completed so far (wrapping counters: tickets).
    posted: u32,
    done: u32,
}

impl FlushQp {
    /// Creates the QP and connects it to itself over `port` with `path`'s timers.
    pub fn new(port: &Arc<Port>, path: &PathConfig) -> Result<Self, NetError> {
        let cq = Arc::new(Cq::new(port.pd.ctx.clone(), MAX_FLUSHES)?);
        let qp = Qp::create(port.pd.clone(), cq.clone(), MAX_FLUSHES, 1, 0)?;
        let psn = (super::handshake::random_u64() as u32) & 0x00ff_ffff;
        let me = RemoteQp {
            qpn: qp.qpn(),
            psn,
            gid: port.gid,
            lid: port.lid,
        };
        let what = |e: NetError| {
            NetError::new(
                e.kind(),
                format!(
                    "connecting the GPUDirect flush QP of {} to itself failed",
                    port.describe()
                ),
            )
            .cause(e)
            .hint(
                "the flush needs a loopback RC connection on the device; \
                 NCCL_GDR_FLUSH_DISABLE=1 turns the flush off (only safe where the GPU sees \
                 NIC writes in order, e.g. with a data-direct NIC)",
            )
        };
        let qp = qp
            .init(path)
            .and_then(|q| q.ready_to_receive(path, &me))
            .and_then(|q| q.ready_to_send(path, psn))
            .map_err(what)?;
        let host = DmaBuf::<u8>::new(port, FLUSH_BYTES, IBV_ACCESS_LOCAL_WRITE)?;
        Ok(FlushQp {
            qp,
            cq,
            host,
            posted: 0,
            done: 0,
        })
    }

    /// Posts a signaled RDMA READ of `len` (1..=[`FLUSH_BYTES`]) bytes at `addr` (the end of
    /// a received buffer, registered with `rkey`); returns its ticket.
    pub fn post(&mut self, addr: u64, len: usize, rkey: u32) -> Result<u32, NetError> {
        if self.posted.wrapping_sub(self.done) >= MAX_FLUSHES {
            return Err(NetError::new(
                NetErrorKind::InvalidArgument,
                format!(
                    "iflush: {MAX_FLUSHES} flushes already in flight on this receive comm; \
                     test the earlier ones first"
                ),
            ));
        }
        let len = len.clamp(1, FLUSH_BYTES);
        let ticket = self.posted.wrapping_add(1);
        let mut sge = ibv_sge {
            addr: self.host.addr(0),
            length: len as u32,
            lkey: self.host.mr.lkey,
        };
        let mut wr = ibv_send_wr::zeroed();
        wr.wr_id = wr_id(KIND_FLUSH, ticket);
        wr.opcode = ibv_wr_opcode::IBV_WR_RDMA_READ;
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.wr.rdma = ibv_send_wr_rdma {
            remote_addr: addr,
            rkey,
        };
        // SAFETY: the host buffer is ours, registered for local writes, and lives as long
        // as this QP; the source is a receive buffer whose registration the caller holds
        // until the flush completes (iflush's contract).
        unsafe { self.qp.post_send(&mut wr) }?;
        self.posted = ticket;
        Ok(ticket)
    }

    /// Drains the flush CQ; a failed read is returned as its completion for the caller to
    /// put into words.
    pub fn poll(&mut self) -> Result<Option<ibv_wc>, NetError> {
        let mut wcs = [ibv_wc::zeroed(); 8];
        loop {
            let n = self.cq.poll(&mut wcs)?;
            for wc in &wcs[..n] {
                if wc.status != ibv_wc_status::IBV_WC_SUCCESS {
                    return Ok(Some(*wc));
                }
                if wc.wr_id >> 32 == KIND_FLUSH {
                    self.done = wc.wr_id as u32;
                }
            }
            if n < wcs.len() {
                return Ok(None);
            }
        }
    }

    /// Whether the read with `ticket` completed (tickets wrap; at most
    /// [`MAX_FLUSHES`] are in flight, so the difference decides).
    pub fn is_done(&self, ticket: u32) -> bool {
        ticket_done(self.done, ticket)
    }

    /// The bytes the last completed read fetched (`len` of them), for tests.
    pub fn last_read(&self, len: usize) -> Vec<u8> {
        (0..len.min(FLUSH_BYTES))
            .map(|i| self.host.read(i))
            .collect()
    }
}

/// Whether `ticket` is done once the reads up to `done` completed, across the wrap.
fn ticket_done(done: u32, ticket: u32) -> bool {
    done.wrapping_sub(ticket) < u32::MAX / 2
}

#[cfg(test)]
mod tests {
    use super::ticket_done;

    #[test]
    fn tickets_compare_across_the_wrap() {
        assert!(ticket_done(5, 5) && ticket_done(6, 5) && !ticket_done(4, 5));
        assert!(ticket_done(1, u32::MAX) && !ticket_done(u32::MAX, 1));
        assert!(!ticket_done(0, 1), "nothing completed yet");
    }
}
