//! The sending end of a verbs connection: matches each `isend` against the receiver's FIFO
//! entries and, once a group is complete, writes every message straight into its buffer,
//! split over the QPs, the last write per QP carrying the immediate (see [`super::fifo`]).

use std::sync::{Arc, Mutex};

use weft_sys::verbs::types::*;

use super::comm::{DmaBuf, KIND_DATA, Link, lock, poll_cq, wr_id};
use super::device::Port;
use super::fifo::{self, FifoEntry, MAX_RECVS, SLOTS};
use crate::{Completion, NetError, NetErrorKind};

#[derive(Clone, Copy, Default)]
struct MatchedSend {
    data: u64,
    size: usize,
    lkey: u32,
}

#[derive(Default)]
struct SendSlot {
    seq: u32,
    /// Completions still expected (one per QP) once posted.
    outstanding: usize,
    posted: bool,
    nreqs: usize,
    taken: [bool; MAX_RECVS],
    sends: [MatchedSend; MAX_RECVS],
    /// Requests of this group not yet reported done.
    unreaped: usize,
}

pub(crate) struct SendState {
    link: Link,
    fifo: DmaBuf<FifoEntry>,
    sizes: DmaBuf<u32>,
    /// The group the next `isend` belongs to.
    seq: u32,
    slots: Vec<SendSlot>,
    closed: bool,
}

/// The sending end of a verbs connection.
pub struct IbSendComm(pub(crate) Arc<Mutex<SendState>>);

impl std::fmt::Debug for IbSendComm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = lock(&self.0);
        write!(
            f,
            "IbSendComm({} -> {})",
            s.link.port.describe(),
            s.link.peer
        )
    }
}

impl SendState {
    pub fn new(link: Link, fifo: DmaBuf<FifoEntry>, sizes: DmaBuf<u32>) -> Self {
        SendState {
            link,
            fifo,
            sizes,
            seq: 1,
            slots: (0..SLOTS).map(|_| SendSlot::default()).collect(),
            closed: false,
        }
    }

    fn progress(&mut self) -> Result<(), NetError> {
        self.link.check()?;
        let slots = &mut self.slots;
        poll_cq(&mut self.link, |wc| {
            if wc.wr_id >> 32 == KIND_DATA {
                let seq = wc.wr_id as u32;
                let slot = &mut slots[fifo::slot_of(seq)];
                if slot.seq == seq && slot.outstanding > 0 {
                    slot.outstanding -= 1;
                }
            }
        })
    }

    /// `isend`: matches against the receiver's FIFO entries; posts the group once complete.
    pub fn isend(
        &mut self,
        data: *const u8,
        size: usize,
        tag: u32,
        lkey: u32,
    ) -> Result<Option<(u32, usize)>, NetError> {
        if self.closed {
            return Err(NetError::new(
                NetErrorKind::Closed,
                "isend on a closed verbs send comm",
            ));
        }
        self.progress()?;
        if size > fifo::MAX_MESSAGE {
            return Err(NetError::new(
                NetErrorKind::InvalidArgument,
                format!(
                    "isend of {size} bytes: the verbs backend carries at most {} bytes per message",
                    fifo::MAX_MESSAGE
                ),
            ));
        }
        let seq = self.seq;
        let index = fifo::slot_of(seq);
        let base = index * MAX_RECVS;
        let first = self.fifo.read(base);
        if first.seq != seq {
            // The receiver has not posted this group yet.
            self.link.check_peer()?;
            return Ok(None);
        }
        std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        let slot = &mut self.slots[index];
        if slot.seq != seq {
            if slot.unreaped > 0 || slot.outstanding > 0 {
                // The group 32 requests back still has requests the caller has not tested.
                return Ok(None);
            }
            let nreqs = first.nreqs as usize;
            if nreqs == 0 || nreqs > MAX_RECVS {
                let e = NetError::new(
                    NetErrorKind::Protocol,
                    format!("FIFO entry {seq} announces {nreqs} receives (1..={MAX_RECVS})"),
                );
                return Err(self.link.fail(e.peer(self.link.peer)));
            }
            *slot = SendSlot {
                seq,
                nreqs,
                ..SendSlot::default()
            };
        }
        let nreqs = slot.nreqs;
        let entries: Vec<FifoEntry> = (0..nreqs).map(|i| self.fifo.read(base + i)).collect();
        let Some(i) = fifo::match_tag(&entries, &slot.taken[..nreqs], tag) else {
            let tags: Vec<u32> = entries.iter().map(|e| e.tag).collect();
            let e = NetError::new(
                NetErrorKind::TagMismatch { tag },
                format!(
                    "send with tag {tag} does not match the receive group's tags {tags:?} (request {seq})"
                ),
            );
            self.refuse(index, &entries[0], fifo::IMM_REFUSED_TAG, tag);
            return Err(self.link.fail(e.peer(self.link.peer)));
        };
        if size > entries[i].size as usize {
            let e = NetError::new(
                NetErrorKind::Truncated {
                    send_size: size,
                    recv_size: entries[i].size as usize,
                },
                format!(
                    "send of {size} bytes into a receive buffer of {} bytes (tag {tag}, request {seq})",
                    entries[i].size
                ),
            );
            self.refuse(index, &entries[i], fifo::IMM_REFUSED_SIZE, size as u32);
            return Err(self.link.fail(e.peer(self.link.peer)));
        }
        slot.taken[i] = true;
        slot.sends[i] = MatchedSend {
            data: data as u64,
            size,
            lkey,
        };
        slot.unreaped += 1;
        if slot.taken[..nreqs].iter().all(|&t| t) {
            self.post_group(index, &entries)?;
            self.seq = self.seq.wrapping_add(1).max(1);
        }
        Ok(Some((seq, i)))
    }

    /// Tells the receiver why this request was refused: `word` (the tag or the message
    /// size) into its size record, then the refusal as an immediate, both on QP 0.
    fn refuse(&mut self, index: usize, entry: &FifoEntry, imm: u32, word: u32) {
        let Some(qp) = self.link.qps.first() else {
            return;
        };
        self.sizes.write(index * MAX_RECVS, word);
        let mut sge = ibv_sge {
            addr: self.sizes.addr(index * MAX_RECVS),
            length: 4,
            lkey: self.sizes.mr.lkey,
        };
        let mut last = ibv_send_wr::zeroed();
        last.opcode = ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM;
        last.imm_data = imm.to_be();
        last.send_flags = IBV_SEND_SIGNALED;
        last.wr_id = wr_id(KIND_DATA, 0);
        let mut first = ibv_send_wr::zeroed();
        first.opcode = ibv_wr_opcode::IBV_WR_RDMA_WRITE;
        first.sg_list = &mut sge;
        first.num_sge = 1;
        first.wr.rdma = ibv_send_wr_rdma {
            remote_addr: entry.sizes_addr,
            rkey: entry.sizes_rkey,
        };
        first.next = &mut last;
        // SAFETY: the size record is ours and stays registered; the zero-length write
        // reads nothing; the remote record is the receiver's, registered for writes.
        if let Err(e) = unsafe { qp.post_send(&mut first) } {
            log::warn!("telling the receiver about a refused request failed: {e}");
        }
    }

    fn post_group(&mut self, index: usize, entries: &[FifoEntry]) -> Result<(), NetError> {
        let slot = &self.slots[index];
        let seq = slot.seq;
        let nreqs = slot.nreqs;
        let nqps = self.link.qps.len();
        let imm = if nreqs == 1 {
            slot.sends[0].size as u32
        } else {
            fifo::IMM_SIZES
        };
        if nreqs > 1 {
            for i in 0..nreqs {
                self.sizes
                    .write(index * MAX_RECVS + i, slot.sends[i].size as u32);
            }
        }
        let slot = &self.slots[index];
        for (q, qp) in self.link.qps.iter().enumerate() {
            let mut sges: Vec<ibv_sge> = Vec::with_capacity(nreqs + 1);
            let mut wrs: Vec<ibv_send_wr> = Vec::with_capacity(nreqs + 2);
            let max_inline = self.link.max_inline;
            let mut push =
                |sges: &mut Vec<ibv_sge>, sge: Option<ibv_sge>, remote: u64, rkey: u32| {
                    let mut wr = ibv_send_wr::zeroed();
                    wr.opcode = ibv_wr_opcode::IBV_WR_RDMA_WRITE;
                    wr.wr.rdma = ibv_send_wr_rdma {
                        remote_addr: remote,
                        rkey,
                    };
                    if let Some(sge) = sge {
                        if sge.length <= max_inline {
                            wr.send_flags |= IBV_SEND_INLINE;
                        }
                        sges.push(sge);
                        wr.num_sge = 1;
                    }
                    wrs.push(wr);
                };
            if q == 0 && nreqs > 1 {
                push(
                    &mut sges,
                    Some(ibv_sge {
                        addr: self.sizes.addr(index * MAX_RECVS),
                        length: (4 * nreqs) as u32,
                        lkey: self.sizes.mr.lkey,
                    }),
                    entries[0].sizes_addr,
                    entries[0].sizes_rkey,
                );
            }
            let mut data_writes = 0;
            for (send, entry) in slot.sends[..nreqs].iter().zip(entries) {
                let (off, len) = fifo::split(send.size, q, nqps);
                if len > 0 {
                    push(
                        &mut sges,
                        Some(ibv_sge {
                            addr: send.data + off as u64,
                            length: len as u32,
                            lkey: send.lkey,
                        }),
                        entry.addr + off as u64,
                        entry.rkey,
                    );
                    data_writes += 1;
                }
            }
            // The last write of this QP carries the immediate and the one completion; it
            // cannot be the size write (the receiver must see the sizes before the immediate,
            // which holds because they precede it on QP 0), so without data on this QP a
            // zero-length write carries it.
            if data_writes == 0 {
                push(&mut sges, None, entries[0].addr, entries[0].rkey);
            }
            let last = wrs.len() - 1;
            wrs[last].opcode = ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM;
            wrs[last].imm_data = imm.to_be();
            wrs[last].send_flags |= IBV_SEND_SIGNALED;
            wrs[last].wr_id = wr_id(KIND_DATA, seq);
            let mut s = 0;
            for wr in &mut wrs {
                if wr.num_sge == 1 {
                    wr.sg_list = &mut sges[s];
                    s += 1;
                }
            }
            for k in 0..last {
                let next: *mut ibv_send_wr = &mut wrs[k + 1];
                wrs[k].next = next;
            }
            // SAFETY: every SGE is the caller's registered buffer (isend's contract keeps it
            // until the request completes), the size record (ours, alive with the comm) or
            // inline; remote addresses and rkeys come from the receiver's FIFO entries.
            if let Err(e) = unsafe { qp.post_send(&mut wrs[0]) } {
                return Err(self.link.fail(e));
            }
        }
        let slot = &mut self.slots[index];
        slot.posted = true;
        slot.outstanding = nqps;
        Ok(())
    }

    /// `test` of a send request (group `seq`, entry `i`).
    pub fn test(&mut self, seq: u32, i: usize) -> Result<Option<Completion>, NetError> {
        if self.closed {
            return Err(NetError::new(
                NetErrorKind::Closed,
                "test of a send on a closed verbs comm",
            ));
        }
        self.progress()?;
        let slot = &mut self.slots[fifo::slot_of(seq)];
        if slot.seq != seq || slot.unreaped == 0 {
            return Err(NetError::new(
                NetErrorKind::InvalidArgument,
                format!("test of send request {seq} that already completed"),
            ));
        }
        if slot.posted && slot.outstanding == 0 {
            slot.unreaped -= 1;
            return Ok(Some(Completion::new(&[slot.sends[i].size])));
        }
        self.link.check_peer()?;
        Ok(None)
    }

    pub fn close(&mut self) {
        self.closed = true;
        self.link.close();
    }
}

/// The port a send comm runs on (registrations are made in its PD).
pub(crate) fn port_of_send(c: &IbSendComm) -> Arc<Port> {
    lock(&c.0).link.port.clone()
}
