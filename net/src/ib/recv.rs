//! The receiving end of a verbs connection: `irecv` posts one receive per QP and writes its
//! buffers into the sender's FIFO; `test` completes once every QP's immediate arrived.

use std::sync::{Arc, Mutex};

use weft_sys::verbs::types::*;

use super::comm::{DmaBuf, FIFO_SIGNAL_EVERY, KIND_FIFO, KIND_RECV, Link, lock, poll_cq, wr_id};
use super::device::Port;
use super::fifo::{self, FifoEntry, ImmMeaning, MAX_RECVS, SLOTS};
use super::flush::{FLUSH_BYTES, FlushQp};
use crate::{Completion, NetError, NetErrorKind, RecvBuffer};

#[derive(Default)]
struct RecvSlot {
    seq: u32,
    active: bool,
    outstanding: usize,
    imm: Option<u32>,
    n: usize,
    caps: [usize; MAX_RECVS],
}

pub(crate) struct RecvState {
    link: Link,
    /// What this side writes into the sender's FIFO (the source of those writes).
    staging: DmaBuf<FifoEntry>,
    /// Where the sender writes grouped sizes.
    sizes: DmaBuf<u32>,
    remote_fifo: (u64, u32),
    seq: u32,
    fifo_writes: u32,
    slots: Vec<RecvSlot>,
    closed: bool,
    /// The loopback QP of the GPUDirect flush, where the device flushes (`ib::flush`).
    flush: Option<FlushQp>,
}

/// The receiving end of a verbs connection.
pub struct IbRecvComm(pub(crate) Arc<Mutex<RecvState>>);

impl std::fmt::Debug for IbRecvComm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = lock(&self.0);
        write!(
            f,
            "IbRecvComm({} <- {})",
            s.link.port.describe(),
            s.link.peer
        )
    }
}

impl RecvState {
    pub fn new(
        link: Link,
        staging: DmaBuf<FifoEntry>,
        sizes: DmaBuf<u32>,
        remote_fifo: (u64, u32),
        flush: Option<FlushQp>,
    ) -> Self {
        RecvState {
            link,
            staging,
            sizes,
            remote_fifo,
            seq: 1,
            fifo_writes: 0,
            slots: (0..SLOTS).map(|_| RecvSlot::default()).collect(),
            closed: false,
            flush,
        }
    }

    fn progress(&mut self) -> Result<(), NetError> {
        self.link.check()?;
        let slots = &mut self.slots;
        poll_cq(&mut self.link, |wc| {
            if wc.wr_id >> 32 == KIND_RECV {
                let seq = wc.wr_id as u32;
                let slot = &mut slots[fifo::slot_of(seq)];
                if slot.seq == seq && slot.outstanding > 0 {
                    slot.outstanding -= 1;
                    if wc.wc_flags & IBV_WC_WITH_IMM != 0 {
                        let imm = u32::from_be(wc.imm_data);
                        // A refusal (only ever on QP 0) wins over the other QPs' sizes.
                        if !matches!(
                            slot.imm.map(fifo::decode_imm),
                            Some(ImmMeaning::RefusedTag | ImmMeaning::RefusedSize)
                        ) {
                            slot.imm = Some(imm);
                        }
                        // The other QPs carry nothing for a refused request.
                        if matches!(
                            fifo::decode_imm(imm),
                            ImmMeaning::RefusedTag | ImmMeaning::RefusedSize
                        ) {
                            slot.outstanding = 0;
                        }
                    }
                }
            }
        })
    }

    /// `irecv`: posts one receive per QP, then writes the entries into the sender's FIFO.
    pub fn irecv(&mut self, bufs: &[(u64, usize, u32, u32)]) -> Result<Option<u32>, NetError> {
        if self.closed {
            return Err(NetError::new(
                NetErrorKind::Closed,
                "irecv on a closed verbs receive comm",
            ));
        }
        self.progress()?;
        let n = bufs.len();
        if n == 0 || n > MAX_RECVS {
            return Err(NetError::new(
                NetErrorKind::InvalidArgument,
                format!("irecv of {n} buffers (1..={MAX_RECVS})"),
            ));
        }
        let seq = self.seq;
        let index = fifo::slot_of(seq);
        if self.slots[index].active {
            return Ok(None);
        }
        let mut caps = [0usize; MAX_RECVS];
        for (i, &(addr, size, tag, rkey)) in bufs.iter().enumerate() {
            let size = size.min(fifo::MAX_MESSAGE);
            caps[i] = size;
            self.staging.write(
                index * MAX_RECVS + i,
                FifoEntry {
                    addr,
                    sizes_addr: self.sizes.addr(index * MAX_RECVS),
                    rkey,
                    sizes_rkey: self.sizes.mr.rkey,
                    size: size as u32,
                    tag,
                    nreqs: n as u32,
                    seq,
                },
            );
        }
        for qp in &self.link.qps {
            let mut wr = ibv_recv_wr::zeroed();
            wr.wr_id = wr_id(KIND_RECV, seq);
            // SAFETY: no scatter list: a write-with-immediate consumes it without data.
            if let Err(e) = unsafe { qp.post_recv(&mut wr) } {
                return Err(self.link.fail(e));
            }
        }
        let len = (n * size_of::<FifoEntry>()) as u32;
        let mut sge = ibv_sge {
            addr: self.staging.addr(index * MAX_RECVS),
            length: len,
            lkey: self.staging.mr.lkey,
        };
        let mut wr = ibv_send_wr::zeroed();
        wr.wr_id = wr_id(KIND_FIFO, seq);
        wr.opcode = ibv_wr_opcode::IBV_WR_RDMA_WRITE;
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        wr.wr.rdma = ibv_send_wr_rdma {
            remote_addr: self.remote_fifo.0 + (index * fifo::SLOT_BYTES) as u64,
            rkey: self.remote_fifo.1,
        };
        if len <= self.link.max_inline {
            wr.send_flags |= IBV_SEND_INLINE;
        }
        self.fifo_writes = self.fifo_writes.wrapping_add(1);
        if self.fifo_writes.is_multiple_of(FIFO_SIGNAL_EVERY) {
            wr.send_flags |= IBV_SEND_SIGNALED;
        }
        let Some(qp) = self.link.qps.first() else {
            return Err(self
                .link
                .check()
                .err()
                .unwrap_or_else(|| NetError::new(NetErrorKind::Closed, "no QP")));
        };
        // SAFETY: the staging slot is ours and is not rewritten before this request
        // completes (which needs the sender to have read it); the remote FIFO is the
        // sender's, registered for remote writes.
        if let Err(e) = unsafe { qp.post_send(&mut wr) } {
            return Err(self.link.fail(e));
        }
        self.slots[index] = RecvSlot {
            seq,
            active: true,
            outstanding: self.link.qps.len(),
            imm: None,
            n,
            caps,
        };
        self.seq = self.seq.wrapping_add(1).max(1);
        Ok(Some(seq))
    }

    /// `test` of a receive request.
    pub fn test(&mut self, seq: u32) -> Result<Option<Completion>, NetError> {
        if self.closed {
            return Err(NetError::new(
                NetErrorKind::Closed,
                "test of a receive on a closed verbs comm",
            ));
        }
        self.progress()?;
        let index = fifo::slot_of(seq);
        let slot = &self.slots[index];
        if slot.seq != seq || !slot.active {
            return Err(NetError::new(
                NetErrorKind::InvalidArgument,
                format!("test of receive request {seq} that already completed"),
            ));
        }
        if slot.outstanding > 0 {
            self.link.check_peer()?;
            return Ok(None);
        }
        let n = slot.n;
        let mut sizes = [0usize; MAX_RECVS];
        let refused = match slot.imm.map(fifo::decode_imm) {
            Some(ImmMeaning::RefusedTag) => {
                let tag = self.sizes.read(index * MAX_RECVS);
                let tags: Vec<u32> = (0..n)
                    .map(|i| self.staging.read(index * MAX_RECVS + i).tag)
                    .collect();
                Some(NetError::new(
                    NetErrorKind::TagMismatch { tag },
                    format!(
                        "the sender's message has tag {tag}, not one of this receive's tags {tags:?} (request {seq})"
                    ),
                ))
            }
            Some(ImmMeaning::RefusedSize) => {
                let size = self.sizes.read(index * MAX_RECVS) as usize;
                let cap = slot.caps[..n].iter().copied().max().unwrap_or(0);
                Some(NetError::new(
                    NetErrorKind::Truncated {
                        send_size: size,
                        recv_size: cap,
                    },
                    format!(
                        "the sender's message of {size} bytes does not fit this receive's buffers of {:?} bytes (request {seq})",
                        &slot.caps[..n]
                    ),
                ))
            }
            Some(_) => None,
            None => Some(NetError::new(
                NetErrorKind::Protocol,
                format!("receive request {seq} completed without an immediate"),
            )),
        };
        if let Some(e) = refused {
            return Err(self.link.fail(e.peer(self.link.peer)));
        }
        match fifo::decode_imm(slot.imm.unwrap_or(0)) {
            ImmMeaning::RefusedTag | ImmMeaning::RefusedSize => {}
            ImmMeaning::Size(s) => sizes[0] = s,
            ImmMeaning::SizesInRecord => {
                std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
                for (i, size) in sizes.iter_mut().enumerate().take(n) {
                    *size = self.sizes.read(index * MAX_RECVS + i) as usize;
                }
            }
        }
        if let Some(i) = (0..n).find(|&i| sizes[i] > slot.caps[i]) {
            let e = NetError::new(
                NetErrorKind::Truncated {
                    send_size: sizes[i],
                    recv_size: slot.caps[i],
                },
                format!(
                    "the sender wrote {} bytes into a {}-byte receive buffer",
                    sizes[i], slot.caps[i]
                ),
            );
            return Err(self.link.fail(e.peer(self.link.peer)));
        }
        self.slots[index].active = false;
        Ok(Some(Completion::new(&sizes[..n])))
    }

    /// `iflush`: one signaled RDMA READ of the last bytes of the last non-empty buffer that
    /// needs flushing (`(address, received size, rkey, flushes)` per buffer), as NCCL reads
    /// only its last receive: the reads of one QP complete in order, and the data writes of
    /// all buffers arrived before `test` said the receive was done. `Ok(None)`: nothing to
    /// flush (no GPU memory, the flush off, or no data).
    pub fn iflush(&mut self, bufs: &[(u64, usize, u32, bool)]) -> Result<Option<u32>, NetError> {
        if self.closed {
            return Err(NetError::new(
                NetErrorKind::Closed,
                "iflush on a closed verbs receive comm",
            ));
        }
        self.link.check()?;
        let Some(&(addr, size, rkey, _)) = bufs.iter().rev().find(|b| b.3 && b.1 > 0) else {
            return Ok(None);
        };
        let Some(flush) = self.flush.as_mut() else {
            return Ok(None);
        };
        let len = size.min(FLUSH_BYTES);
        match flush.post(addr + (size - len) as u64, len, rkey) {
            Ok(ticket) => Ok(Some(ticket)),
            Err(e) => Err(self.fail_flush(e)),
        }
    }

    /// `test` of a flush request.
    pub fn test_flush(&mut self, ticket: u32) -> Result<Option<Completion>, NetError> {
        if self.closed {
            return Err(NetError::new(
                NetErrorKind::Closed,
                "test of a flush on a closed verbs comm",
            ));
        }
        self.link.check()?;
        let Some(flush) = self.flush.as_mut() else {
            return Err(NetError::new(
                NetErrorKind::InvalidArgument,
                format!("test of flush {ticket} on a comm without a flush QP"),
            ));
        };
        match flush.poll() {
            Ok(None) => {}
            Ok(Some(wc)) => {
                // The loopback QP is its own responder: when the responder refuses the read
                // (a range outside the buffer's registration, or a registration already
                // released), the QP goes to the error state and the requester sees its read
                // flushed, so a flush error reads as that refusal.
                let what = if wc.status == ibv_wc_status::IBV_WC_WR_FLUSH_ERR
                    || wc.status == ibv_wc_status::IBV_WC_REM_ACCESS_ERR
                {
                    "RDMA read of the GPUDirect flush (loopback QP on this device; its \
                     responder side refused the read: is the flushed range inside the receive \
                     buffer's registration, and still registered?)"
                } else {
                    "RDMA read of the GPUDirect flush (loopback QP on this device)"
                };
                let e = self.link.wc_error_with(
                    &wc,
                    what,
                    format!("this device itself (loopback flush QP, ticket {ticket})"),
                );
                return Err(self.fail_flush(e));
            }
            Err(e) => return Err(self.fail_flush(e)),
        }
        if self.flush.as_ref().is_some_and(|f| f.is_done(ticket)) {
            return Ok(Some(Completion::new(&[])));
        }
        // No peer check: the read is local (loopback), the peer may be gone once its data
        // arrived, and a read that never completes ends in the QP's own retry timeout.
        Ok(None)
    }

    /// The last `len` bytes the flush read (tests compare them with the received data).
    pub fn last_flush_read(&self, len: usize) -> Option<Vec<u8>> {
        self.flush.as_ref().map(|f| f.last_read(len))
    }

    /// A flush failure fails the whole comm: the loopback QP is in error and no later
    /// receive of this comm could be flushed.
    fn fail_flush(&mut self, e: NetError) -> NetError {
        self.flush = None;
        self.link.fail(e)
    }

    pub fn close(&mut self) {
        self.closed = true;
        self.flush = None;
        self.link.close();
    }
}

/// A receive buffer as the FIFO entry needs it: (address, capacity, tag, rkey).
pub(crate) fn entry_of(b: &RecvBuffer<'_, super::IbMemHandle>) -> (u64, usize, u32, u32) {
    (b.data as u64, b.size, b.tag, b.mr.mr.rkey)
}

/// The port a receive comm runs on.
pub(crate) fn port_of_recv(c: &IbRecvComm) -> Arc<Port> {
    lock(&c.0).link.port.clone()
}

/// The connector's handshake address, for messages.
pub(crate) fn peer_of_recv(c: &IbRecvComm) -> std::net::SocketAddr {
    lock(&c.0).link.peer
}
