//! What both ends of a verbs connection share: the link (QPs, CQ, the handshake socket as a
//! liveness signal), DMA buffers, completion polling and the words of completion errors. The
//! ends themselves are [`super::send`] and [`super::recv`] (NCCL's protocol: [`super::fifo`]).
//!
//! Selective signalling: the sender's data writes are unsignaled except the last one per QP
//! per request (it carries the immediate); completions on one QP arrive in order, so that one
//! completion says every earlier write of the request on that QP is done. The receiver's FIFO
//! writes are signaled one in `FIFO_SIGNAL_EVERY`, only so that their send-queue entries are
//! reclaimed. Small writes go inline (copied into the work request; no DMA read of the source).

use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use weft_sys::verbs::types::*;

use super::device::Port;

use super::qp::{Qp, Rts};
use super::select::describe_gid;
use super::verbs::{Cq, Mr};
use crate::{NetError, NetErrorKind};

/// One receiver FIFO write in this many asks for a completion.
pub(crate) const FIFO_SIGNAL_EVERY: u32 = 8;
/// How often a waiting comm checks that its peer is alive (the handshake socket).
const LIVENESS_EVERY: Duration = Duration::from_millis(100);

pub(crate) const KIND_DATA: u64 = 1;
pub(crate) const KIND_RECV: u64 = 2;
pub(crate) const KIND_FIFO: u64 = 3;

pub(crate) fn wr_id(kind: u64, seq: u32) -> u64 {
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
    pub(crate) fn fail(&mut self, err: NetError) -> NetError {
        if self.failed.is_none() {
            log::warn!("{err}");
            self.failed = Some(err.clone());
            self.qps.clear();
        }
        self.failed.clone().unwrap_or(err)
    }

    /// Destroys the QPs (no DMA after this) and shuts the handshake socket, so that the peer
    /// sees the close even while requests of this comm are still held.
    pub(crate) fn close(&mut self) {
        self.qps.clear();
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }

    pub(crate) fn check(&self) -> Result<(), NetError> {
        match &self.failed {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// The error for a failed work completion: what, where, and what to check.
    fn wc_error(&self, wc: &ibv_wc, what: &str) -> NetError {
        self.wc_error_with(wc, what, self.peer_words())
    }

    /// As [`Link::wc_error`], naming `peer` as the other end (the flush's loopback QP is its
    /// own peer).
    pub(crate) fn wc_error_with(&self, wc: &ibv_wc, what: &str, peer: String) -> NetError {
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
        let mut e = NetError::new(NetErrorKind::Io(std::io::ErrorKind::Other), msg).peer(peer);
        if let Some(hint) = status.hint() {
            e = e.hint(hint);
        }
        e
    }

    /// Checks, at most every [`LIVENESS_EVERY`], that the peer's handshake socket is open: a
    /// peer that closed or died (keepalive) fails the comm instead of leaving it waiting.
    pub(crate) fn check_peer(&mut self) -> Result<(), NetError> {
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

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Drains the CQ into the send or receive state.
pub(crate) fn poll_cq(link: &mut Link, mut on: impl FnMut(&ibv_wc)) -> Result<(), NetError> {
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

pub use super::recv::IbRecvComm;
pub(crate) use super::recv::{RecvState, entry_of, port_of_recv};
pub use super::send::IbSendComm;
pub(crate) use super::send::{SendState, port_of_send};

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
