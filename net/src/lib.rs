//! weft-net: the `Net` trait and its backends, apart from the rest of weft so that the NCCL
//! net plugin links the network code alone (it depends on weft-core, weft-config and weft-sys
//! only). Each backend is configured by a struct built from weft-config's settings.
//!
//! - [`socket`]: TCP sockets (NCCL's `net_socket.cc` counterpart).
//! - [`ib`]: verbs (InfiniBand, RoCE), NCCL's `net_ib.cc` counterpart.
//! - [`mesh`]: verbs over a multi-subnet mesh: a multi-address handle, the NIC chosen by subnet.
//! - [`external`]: [`external::ExternalNet`], an NCCL net plugin (ncclNet v8..v11) loaded
//!   with `NCCL_NET_PLUGIN`, as NCCL loads one.
//! - [`nccl_abi`]: NCCL's net plugin ABI (the tables v8..v11), shared by weft's own plugin
//!   and [`external`].
//! - [`any`]: [`any::AnyNet`], whichever backend was chosen at run time.
//! - [`error`]: [`NetError`], what failed, with which peer, and what to try.
//!
//! [`Net`] is NCCL's `ncclNet_v8_t` as a Rust trait: a table of devices, a listen / connect /
//! accept handshake driven by polling, memory registration, and asynchronous sends and
//! (grouped) receives completed by `test`. The NET transport's proxy thread drives it, and
//! the NCCL net plugin is a thin C-ABI adapter over it, so its shape follows the plugin ABI:
//!
//! | NCCL (`ncclNet_v8_t`) | here |
//! | --- | --- |
//! | `devices`, `getProperties` | [`Net::devices`], [`Net::properties`] |
//! | `listen` (handle of `NCCL_NET_HANDLE_MAXSIZE` bytes) | [`Net::listen`] -> ([`NetHandle`], listen comm) |
//! | `connect` (called again until `sendComm != NULL`) | [`Net::connect`] with a [`Net::Connecting`] slot, `Ok(None)` = not yet |
//! | `accept` (called again until `recvComm != NULL`) | [`Net::accept`], `Ok(None)` = not yet |
//! | `regMr` / `deregMr` | [`Net::reg_mr`] / [`Net::dereg_mr`] |
//! | `isend` (`request == NULL`: retry later) | [`Net::isend`], `Ok(None)` = not posted, retry |
//! | `irecv` (n buffers, sizes, tags) | [`Net::irecv`] with 1..=`max_recvs` [`RecvBuffer`]s |
//! | `iflush` | [`Net::iflush`], `Ok(None)` = nothing to flush |
//! | `test` (done, sizes) | [`Net::test`], `Ok(Some(sizes))` = done |
//! | `closeSend` / `closeRecv` / `closeListen` | [`Net::close_send`] / [`Net::close_recv`] / [`Net::close_listen`] |
//!
//! Nothing here blocks: connect and accept return "not yet", isend and irecv may return "not
//! posted", test returns "not done", and a dead peer becomes an error from `test`.
//!
//! Buffer lifetimes follow the plugin ABI: data is passed as raw pointers and lengths, and
//! the functions that hand a buffer to the backend are `unsafe fn` whose contract is that the
//! buffer stays valid (and, for receives, unaliased) until `test` reports the request done
//! or its comm is closed.

pub mod any;
pub mod error;
pub mod external;
pub mod ib;
pub mod mesh;
pub mod nccl_abi;
pub mod socket;

pub use error::{NetError, NetErrorKind};

/// The process environment's network settings (weft-config), for the backends' `from_env`:
/// a bad value of theirs is an error naming it; the other variables are not theirs to judge.
pub fn settings_from_env() -> Result<weft_config::NetSettings, NetError> {
    let settings = weft_config::Settings::from_env_or_defaults();
    settings.check_groups(&[weft_config::Group::Net])?;
    Ok(settings.net)
}

/// The most bytes a listen handle may take (NCCL's `NCCL_NET_HANDLE_MAXSIZE`).
pub const NET_HANDLE_MAXSIZE: usize = 128;
/// The most receives one `irecv` may group (NCCL's `NCCL_NET_MAX_RECVS` is 8).
pub const NET_MAX_RECVS: usize = 8;
/// The most requests in flight per comm (NCCL's `NCCL_NET_MAX_REQUESTS`).
pub const NET_MAX_REQUESTS: usize = 32;

/// An opaque listen handle: what `listen` produces and the peer's `connect` consumes. It is
/// exchanged through bootstrap as exactly [`NET_HANDLE_MAXSIZE`] bytes, like NCCL's.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct NetHandle(pub [u8; NET_HANDLE_MAXSIZE]);

impl NetHandle {
    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8; NET_HANDLE_MAXSIZE] {
        &self.0
    }
}

impl Default for NetHandle {
    fn default() -> Self {
        NetHandle([0; NET_HANDLE_MAXSIZE])
    }
}

impl std::fmt::Debug for NetHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The tail is usually zero; show the meaningful head only.
        let end = self.0.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
        write!(f, "NetHandle(")?;
        for b in &self.0[..end] {
            write!(f, "{b:02x}")?;
        }
        write!(f, ")")
    }
}

/// Which kinds of memory a device can send from and receive into (NCCL's `ptrSupport`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PtrSupport(u32);

impl PtrSupport {
    /// Host memory (`NCCL_PTR_HOST`).
    pub const HOST: PtrSupport = PtrSupport(0x1);
    /// CUDA device memory (`NCCL_PTR_CUDA`, GPUDirect RDMA).
    pub const CUDA: PtrSupport = PtrSupport(0x2);
    /// DMA-BUF registration (`NCCL_PTR_DMABUF`).
    pub const DMABUF: PtrSupport = PtrSupport(0x4);

    /// The raw bit set, with NCCL's values.
    pub const fn bits(self) -> u32 {
        self.0
    }
    /// Whether every kind in `other` is supported.
    pub const fn contains(self, other: PtrSupport) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for PtrSupport {
    type Output = PtrSupport;
    fn bitor(self, rhs: PtrSupport) -> PtrSupport {
        PtrSupport(self.0 | rhs.0)
    }
}

/// The kind of memory one registration or buffer lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PtrKind {
    /// Host memory.
    Host,
    /// CUDA device memory.
    Cuda,
}

/// What NCCL's `getProperties` reports about one device.
#[derive(Debug, Clone, PartialEq)]
pub struct NetProperties {
    /// Device name (the interface name for sockets, e.g. `eth0`).
    pub name: String,
    /// The PCI device path in sysfs (`/sys/devices/pci0000:00/...`), used by the topology to
    /// place the NIC; `None` for virtual interfaces.
    pub pci_path: Option<String>,
    /// A unique id per physical device (NICs with equal guid are the same port).
    pub guid: u64,
    /// Memory kinds this device can use directly.
    pub ptr_support: PtrSupport,
    /// Whether a registration is valid for every comm (NCCL's `regIsGlobal`).
    pub reg_is_global: bool,
    /// Link speed in Mbit/s.
    pub speed_mbps: u32,
    /// Port number (IB port; 0 for sockets).
    pub port: u32,
    /// One-way latency in microseconds (0 if unknown).
    pub latency_us: f32,
    /// The most comms this device supports.
    pub max_comms: u32,
    /// The most receives one grouped `irecv` may carry (1..=[`NET_MAX_RECVS`]).
    pub max_recvs: u32,
}

/// One buffer of a grouped receive.
#[derive(Debug)]
pub struct RecvBuffer<'a, M> {
    /// Where the data goes.
    pub data: *mut u8,
    /// Capacity in bytes: the matching send may be smaller, not larger.
    pub size: usize,
    /// The tag a send must carry to land here.
    pub tag: u32,
    /// The registration covering `data..data+size`.
    pub mr: &'a M,
}

/// The sizes a completed request moved: one for a send, one per buffer for a receive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    sizes: [usize; NET_MAX_RECVS],
    len: u8,
}

impl Completion {
    /// Builds a completion from up to [`NET_MAX_RECVS`] sizes (extra ones are dropped).
    pub fn new(sizes: &[usize]) -> Self {
        let mut c = Completion {
            sizes: [0; NET_MAX_RECVS],
            len: 0,
        };
        for (dst, &s) in c.sizes.iter_mut().zip(sizes) {
            *dst = s;
            c.len += 1;
        }
        c
    }
    /// The actual byte counts, in the order of the request's buffers.
    pub fn sizes(&self) -> &[usize] {
        &self.sizes[..usize::from(self.len)]
    }
}

/// A comm that a memory registration is made for (NCCL passes either kind to `regMr`).
#[derive(Debug)]
pub enum CommRef<'a, S, R> {
    /// A send comm.
    Send(&'a S),
    /// A receive comm.
    Recv(&'a R),
}

/// A network backend in the shape of NCCL's `ncclNet_v8_t`.
pub trait Net: Send + Sync {
    /// What `listen` returns; `accept` turns it into receive comms.
    type ListenComm: Send;
    /// The sending end of a connection.
    type SendComm: Send;
    /// The receiving end of a connection.
    type RecvComm: Send;
    /// The in-progress state of a `connect`, kept by the caller between polls.
    type Connecting: Send;
    /// A memory registration.
    type MemHandle: Send + Sync;
    /// An in-flight operation; `test` completes it.
    type Request: Send;

    /// The backend's name as NCCL prints it (`Socket`, `IB`).
    fn name(&self) -> &str;

    /// How many devices (NICs) this backend drives.
    fn devices(&self) -> usize;

    /// Properties of device `dev` (`0..devices()`).
    fn properties(&self, dev: usize) -> Result<NetProperties, NetError>;

    /// Starts listening on `dev`. The handle goes to the peer (through bootstrap), which
    /// passes it to `connect`; `accept` on the listen comm then yields the receive comm.
    fn listen(&self, dev: usize) -> Result<(NetHandle, Self::ListenComm), NetError>;

    /// Connects to the listener described by `handle`, without blocking. Call it again with
    /// the same `state` (start with `None`) until it returns `Ok(Some(comm))`; `Ok(None)`
    /// means "not yet". An error ends the attempt (and clears `state`).
    fn connect(
        &self,
        dev: usize,
        handle: &NetHandle,
        state: &mut Option<Self::Connecting>,
    ) -> Result<Option<Self::SendComm>, NetError>;

    /// Accepts the next connection on `listen`, without blocking: `Ok(None)` means "not yet",
    /// call it again. Several connections may be accepted from one listen comm.
    fn accept(&self, listen: &mut Self::ListenComm) -> Result<Option<Self::RecvComm>, NetError>;

    /// Registers `data..data+size` for use with `comm`.
    ///
    /// # Safety
    /// The memory must stay valid until the handle is passed to `dereg_mr`, and `kind` must
    /// describe it truthfully.
    unsafe fn reg_mr(
        &self,
        comm: CommRef<'_, Self::SendComm, Self::RecvComm>,
        data: *mut u8,
        size: usize,
        kind: PtrKind,
    ) -> Result<Self::MemHandle, NetError>;

    /// Registers `size` bytes of the dma-buf `fd` from `offset`, which the caller sees at
    /// `data` (NCCL's `regMrDmaBuf`: GPU memory exported by CUDA). Backends without dma-buf
    /// support (`properties` lacks [`PtrSupport::DMABUF`]) refuse, saying so.
    ///
    /// # Safety
    /// `fd` must be open during the call (NCCL closes it right after: the registration
    /// keeps its own reference) and the memory must stay allocated until the handle is
    /// passed to `dereg_mr`.
    unsafe fn reg_mr_dmabuf(
        &self,
        comm: CommRef<'_, Self::SendComm, Self::RecvComm>,
        data: *mut u8,
        size: usize,
        offset: u64,
        fd: i32,
    ) -> Result<Self::MemHandle, NetError> {
        let _ = (comm, data, size, offset, fd);
        Err(NetError::new(
            NetErrorKind::Unsupported,
            format!("the {} backend does not register dma-bufs", self.name()),
        )
        .hint("its ptrSupport lacks NCCL_PTR_DMABUF: register host memory (regMr) instead"))
    }

    /// Releases a registration. No request using it may still be in flight, and the comm it
    /// was registered with must still be open (NCCL's order: a plugin's `deregMr` may use
    /// the comm; `ExternalNet` relies on it).
    fn dereg_mr(&self, mr: Self::MemHandle) -> Result<(), NetError>;

    /// Posts a send of `size` bytes at `data` with `tag`. `Ok(None)` means "cannot post
    /// now" (too many requests in flight): progress others with `test` and retry.
    ///
    /// # Safety
    /// `data..data+size` must be readable, covered by `mr`, and unmodified until `test`
    /// reports the request done or `comm` is closed.
    unsafe fn isend(
        &self,
        comm: &mut Self::SendComm,
        data: *const u8,
        size: usize,
        tag: u32,
        mr: &Self::MemHandle,
    ) -> Result<Option<Self::Request>, NetError>;

    /// Posts the sends `(data, size, tag)` on `comm`, in order, all covered by `mr`, as
    /// `isend` would one by one, stopping at the first the backend cannot take now: the
    /// requests of those posted, in order (fewer than `sends` when it stopped). A backend
    /// may hand them to the network together: the socket backend writes all their frames
    /// with one system call, where each `isend` writes at once. After an error the sends
    /// already posted by this call are lost with their requests: the caller must close
    /// `comm` (which ends them) before reusing their buffers.
    ///
    /// # Safety
    /// As for `isend`, for every send.
    unsafe fn isend_batch(
        &self,
        comm: &mut Self::SendComm,
        sends: &[(*const u8, usize, u32)],
        mr: &Self::MemHandle,
    ) -> Result<Vec<Self::Request>, NetError> {
        let mut posted = Vec::with_capacity(sends.len());
        for &(data, size, tag) in sends {
            // SAFETY: the caller's contract, send by send.
            match unsafe { self.isend(comm, data, size, tag, mr) }? {
                Some(request) => posted.push(request),
                None => break,
            }
        }
        Ok(posted)
    }

    /// Posts a grouped receive of `bufs.len()` (1..=`max_recvs`) buffers; each is filled by
    /// the send whose tag matches. The sends for one group must all be posted before the
    /// sends of the next. `Ok(None)` means "cannot post now".
    ///
    /// # Safety
    /// Every `data..data+size` must be writable, covered by its `mr`, and neither read nor
    /// written by anyone else until `test` reports the request done or `comm` is closed.
    unsafe fn irecv(
        &self,
        comm: &mut Self::RecvComm,
        bufs: &[RecvBuffer<'_, Self::MemHandle>],
    ) -> Result<Option<Self::Request>, NetError>;

    /// Makes received data visible to the GPU (for GPUDirect receives). `Ok(None)` means
    /// there is nothing to flush (host memory); otherwise `test` the returned request.
    ///
    /// # Safety
    /// As for `irecv`: the buffers must stay valid until the flush completes.
    unsafe fn iflush(
        &self,
        comm: &mut Self::RecvComm,
        bufs: &[RecvBuffer<'_, Self::MemHandle>],
    ) -> Result<Option<Self::Request>, NetError>;

    /// Progresses `request`: `Ok(Some(sizes))` once it is done (its buffers are then free
    /// again), `Ok(None)` if not yet. An error (peer gone, size mismatch) ends the request.
    /// Testing a request again after it completed is an error.
    fn test(&self, request: &mut Self::Request) -> Result<Option<Completion>, NetError>;

    /// Closes a send comm; requests still in flight fail.
    fn close_send(&self, comm: Self::SendComm) -> Result<(), NetError>;
    /// Closes a receive comm; requests still in flight fail.
    fn close_recv(&self, comm: Self::RecvComm) -> Result<(), NetError>;
    /// Stops listening; connections not yet accepted are dropped.
    fn close_listen(&self, comm: Self::ListenComm) -> Result<(), NetError>;
}
