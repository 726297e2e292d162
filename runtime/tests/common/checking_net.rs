//! A Net wrapper that checks the proxy's buffer discipline (included by path as
//! `mod checking` from the tests that stream over NET).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use weft_runtime::net::socket::SocketNet;
use weft_runtime::net::{
    CommRef, Completion, Net, NetError, NetHandle, NetProperties, PtrKind, RecvBuffer,
};

/// SocketNet, but every send remembers its bytes and, when it completes, checks that the
/// buffer still holds them (a slot overwritten while in flight would differ); and every
/// `test` says "not yet" a pseudo-random number of times first, so requests stay in
/// flight long enough for a wrong early release to be caught.
pub struct CheckingNet {
    pub inner: SocketNet,
    pub sends_checked: AtomicU64,
    pub overwritten: AtomicU64,
    /// While set, `test` blocks (a misbehaving backend), for the proxy's stop deadline.
    pub stall: AtomicBool,
    /// Reports `max_recvs` 1 (as NCCL's own socket plugin does): no grouped receives.
    pub single_receives: bool,
    delay_seed: AtomicU64,
}

impl CheckingNet {
    pub fn new(inner: SocketNet) -> Self {
        CheckingNet {
            inner,
            sends_checked: AtomicU64::new(0),
            overwritten: AtomicU64::new(0),
            stall: AtomicBool::new(false),
            single_receives: false,
            delay_seed: AtomicU64::new(0x1234_5678),
        }
    }
}

pub struct Request {
    inner: <SocketNet as Net>::Request,
    /// For sends: the buffer and the bytes it held at isend.
    sent: Option<(*const u8, Vec<u8>)>,
    delays: u32,
}

// SAFETY: (test code) the pointer is only read by the proxy thread owning the request,
// within the buffer-lifetime contract of `Net::isend`.
unsafe impl Send for Request {}

impl Net for CheckingNet {
    type ListenComm = <SocketNet as Net>::ListenComm;
    type SendComm = <SocketNet as Net>::SendComm;
    type RecvComm = <SocketNet as Net>::RecvComm;
    type Connecting = <SocketNet as Net>::Connecting;
    type MemHandle = <SocketNet as Net>::MemHandle;
    type Request = Request;

    fn name(&self) -> &str {
        "CheckingSocket"
    }
    fn devices(&self) -> usize {
        self.inner.devices()
    }
    fn properties(&self, dev: usize) -> Result<NetProperties, NetError> {
        let mut p = self.inner.properties(dev)?;
        if self.single_receives {
            p.max_recvs = 1;
        }
        Ok(p)
    }
    fn listen(&self, dev: usize) -> Result<(NetHandle, Self::ListenComm), NetError> {
        self.inner.listen(dev)
    }
    fn connect(
        &self,
        dev: usize,
        handle: &NetHandle,
        state: &mut Option<Self::Connecting>,
    ) -> Result<Option<Self::SendComm>, NetError> {
        self.inner.connect(dev, handle, state)
    }
    fn accept(&self, listen: &mut Self::ListenComm) -> Result<Option<Self::RecvComm>, NetError> {
        self.inner.accept(listen)
    }
    unsafe fn reg_mr(
        &self,
        comm: CommRef<'_, Self::SendComm, Self::RecvComm>,
        data: *mut u8,
        size: usize,
        kind: PtrKind,
    ) -> Result<Self::MemHandle, NetError> {
        // SAFETY: forwarded under the caller's contract.
        unsafe { self.inner.reg_mr(comm, data, size, kind) }
    }
    fn dereg_mr(&self, mr: Self::MemHandle) -> Result<(), NetError> {
        self.inner.dereg_mr(mr)
    }
    unsafe fn isend(
        &self,
        comm: &mut Self::SendComm,
        data: *const u8,
        size: usize,
        tag: u32,
        mr: &Self::MemHandle,
    ) -> Result<Option<Request>, NetError> {
        // SAFETY: the caller promises data..data+size is readable until completion.
        let snapshot = unsafe { std::slice::from_raw_parts(data, size) }.to_vec();
        // SAFETY: forwarded under the caller's contract.
        let inner = unsafe { self.inner.isend(comm, data, size, tag, mr) }?;
        Ok(inner.map(|inner| Request {
            inner,
            sent: Some((data, snapshot)),
            delays: self.next_delay(),
        }))
    }
    unsafe fn irecv(
        &self,
        comm: &mut Self::RecvComm,
        bufs: &[RecvBuffer<'_, Self::MemHandle>],
    ) -> Result<Option<Request>, NetError> {
        // SAFETY: forwarded under the caller's contract.
        let inner = unsafe { self.inner.irecv(comm, bufs) }?;
        Ok(inner.map(|inner| Request {
            inner,
            sent: None,
            delays: self.next_delay(),
        }))
    }
    unsafe fn iflush(
        &self,
        _comm: &mut Self::RecvComm,
        _bufs: &[RecvBuffer<'_, Self::MemHandle>],
    ) -> Result<Option<Request>, NetError> {
        Ok(None)
    }
    fn test(&self, request: &mut Request) -> Result<Option<Completion>, NetError> {
        while self.stall.load(Ordering::Acquire) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        if request.delays > 0 {
            request.delays -= 1;
            return Ok(None);
        }
        let done = self.inner.test(&mut request.inner)?;
        if done.is_some() {
            if let Some((data, snapshot)) = &request.sent {
                // SAFETY: the buffer stays valid until the proxy sees this completion.
                let now = unsafe { std::slice::from_raw_parts(*data, snapshot.len()) };
                if now != &snapshot[..] {
                    self.overwritten.fetch_add(1, Ordering::Relaxed);
                }
                self.sends_checked.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(done)
    }
    fn close_send(&self, comm: Self::SendComm) -> Result<(), NetError> {
        self.inner.close_send(comm)
    }
    fn close_recv(&self, comm: Self::RecvComm) -> Result<(), NetError> {
        self.inner.close_recv(comm)
    }
    fn close_listen(&self, comm: Self::ListenComm) -> Result<(), NetError> {
        self.inner.close_listen(comm)
    }
}

impl CheckingNet {
    fn next_delay(&self) -> u32 {
        let mut x = self.delay_seed.load(Ordering::Relaxed);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.delay_seed.store(x, Ordering::Relaxed);
        (x % 64) as u32
    }
}
