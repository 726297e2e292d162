//! The data path of a verbs connection: the send and receive comms, their requests, and the
//! completion queue that ends them (NCCL's protocol, see [`super::fifo`]).
//!
//! Selective signalling: the sender's data writes are unsignaled except the last one per QP
//! per request (it carries the immediate); completions on one QP arrive in order, so that one
//! completion says every earlier write of the request on that QP is done. The receiver's FIFO
//! writes are signaled one in [`FIFO_SIGNAL_EVERY`], only so that their send-queue entries are
//! reclaimed. Small writes go inline (copied into the work request; no DMA read of the source).

use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use weft_sys::verbs::types::*;

use super::device::Port;
use super::fifo::{self, FifoEntry, ImmMeaning, MAX_RECVS, SLOTS};
use super::qp::{Qp, Rts};
use super::select::describe_gid;
use super::verbs::{Cq, Mr};
use crate::{Completion, NetError, NetErrorKind, RecvBuffer};

/// One receiver FIFO write in this many asks for a completion.
pub(crate) const FIFO_SIGNAL_EVERY: u32 = 8;
/// How often a waiting comm checks that its peer is alive (the handshake socket).
const LIVENESS_EVERY: Duration = Duration::from_millis(100);

const KIND_DATA: u64 = 1;
const KIND_RECV: u64 = 2;
const KIND_FIFO: u64 = 3;

fn wr_id(kind: u64, seq: u32) -> u64 {
    (kind << 32) | u64::from(seq)
}

/// Page-aligned, zeroed memory that the NIC reads or writes, registered with the port's PD.
/// Accessed only through raw pointers (the NIC writes it behind the compiler's back).
pub(crate) struct DmaBuf<T> {
    ptr: *mut T,
    len: usize,
    layout: std::alloc::Layout,
    /// Dropped by hand in `Drop`, before the memory it covers is freed.
    pub mr: std::mem::ManuallyDrop<Mr>,
}

// SAFETY: the buffer is owned; every access goes through `&mut self` or volatile reads.
unsafe impl<T: Send> Send for DmaBuf<T> {}

impl<T: Copy> DmaBuf<T> {
    /// `len` zeroed values of `T` (a plain-data type valid as zero bytes).
    pub fn new(port: &Port, len: usize, access: u32) -> Result<Self, NetError> {
        let layout = std::alloc::Layout::array::<T>(len)
            .and_then(|l| l.align_to(4096))
            .map_err(|e| {
                NetError::new(NetErrorKind::InvalidArgument, "DMA buffer layout").cause(e)
            })?;
        // SAFETY: a non-zero layout (len >= 1 in every use).
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<T>();
        if ptr.is_null() {
            return Err(NetError::new(
                NetErrorKind::Io(std::io::ErrorKind::OutOfMemory),
                "allocating a DMA buffer",
            ));
        }
        // SAFETY: freshly allocated, freed only in Drop after the MR is dropped.
        let mr = match unsafe { Mr::register(port.pd.clone(), ptr.cast(), layout.size(), access) } {
            Ok(mr) => mr,
            Err(e) => {
                // SAFETY: allocated above with this layout.
                unsafe { std::alloc::dealloc(ptr.cast(), layout) };
                return Err(e);
            }
        };
        Ok(DmaBuf {
            ptr,
            len,
            layout,
            mr: std::mem::ManuallyDrop::new(mr),
        })
    }

    pub fn addr(&self, i: usize) -> u64 {
        debug_assert!(i < self.len);
        self.ptr.wrapping_add(i) as u64
    }

    pub fn read(&self, i: usize) -> T {
        assert!(i < self.len);
        let p = self.ptr.wrapping_add(i);
        // SAFETY: in bounds (checked above); volatile because the NIC may have written it.
        unsafe { std::ptr::read_volatile(p) }
    }

    pub fn write(&mut self, i: usize, value: T) {
        assert!(i < self.len);
        let p = self.ptr.wrapping_add(i);
        // SAFETY: in bounds (checked above); volatile so that the store is not elided
        // before the NIC reads it.
        unsafe { std::ptr::write_volatile(p, value) }
    }
}

impl<T> Drop for DmaBuf<T> {
    fn drop(&mut self) {
        // SAFETY: `mr` is dropped once, here, and not used again; deregistering first means
        // the NIC can no longer reach the memory freed next.
        unsafe { std::mem::ManuallyDrop::drop(&mut self.mr) };
        // SAFETY: the pointer came from alloc_zeroed(layout) and is freed once.
        unsafe { std::alloc::dealloc(self.ptr.cast(), self.layout) };
    }
}

/// What both ends of a connection hold: the QPs, their CQ, the handshake socket (liveness)
/// and the words for messages.
pub(crate) struct Link {
    pub port: Arc<Port>,
    /// Dropped (destroying the QPs) on close or failure, so that no DMA outlives the comm.
    pub qps: Vec<Qp<Rts>>,
    pub cq: Arc<Cq>,
    pub stream: TcpStream,
    pub peer: SocketAddr,
    pub peer_gid: [u8; 16],
    pub max_inline: u32,
    pub failed: Option<NetError>,
    last_liveness: Instant,
}

impl Link {
    pub fn new(
        port: Arc<Port>,
        qps: Vec<Qp<Rts>>,
        cq: Arc<Cq>,
        stream: TcpStream,
        peer: SocketAddr,
        peer_gid: [u8; 16],
    ) -> Self {
        let max_inline = qps
            .iter()
            .map(|q| q.caps().max_inline_data)
            .min()
            .unwrap_or(0);
        Link {
            port,
            qps,
            cq,
            stream,
            peer,
            peer_gid,
            max_inline,
            failed: None,
            last_liveness: Instant::now(),
        }
    }

    /// `rank at 192.168.101.2 (handshake 192.168.101.2:4711)` for messages.
    fn peer_words(&self) -> String {
        format!("{} (handshake {})", describe_gid(&self.peer_gid), self.peer)
    }

    /// Records `err` as the comm's failure and destroys the QPs; returns it.
    fn fail(&mut self, err: NetError) -> NetError {
        if self.failed.is_none() {
            log::warn!("{err}");
            self.failed = Some(err.clone());
            self.qps.clear();
        }
        self.failed.clone().unwrap_or(err)
    }

    /// Destroys the QPs (no DMA after this) and shuts the handshake socket, so that the peer
    /// sees the close even while requests of this comm are still held.
    fn close(&mut self) {
        self.qps.clear();
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }

    fn check(&self) -> Result<(), NetError> {
        match &self.failed {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// The error for a failed work completion: what, where, and what to check.
    fn wc_error(&self, wc: &ibv_wc, what: &str) -> NetError {
        let status = wc.status;
        let place = WcPlace {
            local: self.port.describe(),
            device: self.port.name().to_string(),
            port: self.port.port,
            subnet: local_subnet(&self.port),
            gid_index: self.port.gid_index,
            peer: describe_gid(&self.peer_gid),
        };
        let mut msg = wc_message(what, status, wc.vendor_err, &place);
        if status == ibv_wc_status::IBV_WC_WR_FLUSH_ERR {
            // A flush as the first error means the QP was moved to the error state from
            // outside: usually the port went down (rxe flushes its QPs with the netdev).
            if let Ok(attr) = self.port.pd.ctx.query_port(self.port.port) {
                if attr.state != ibv_port_state::IBV_PORT_ACTIVE {
                    msg = format!(
                        "{msg}: port {} of {} is no longer ACTIVE (state {}): the link went \
                         down (check the cable and `ip link` of its netdev)",
                        self.port.port,
                        self.port.name(),
                        attr.state.0
                    );
                }
            }
        }
        let mut e =
            NetError::new(NetErrorKind::Io(std::io::ErrorKind::Other), msg).peer(self.peer_words());
        if let Some(hint) = status.hint() {
            e = e.hint(hint);
        }
        e
    }

    /// Checks, at most every [`LIVENESS_EVERY`], that the peer's handshake socket is open: a
    /// peer that closed or died (keepalive) fails the comm instead of leaving it waiting.
    fn check_peer(&mut self) -> Result<(), NetError> {
        if self.last_liveness.elapsed() < LIVENESS_EVERY {
            return Ok(());
        }
        self.last_liveness = Instant::now();
        let mut byte = [0u8; 1];
        // SAFETY: a live socket and a one-byte buffer.
        let n = unsafe {
            libc::recv(
                self.stream.as_raw_fd(),
                byte.as_mut_ptr().cast(),
                1,
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        let err = match n {
            0 => NetError::new(NetErrorKind::PeerClosed, "the peer closed the connection"),
            n if n > 0 => {
                // Nothing is sent after the handshake: drain and ignore.
                let _ = self.stream.read(&mut byte);
                return Ok(());
            }
            _ => {
                let e = std::io::Error::last_os_error();
                if crate::socket::sys::would_block(&e) {
                    return Ok(());
                }
                NetError::io(
                    "the peer's handshake socket failed (peer host down or unreachable?)",
                    &e,
                )
            }
        };
        Err(self.fail(err.peer(self.peer_words())))
    }
}

/// Where a failed work completion happened, for [`wc_message`].
struct WcPlace {
    /// `rxe0 port 1 (GID index 1, 192.168.101.2/24 on eth0)`.
    local: String,
    device: String,
    port: u8,
    subnet: String,
    gid_index: u32,
    /// The peer's address (from its GID).
    peer: String,
}

/// The words of a failed work completion: the operation, the place, rdma-core's status, and
/// for the timeouts the reading that matters on a mesh (which peer is unreachable from where).
fn wc_message(what: &str, status: ibv_wc_status, vendor_err: u32, at: &WcPlace) -> String {
    let name = status.name().unwrap_or("unknown status");
    let mut msg = format!(
        "{what} on {} failed: {name} (status {}, {}, vendor error {vendor_err:#x})",
        at.local,
        status.0,
        status.summary(),
    );
    if status == ibv_wc_status::IBV_WC_RETRY_EXC_ERR
        || status == ibv_wc_status::IBV_WC_RESP_TIMEOUT_ERR
    {
        msg = format!(
            "{msg}: peer {} unreachable from device {} port {} on subnet {}; check the GID \
             index (NCCL_IB_GID_INDEX, now {}) and the link",
            at.peer, at.device, at.port, at.subnet, at.gid_index
        );
    }
    msg
}

/// The subnet of the port's address, `192.168.101.0/24`, for messages.
fn local_subnet(port: &Port) -> String {
    let Some(addr) = super::select::gid_address(&port.gid) else {
        return format!("LID {}", port.lid);
    };
    match super::device::local_prefix(addr) {
        Some(p) => super::select::subnet_of(addr, p),
        None => format!("{addr} (no interface holds it)"),
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Drains the CQ into the send or receive state.
fn poll_cq(link: &mut Link, mut on: impl FnMut(&ibv_wc)) -> Result<(), NetError> {
    let mut wcs = [ibv_wc::zeroed(); 16];
    loop {
        let n = link.cq.poll(&mut wcs)?;
        for wc in &wcs[..n] {
            if wc.status != ibv_wc_status::IBV_WC_SUCCESS {
                let what = match wc.wr_id >> 32 {
                    KIND_DATA => "RDMA write of data",
                    KIND_RECV => "receive of a write-with-immediate",
                    KIND_FIFO => "RDMA write of a FIFO entry",
                    _ => "work request",
                };
                let e = link.wc_error(wc, what);
                return Err(link.fail(e));
            }
            on(wc);
        }
        if n < wcs.len() {
            return Ok(());
        }
    }
}

// ---- send side ----------------------------------------------------------------------

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

// ---- receive side -------------------------------------------------------------------

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

    pub fn close(&mut self) {
        self.closed = true;
        self.link.close();
    }
}

/// A receive buffer as the FIFO entry needs it: (address, capacity, tag, rkey).
pub(crate) fn entry_of(b: &RecvBuffer<'_, super::IbMemHandle>) -> (u64, usize, u32, u32) {
    (b.data as u64, b.size, b.tag, b.mr.mr.rkey)
}

/// The port a send comm runs on (registrations are made in its PD).
pub(crate) fn port_of_send(c: &IbSendComm) -> Arc<Port> {
    lock(&c.0).link.port.clone()
}

/// The port a receive comm runs on.
pub(crate) fn port_of_recv(c: &IbRecvComm) -> Arc<Port> {
    lock(&c.0).link.port.clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place() -> WcPlace {
        WcPlace {
            local: "rxe0 port 1 (GID index 1, 192.168.101.2/24 on eth0)".into(),
            device: "rxe0".into(),
            port: 1,
            subnet: "192.168.101.0/24".into(),
            gid_index: 1,
            peer: "192.168.101.1".into(),
        }
    }

    #[test]
    fn a_retry_timeout_says_which_peer_is_unreachable_from_where() {
        let msg = wc_message(
            "RDMA write of data",
            ibv_wc_status::IBV_WC_RETRY_EXC_ERR,
            0x81,
            &place(),
        );
        assert_eq!(
            msg,
            "RDMA write of data on rxe0 port 1 (GID index 1, 192.168.101.2/24 on eth0) failed: \
             IBV_WC_RETRY_EXC_ERR (status 12, transport retry counter exceeded, vendor error \
             0x81): peer 192.168.101.1 unreachable from device rxe0 port 1 on subnet \
             192.168.101.0/24; check the GID index (NCCL_IB_GID_INDEX, now 1) and the link"
        );
    }

    #[test]
    fn other_statuses_give_their_name_and_rdma_cores_words() {
        let msg = wc_message("receive", ibv_wc_status::IBV_WC_REM_ACCESS_ERR, 0, &place());
        assert!(
            msg.ends_with(
                "failed: IBV_WC_REM_ACCESS_ERR (status 10, remote access error, vendor error 0x0)"
            ),
            "{msg}"
        );
        let msg = wc_message("receive", ibv_wc_status(99), 0, &place());
        assert!(msg.contains("unknown status (status 99, unknown"), "{msg}");
    }
}
