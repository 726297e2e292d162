//! Point-to-point groups of a [`HostComm`]: sends and receives run together, as between
//! NCCL's `ncclGroupStart` and `ncclGroupEnd`, over connections built on first use in a
//! handshake with each peer.

use std::sync::{Arc, Mutex};

use weft_core::fifo::NCCL_STEPS;

use super::connect::{self, Planned, Transports};
use super::error::CommError;
use super::host::HostComm;
use crate::exec::{Job, RawBuffers, lock, p2p};

/// A point-to-point operation of a [`HostComm::group`].
#[derive(Debug)]
pub enum P2pOp<'a> {
    Send { peer: usize, buf: &'a [u8] },
    Recv { peer: usize, buf: &'a mut [u8] },
}

impl HostComm {
    /// Sends `buf` to `peer`, which must call [`HostComm::recv`] (or a group with a
    /// receive) with the same length.
    pub fn send(&mut self, buf: &[u8], peer: usize) -> Result<(), CommError> {
        self.group(&mut [P2pOp::Send { peer, buf }])
    }

    /// Receives from `peer` into `buf` (the sender sends exactly `buf.len()` bytes).
    pub fn recv(&mut self, buf: &mut [u8], peer: usize) -> Result<(), CommError> {
        self.group(&mut [P2pOp::Recv { peer, buf }])
    }

    /// Runs point-to-point operations together, as between NCCL's `ncclGroupStart` and
    /// `ncclGroupEnd`: transfers with different peers progress at the same time (so a ring
    /// of ranks that each send to the next and receive from the previous cannot deadlock);
    /// operations with the same peer in the same direction run in order. A send to this
    /// rank pairs with a receive from it, in order.
    pub fn group(&mut self, ops: &mut [P2pOp<'_>]) -> Result<(), CommError> {
        self.usable()?;
        let (send_peers, recv_peers) = self.peers_of(ops)?;
        self.connect_p2p(&send_peers, &recv_peers)?;

        // One job per (direction, peer), running that pair's operations in order. Sends
        // come first: when each peer gets little enough from this group that the sends
        // never wait for credit (see `slots_of`), the jobs run one after the
        // other on this thread, sends then receives, and no worker is woken.
        let sequential = send_peers.iter().all(|&peer| {
            let slots: usize = ops
                .iter()
                .filter_map(|op| match op {
                    P2pOp::Send { peer: p, buf } if *p as u32 == peer => Some(buf.len()),
                    _ => None,
                })
                .map(|bytes| self.slots_of(bytes))
                .sum();
            slots <= NCCL_STEPS / 2
        });
        let mut jobs: Vec<Job> = Vec::new();
        for &peer in &send_peers {
            let Some(end) = self.p2p.send.get(&peer).cloned() else {
                continue;
            };
            let bufs: Vec<RawBuffers> = ops
                .iter()
                .filter_map(|op| match op {
                    P2pOp::Send { peer: p, buf } if *p as u32 == peer => {
                        // SAFETY: `buf` is borrowed for the whole call (through `ops`), and
                        // `run` waits for every job before returning.
                        Some(unsafe {
                            RawBuffers::new(buf.as_ptr(), buf.len(), std::ptr::null_mut(), 0)
                        })
                    }
                    _ => None,
                })
                .collect();
            jobs.push(Box::new(move || {
                let mut end = lock(&end);
                for b in bufs {
                    p2p::send(&mut end, &b, 0..b.input_len())?;
                }
                Ok(())
            }));
        }
        for &peer in &recv_peers {
            let Some(end) = self.p2p.recv.get(&peer).cloned() else {
                continue;
            };
            let bufs: Vec<RawBuffers> = ops
                .iter_mut()
                .filter_map(|op| match op {
                    P2pOp::Recv { peer: p, buf } if *p as u32 == peer => {
                        // SAFETY: `buf` is borrowed mutably for the whole call (through
                        // `ops`), and `run` waits for every job before returning.
                        Some(unsafe {
                            RawBuffers::new(std::ptr::null(), 0, buf.as_mut_ptr(), buf.len())
                        })
                    }
                    _ => None,
                })
                .collect();
            jobs.push(Box::new(move || {
                let mut end = lock(&end);
                for b in bufs {
                    p2p::recv(&mut end, &b, 0..b.output_len())?;
                }
                Ok(())
            }));
        }
        if jobs.is_empty() {
            return Ok(());
        }
        let call = self
            .status
            .board
            .call("send/recv group", ops.len(), "operations", false);
        match self.executor.run_with(jobs, !sequential) {
            Ok(()) => {
                call.done();
                Ok(())
            }
            Err(e) => Err(self.failure(e)),
        }
    }

    /// The peers `ops` sends to and receives from (each once, in order of first
    /// appearance), once its sends to this rank are copied into its receives from it.
    fn peers_of(&self, ops: &mut [P2pOp<'_>]) -> Result<(Vec<u32>, Vec<u32>), CommError> {
        let mut send_peers: Vec<u32> = Vec::new();
        let mut recv_peers: Vec<u32> = Vec::new();
        let mut self_sends: Vec<&[u8]> = Vec::new();
        let mut self_recvs: Vec<usize> = Vec::new();
        for (k, op) in ops.iter().enumerate() {
            let (peer, list) = match op {
                P2pOp::Send { peer, .. } => (*peer, &mut send_peers),
                P2pOp::Recv { peer, .. } => (*peer, &mut recv_peers),
            };
            if peer >= self.nranks {
                return Err(CommError::InvalidArgument(format!(
                    "peer {peer} out of range for {} ranks",
                    self.nranks
                )));
            }
            if peer == self.rank {
                match op {
                    P2pOp::Send { buf, .. } => self_sends.push(buf),
                    P2pOp::Recv { .. } => self_recvs.push(k),
                }
            } else if !list.contains(&(peer as u32)) {
                list.push(peer as u32);
            }
        }
        if self_sends.len() != self_recvs.len() {
            return Err(CommError::InvalidArgument(format!(
                "{} send(s) to this rank but {} receive(s) from it in one group",
                self_sends.len(),
                self_recvs.len()
            )));
        }
        let sends_to_self: Vec<Vec<u8>> = self_sends.iter().map(|b| b.to_vec()).collect();
        for (data, k) in sends_to_self.iter().zip(&self_recvs) {
            if let Some(P2pOp::Recv { buf, .. }) = ops.get_mut(*k) {
                Self::check_len("receive (from this rank)", buf.len(), data.len())?;
                buf.copy_from_slice(data);
            }
        }
        Ok((send_peers, recv_peers))
    }

    /// FIFO slots a message of `bytes` takes (a zero-byte message still takes one).
    ///
    /// Why groups whose messages to each peer take at most half of the 8 slots may run
    /// sequentially (sends, then receives) without deadlock: a rank X blocked on credit to
    /// Y has filled all 8 slots with messages Y has not received; Y has received every
    /// group before its current one, so X's unreceived messages span X's groups from Y's
    /// current one to X's own, at most 4 slots each, and 8 slots need X to be at least two
    /// groups ahead of Y. A cycle of ranks blocked on credit would need each to be two
    /// groups ahead of the next, around the cycle: impossible. A rank running its group in
    /// parallel receives whatever it blocks on, so it is never part of such a cycle.
    fn slots_of(&self, bytes: usize) -> usize {
        bytes.div_ceil(self.step_bytes.max(1)).max(1)
    }

    /// Builds the point-to-point connections not built yet (a handshake with each peer,
    /// which builds its side in the matching call).
    fn connect_p2p(&mut self, sends: &[u32], recvs: &[u32]) -> Result<(), CommError> {
        let me = self.peers.get(self.rank).copied();
        let channel = self.rings.len() as u32;
        let (tag_send, tag_recv) = connect::p2p_tags();
        let plan = |peer: u32, tag: u32, transports: &Transports| -> Option<Planned> {
            let (m, p) = (me?, self.peers.get(peer as usize)?);
            Some(Planned {
                peer,
                channel,
                kind: transports.choose(&m, p),
                tag,
            })
        };
        let new_sends: Vec<Planned> = sends
            .iter()
            .filter(|p| !self.p2p.send.contains_key(p))
            .filter_map(|&p| plan(p, tag_send, &self.transports))
            .collect();
        let new_recvs: Vec<Planned> = recvs
            .iter()
            .filter(|p| !self.p2p.recv.contains_key(p))
            .filter_map(|&p| plan(p, tag_recv, &self.transports))
            .collect();
        if new_sends.is_empty() && new_recvs.is_empty() {
            return Ok(());
        }
        let (s, r) = connect::handshake(
            self.rank as u32,
            &mut self.bootstrap,
            &mut self.transports,
            &new_sends,
            &new_recvs,
        )?;
        for (p, end) in new_sends.iter().zip(s) {
            self.p2p.send.insert(p.peer, Arc::new(Mutex::new(end)));
        }
        for (p, end) in new_recvs.iter().zip(r) {
            self.p2p.recv.insert(p.peer, Arc::new(Mutex::new(end)));
        }
        Ok(())
    }
}
