//! The adapter: any [`Net`] backend behind NCCL's `void*` objects.
//!
//! NCCL holds plugin objects as `void*` and hands them back later, so every object the
//! adapter gives out is a `Box` whose first field is a tag naming its kind (listen, send,
//! receive, registration, request). The tag is checked before the object is used, so a
//! receive comm passed to `closeSend`, a request tested after it completed and was freed (in
//! most cases), or NULL becomes an error message instead of undefined behaviour in a
//! backend. Freed objects get their tag overwritten first.
//!
//! [`PluginNet`] is the object-safe face of [`Adapter<N>`]: the C entry points hold one
//! `&'static dyn PluginNet` chosen at `init`, so adding a backend (the mesh backend) is one
//! match arm in [`crate::backend`], and the entry points never change.
//!
//! `connect` state: NCCL calls `connect` again with the same handle buffer until it returns
//! a comm, and the `Net` trait keeps a [`Net::Connecting`] between those calls. The adapter
//! keeps it in a map keyed by the buffer's address, together with a copy of the handle bytes:
//! a call with other bytes at that address (a new connect reusing NCCL's memory) starts over.
//! The handle bytes themselves are never written, so a backend may use all 128 of them.

use std::collections::HashMap;
use std::ffi::{CString, c_void};
use std::fmt;
use std::ptr::NonNull;
use std::sync::{Mutex, PoisonError};

use weft_net::{
    CommRef, Completion, NET_HANDLE_MAXSIZE, NET_MAX_RECVS, Net, NetError, NetErrorKind, NetHandle,
    NetProperties, PtrKind, RecvBuffer,
};

/// One device's properties, with the C strings NCCL keeps pointers to (they live as long as
/// the backend, i.e. the process).
#[derive(Debug)]
pub struct DeviceInfo {
    /// The device name.
    pub name: CString,
    /// The sysfs PCI path, if the device has one.
    pub pci_path: Option<CString>,
    /// Everything else.
    pub props: NetProperties,
}

/// One buffer of a grouped receive or flush, as NCCL passed it.
#[derive(Debug, Clone, Copy)]
pub struct RawRecv {
    /// Where the data goes.
    pub data: *mut u8,
    /// Capacity in bytes.
    pub size: usize,
    /// The tag a send must carry.
    pub tag: u32,
    /// The registration (`mhandle`) from `regMr`.
    pub mr: *mut c_void,
}

impl Default for RawRecv {
    fn default() -> Self {
        RawRecv {
            data: std::ptr::null_mut(),
            size: 0,
            tag: 0,
            mr: std::ptr::null_mut(),
        }
    }
}

/// A plugin object handed to NCCL as `void*` (never NULL).
pub type Obj = NonNull<c_void>;

/// A `Net` backend as the C entry points see it: raw objects in, raw objects out.
///
/// The `unsafe fn`s take pointers NCCL got from this same adapter; their contract is the
/// plugin ABI's: objects are not used after they were closed or completed, and the buffers
/// stay valid until their requests complete.
pub trait PluginNet: Send + Sync + fmt::Debug {
    /// The backend's name (`Socket`).
    fn backend(&self) -> &str;
    /// A line about the backend's configuration, for the init message.
    fn describe(&self) -> &str;
    /// How many devices.
    fn devices(&self) -> usize;
    /// Device `dev`'s properties.
    fn device(&self, dev: usize) -> Result<&DeviceInfo, NetError>;
    /// Listens on `dev`: fills `handle`, returns the listen comm.
    fn listen(&self, dev: usize, handle: &mut [u8; NET_HANDLE_MAXSIZE]) -> Result<Obj, NetError>;
    /// Polls a connect to `handle` (NCCL's buffer at address `key`): `None` = not yet.
    fn connect(
        &self,
        dev: usize,
        handle: &[u8; NET_HANDLE_MAXSIZE],
        key: usize,
    ) -> Result<Option<Obj>, NetError>;
    /// Polls `accept` on a listen comm: `None` = not yet.
    ///
    /// # Safety
    /// `listen` is NULL or came from [`Self::listen`] and was not closed.
    unsafe fn accept(&self, listen: *mut c_void) -> Result<Option<Obj>, NetError>;
    /// Registers memory with a send or receive comm.
    ///
    /// # Safety
    /// `comm` is NULL or a live comm of this adapter; the memory stays valid until
    /// `dereg_mr`.
    unsafe fn reg_mr(
        &self,
        comm: *mut c_void,
        data: *mut u8,
        size: usize,
        kind: PtrKind,
    ) -> Result<Obj, NetError>;
    /// Registers `size` bytes of dma-buf `fd` from `offset`, seen at `data`, with a send
    /// or receive comm; backends without dma-buf support refuse.
    ///
    /// # Safety
    /// `comm` is NULL or a live comm of this adapter; `fd` is open during the call and its
    /// memory stays allocated until `dereg_mr`.
    unsafe fn reg_mr_dmabuf(
        &self,
        comm: *mut c_void,
        data: *mut u8,
        size: usize,
        offset: u64,
        fd: i32,
    ) -> Result<Obj, NetError>;
    /// Releases a registration.
    ///
    /// # Safety
    /// `mr` is NULL or came from [`Self::reg_mr`] and was not released.
    unsafe fn dereg_mr(&self, mr: *mut c_void) -> Result<(), NetError>;
    /// Posts a send: `None` = cannot post now.
    ///
    /// # Safety
    /// `comm` and `mr` are live objects of this adapter (or NULL); the data stays valid and
    /// unchanged until the request completes.
    unsafe fn isend(
        &self,
        comm: *mut c_void,
        data: *const u8,
        size: usize,
        tag: u32,
        mr: *mut c_void,
    ) -> Result<Option<Obj>, NetError>;
    /// Posts a grouped receive: `None` = cannot post now.
    ///
    /// # Safety
    /// As for `isend`, for every buffer (writable, used by nobody else until completion).
    unsafe fn irecv(&self, comm: *mut c_void, bufs: &[RawRecv]) -> Result<Option<Obj>, NetError>;
    /// Flushes received data: `None` = nothing to wait for.
    ///
    /// # Safety
    /// As for `irecv`.
    unsafe fn iflush(&self, comm: *mut c_void, bufs: &[RawRecv]) -> Result<Option<Obj>, NetError>;
    /// Tests a request: `Some` = done (the request is freed), `None` = not yet; an error
    /// also frees it.
    ///
    /// # Safety
    /// `request` is NULL or a request of this adapter that has not completed yet.
    unsafe fn test(&self, request: *mut c_void) -> Result<Option<Completion>, NetError>;
    /// Closes a send comm.
    ///
    /// # Safety
    /// `comm` is NULL or a send comm of this adapter that was not closed.
    unsafe fn close_send(&self, comm: *mut c_void) -> Result<(), NetError>;
    /// Closes a receive comm.
    ///
    /// # Safety
    /// `comm` is NULL or a receive comm of this adapter that was not closed.
    unsafe fn close_recv(&self, comm: *mut c_void) -> Result<(), NetError>;
    /// Closes a listen comm.
    ///
    /// # Safety
    /// `comm` is NULL or a listen comm of this adapter that was not closed.
    unsafe fn close_listen(&self, comm: *mut c_void) -> Result<(), NetError>;
}

/// What kind of object a tag says a pointer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u64)]
pub(crate) enum Kind {
    Listen = u64::from_be_bytes(*b"weftLSTN"),
    Send = u64::from_be_bytes(*b"weftSEND"),
    Recv = u64::from_be_bytes(*b"weftRECV"),
    Mr = u64::from_be_bytes(*b"weftMEMR"),
    Request = u64::from_be_bytes(*b"weftRQST"),
    /// A v11 `init` context (made and freed by the entry points).
    Context = u64::from_be_bytes(*b"weftCTXT"),
}

const FREED: u64 = u64::from_be_bytes(*b"weftFREE");

impl Kind {
    fn what(self) -> &'static str {
        match self {
            Kind::Listen => "listen comm",
            Kind::Send => "send comm",
            Kind::Recv => "receive comm",
            Kind::Mr => "memory handle",
            Kind::Request => "request",
            Kind::Context => "init context",
        }
    }
    fn from_tag(tag: u64) -> Option<Kind> {
        [
            Kind::Listen,
            Kind::Send,
            Kind::Recv,
            Kind::Mr,
            Kind::Request,
            Kind::Context,
        ]
        .into_iter()
        .find(|k| *k as u64 == tag)
    }
}

/// A plugin object: the tag first (at offset 0 whatever `T` is), then the value.
#[repr(C)]
struct Tagged<T> {
    tag: u64,
    value: T,
}

pub(crate) fn into_obj<T>(kind: Kind, value: T) -> Obj {
    let raw = Box::into_raw(Box::new(Tagged {
        tag: kind as u64,
        value,
    }));
    // Box::into_raw never returns NULL.
    NonNull::new(raw.cast::<c_void>()).unwrap_or(NonNull::dangling())
}

/// Reads the tag of a plugin object, refusing NULL and misaligned pointers.
///
/// # Safety
/// `ptr` is NULL, misaligned, or points at 8 readable bytes (a plugin object, or one that
/// was freed but whose memory is still mapped: a use after close is then caught in most
/// cases).
unsafe fn read_tag(ptr: *mut c_void, want: Kind) -> Result<u64, NetError> {
    if ptr.is_null() {
        return Err(NetError::new(
            NetErrorKind::InvalidArgument,
            format!("NULL {}", want.what()),
        ));
    }
    if !ptr.cast::<u64>().is_aligned() {
        return Err(NetError::new(
            NetErrorKind::InvalidArgument,
            format!("{ptr:p} is not a weft {} (misaligned)", want.what()),
        ));
    }
    // SAFETY: non-null and aligned; readable per this function's contract.
    Ok(unsafe { ptr.cast::<u64>().read() })
}

fn wrong_kind(ptr: *mut c_void, want: Kind, tag: u64) -> NetError {
    let found = match Kind::from_tag(tag) {
        Some(k) => format!("a weft {}", k.what()),
        None if tag == FREED => "an object that was already closed or completed".to_string(),
        None => "not a weft object".to_string(),
    };
    NetError::new(
        NetErrorKind::InvalidArgument,
        format!("{ptr:p} passed as a {} is {found}", want.what()),
    )
}

/// The send or receive comm behind `comm`, for a registration by `call` (`regMr`,
/// `regMrDmaBuf`).
///
/// # Safety
/// `comm` is NULL or a live comm of this adapter, unused by anyone else during `'a`.
unsafe fn comm_ref<'a, N: Net>(
    comm: *mut c_void,
    call: &str,
) -> Result<CommRef<'a, N::SendComm, N::RecvComm>, NetError> {
    if comm.is_null() {
        return Err(NetError::new(
            NetErrorKind::InvalidArgument,
            format!("NULL comm passed to {call} (needs a send or a receive comm)"),
        ));
    }
    // SAFETY: `comm` is not NULL (checked above) and is a live comm of this adapter
    // (this function's # Safety), so 8 readable bytes.
    let tag = unsafe { read_tag(comm, Kind::Send)? };
    let comm = match Kind::from_tag(tag) {
        // SAFETY: the tag says what the object is; registration only reads the comm.
        Some(Kind::Send) => CommRef::Send(unsafe { borrow::<N::SendComm>(comm, Kind::Send)? }),
        // SAFETY: as above.
        Some(Kind::Recv) => CommRef::Recv(unsafe { borrow::<N::RecvComm>(comm, Kind::Recv)? }),
        _ => {
            return Err(NetError::new(
                NetErrorKind::InvalidArgument,
                format!("{comm:p} passed to {call} is neither a send nor a receive comm"),
            ));
        }
    };
    Ok(comm)
}

/// Borrows the value of a plugin object of kind `want`.
///
/// # Safety
/// As for [`read_tag`]; if the tag matches, `ptr` came from `into_obj::<T>(want, ..)`, is
/// still live, and nobody else uses it during `'a`.
unsafe fn borrow<'a, T>(ptr: *mut c_void, want: Kind) -> Result<&'a mut T, NetError> {
    // SAFETY: `ptr` is NULL, misaligned or 8 readable bytes: this function's # Safety includes
    // read_tag's.
    let tag = unsafe { read_tag(ptr, want)? };
    if tag != want as u64 {
        return Err(wrong_kind(ptr, want, tag));
    }
    // SAFETY: the tag says this is a live Tagged<T> made by into_obj (contract).
    Ok(unsafe { &mut (*ptr.cast::<Tagged<T>>()).value })
}

/// Takes back ownership of a plugin object of kind `want`, marking its memory freed.
///
/// # Safety
/// As for [`borrow`]; the pointer is not used again.
pub(crate) unsafe fn take<T>(ptr: *mut c_void, want: Kind) -> Result<T, NetError> {
    // SAFETY: `ptr` is NULL, misaligned or 8 readable bytes: this function's # Safety includes
    // read_tag's.
    let tag = unsafe { read_tag(ptr, want)? };
    if tag != want as u64 {
        return Err(wrong_kind(ptr, want, tag));
    }
    let raw = ptr.cast::<Tagged<T>>();
    // Mark it before freeing: a double close that still finds the memory mapped then reports
    // "already closed" (best effort, not a guarantee). Volatile, or the store to memory about
    // to be freed would be optimised away.
    // SAFETY: a live, aligned Tagged<T> (contract), whose tag is at offset 0 (repr(C)).
    unsafe { raw.cast::<u64>().write_volatile(FREED) };
    // SAFETY: it came from Box::into_raw (contract); we own it from here on.
    let boxed = unsafe { Box::from_raw(raw) };
    Ok(boxed.value)
}

#[derive(Debug)]
struct Pending<C> {
    handle: [u8; NET_HANDLE_MAXSIZE],
    dev: usize,
    state: Option<C>,
}

/// Any [`Net`] backend as a [`PluginNet`].
pub struct Adapter<N: Net> {
    net: N,
    describe: String,
    devices: Vec<DeviceInfo>,
    connecting: Mutex<HashMap<usize, Pending<N::Connecting>>>,
}

impl<N: Net> fmt::Debug for Adapter<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Adapter")
            .field("backend", &self.net.name())
            .field("devices", &self.devices)
            .finish_non_exhaustive()
    }
}

fn c_string(s: &str) -> CString {
    // Names come from the kernel and never hold NUL; if one did, cut it there.
    let bytes: Vec<u8> = s.bytes().take_while(|&b| b != 0).collect();
    CString::new(bytes).unwrap_or_default()
}

impl<N: Net> Adapter<N> {
    /// Wraps `net`, reading every device's properties once (NCCL keeps the name pointers).
    /// `describe` is a line about the backend's configuration for the init message.
    pub fn new(net: N, describe: String) -> Result<Self, NetError> {
        let n = net.devices();
        if n == 0 {
            return Err(NetError::new(
                NetErrorKind::InvalidArgument,
                format!("the {} backend found no device", net.name()),
            ));
        }
        let mut devices = Vec::with_capacity(n);
        for dev in 0..n {
            let props = net.properties(dev)?;
            devices.push(DeviceInfo {
                name: c_string(&props.name),
                pci_path: props.pci_path.as_deref().map(c_string),
                props,
            });
        }
        Ok(Adapter {
            net,
            describe,
            devices,
            connecting: Mutex::new(HashMap::new()),
        })
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, HashMap<usize, Pending<N::Connecting>>> {
        self.connecting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// # Safety
    /// Every `mr` in `bufs` is NULL or a live registration of this adapter.
    unsafe fn recv_buffers<'a>(
        &self,
        bufs: &[RawRecv],
        out: &mut Vec<RecvBuffer<'a, N::MemHandle>>,
    ) -> Result<(), NetError> {
        if bufs.is_empty() || bufs.len() > NET_MAX_RECVS {
            return Err(NetError::new(
                NetErrorKind::InvalidArgument,
                format!(
                    "{} buffers in one grouped receive: weft takes 1 to {NET_MAX_RECVS}",
                    bufs.len()
                ),
            ));
        }
        for (i, b) in bufs.iter().enumerate() {
            // SAFETY: each `mr` is NULL or a live registration of this adapter (recv_buffers'
            // # Safety); they are only read.
            let mr: &N::MemHandle = unsafe { borrow(b.mr, Kind::Mr) }.map_err(|e| {
                NetError::new(
                    NetErrorKind::InvalidArgument,
                    format!("receive buffer {i} of {}: bad memory handle", bufs.len()),
                )
                .cause(e)
            })?;
            out.push(RecvBuffer {
                data: b.data,
                size: b.size,
                tag: b.tag,
                mr,
            });
        }
        Ok(())
    }
}

impl<N: Net> PluginNet for Adapter<N> {
    fn backend(&self) -> &str {
        self.net.name()
    }

    fn describe(&self) -> &str {
        &self.describe
    }

    fn devices(&self) -> usize {
        self.devices.len()
    }

    fn device(&self, dev: usize) -> Result<&DeviceInfo, NetError> {
        self.devices.get(dev).ok_or_else(|| {
            NetError::new(
                NetErrorKind::InvalidArgument,
                format!(
                    "device {dev} does not exist (the {} backend has {})",
                    self.net.name(),
                    self.devices.len()
                ),
            )
        })
    }

    fn listen(&self, dev: usize, handle: &mut [u8; NET_HANDLE_MAXSIZE]) -> Result<Obj, NetError> {
        self.device(dev)?;
        let (h, listen) = self.net.listen(dev)?;
        *handle = h.0;
        Ok(into_obj(Kind::Listen, listen))
    }

    fn connect(
        &self,
        dev: usize,
        handle: &[u8; NET_HANDLE_MAXSIZE],
        key: usize,
    ) -> Result<Option<Obj>, NetError> {
        self.device(dev)?;
        let mut state = match self.pending().remove(&key) {
            Some(p) if p.handle == *handle && p.dev == dev => p.state,
            // Other bytes at this address: an earlier connect was abandoned; start over
            // (dropping the old state closes its sockets).
            _ => None,
        };
        match self.net.connect(dev, &NetHandle(*handle), &mut state)? {
            Some(comm) => Ok(Some(into_obj(Kind::Send, comm))),
            None => {
                self.pending().insert(
                    key,
                    Pending {
                        handle: *handle,
                        dev,
                        state,
                    },
                );
                Ok(None)
            }
        }
    }

    unsafe fn accept(&self, listen: *mut c_void) -> Result<Option<Obj>, NetError> {
        // SAFETY: `listen` is NULL or an unclosed listen comm of this adapter (accept's # Safety).
        let listen: &mut N::ListenComm = unsafe { borrow(listen, Kind::Listen)? };
        Ok(self
            .net
            .accept(listen)?
            .map(|comm| into_obj(Kind::Recv, comm)))
    }

    unsafe fn reg_mr(
        &self,
        comm: *mut c_void,
        data: *mut u8,
        size: usize,
        kind: PtrKind,
    ) -> Result<Obj, NetError> {
        // SAFETY: reg_mr's # Safety is comm_ref's.
        let comm = unsafe { comm_ref::<N>(comm, "regMr")? };
        // SAFETY: NCCL keeps registered memory valid until deregMr (contract).
        let mr = unsafe { self.net.reg_mr(comm, data, size, kind)? };
        Ok(into_obj(Kind::Mr, mr))
    }

    unsafe fn reg_mr_dmabuf(
        &self,
        comm: *mut c_void,
        data: *mut u8,
        size: usize,
        offset: u64,
        fd: i32,
    ) -> Result<Obj, NetError> {
        // SAFETY: reg_mr_dmabuf's # Safety is comm_ref's.
        let comm = unsafe { comm_ref::<N>(comm, "regMrDmaBuf")? };
        // SAFETY: NCCL keeps the dma-buf's memory allocated until deregMr (contract).
        let mr = unsafe { self.net.reg_mr_dmabuf(comm, data, size, offset, fd)? };
        Ok(into_obj(Kind::Mr, mr))
    }

    unsafe fn dereg_mr(&self, mr: *mut c_void) -> Result<(), NetError> {
        // SAFETY: `mr` is NULL or an unreleased registration of this adapter (dereg_mr's # Safety);
        // not used again.
        let mr: N::MemHandle = unsafe { take(mr, Kind::Mr)? };
        self.net.dereg_mr(mr)
    }

    unsafe fn isend(
        &self,
        comm: *mut c_void,
        data: *const u8,
        size: usize,
        tag: u32,
        mr: *mut c_void,
    ) -> Result<Option<Obj>, NetError> {
        // SAFETY: `comm` is NULL or a live send comm of this adapter (isend's # Safety).
        let comm: &mut N::SendComm = unsafe { borrow(comm, Kind::Send)? };
        // SAFETY: `mr` is NULL or a live registration of this adapter (isend's # Safety).
        let mr: &N::MemHandle = unsafe { borrow(mr, Kind::Mr)? };
        // SAFETY: the data stays valid until the request completes (contract).
        let req = unsafe { self.net.isend(comm, data, size, tag, mr)? };
        Ok(req.map(|r| into_obj(Kind::Request, r)))
    }

    unsafe fn irecv(&self, comm: *mut c_void, bufs: &[RawRecv]) -> Result<Option<Obj>, NetError> {
        // SAFETY: `comm` is NULL or a live receive comm of this adapter (irecv's # Safety).
        let comm: &mut N::RecvComm = unsafe { borrow(comm, Kind::Recv)? };
        let mut rb = Vec::with_capacity(bufs.len());
        // SAFETY: every buffer's `mr` is NULL or a live registration (irecv's # Safety).
        unsafe { self.recv_buffers(bufs, &mut rb)? };
        // SAFETY: the buffers stay valid and unused by others until the request completes
        // (irecv's # Safety).
        let req = unsafe { self.net.irecv(comm, &rb)? };
        Ok(req.map(|r| into_obj(Kind::Request, r)))
    }

    unsafe fn iflush(&self, comm: *mut c_void, bufs: &[RawRecv]) -> Result<Option<Obj>, NetError> {
        // SAFETY: `comm` is NULL or a live receive comm of this adapter (iflush's # Safety).
        let comm: &mut N::RecvComm = unsafe { borrow(comm, Kind::Recv)? };
        let mut rb = Vec::with_capacity(bufs.len());
        // SAFETY: every buffer's `mr` is NULL or a live registration (iflush's # Safety).
        unsafe { self.recv_buffers(bufs, &mut rb)? };
        // SAFETY: as for irecv (iflush's # Safety is irecv's).
        let req = unsafe { self.net.iflush(comm, &rb)? };
        Ok(req.map(|r| into_obj(Kind::Request, r)))
    }

    unsafe fn test(&self, request: *mut c_void) -> Result<Option<Completion>, NetError> {
        // SAFETY: `request` is NULL or a pending request of this adapter (test's # Safety).
        let req: &mut N::Request = unsafe { borrow(request, Kind::Request)? };
        let result = self.net.test(req);
        if !matches!(result, Ok(None)) {
            // Done or failed: NCCL never tests it again, so free it now.
            // SAFETY: checked above; `req` is not used after this.
            drop(unsafe { take::<N::Request>(request, Kind::Request) });
        }
        result
    }

    unsafe fn close_send(&self, comm: *mut c_void) -> Result<(), NetError> {
        // SAFETY: `comm` is NULL or an unclosed send comm of this adapter (close_send's # Safety);
        // not used again.
        let comm: N::SendComm = unsafe { take(comm, Kind::Send)? };
        self.net.close_send(comm)
    }

    unsafe fn close_recv(&self, comm: *mut c_void) -> Result<(), NetError> {
        // SAFETY: `comm` is NULL or an unclosed receive comm of this adapter (close_recv's #
        // Safety); not used again.
        let comm: N::RecvComm = unsafe { take(comm, Kind::Recv)? };
        self.net.close_recv(comm)
    }

    unsafe fn close_listen(&self, comm: *mut c_void) -> Result<(), NetError> {
        // SAFETY: `comm` is NULL or an unclosed listen comm of this adapter (close_listen's #
        // Safety); not used again.
        let comm: N::ListenComm = unsafe { take(comm, Kind::Listen)? };
        self.net.close_listen(comm)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};
    use weft_net::socket::{SocketConfig, SocketNet};

    fn adapter() -> Adapter<SocketNet> {
        let net = SocketNet::new(SocketConfig {
            ifname: Some("=lo".into()),
            threads: 2,
            ..SocketConfig::default()
        })
        .unwrap();
        Adapter::new(net, "test".into()).unwrap()
    }

    #[test]
    // One SAFETY argument covers the whole sequence of calls on this adapter's objects.
    #[allow(clippy::multiple_unsafe_ops_per_block)]
    fn objects_are_checked_by_kind() {
        let a = adapter();
        assert_eq!(a.devices(), 1);
        assert_eq!(a.device(0).unwrap().name.to_str().unwrap(), "lo");
        assert!(a.device(1).unwrap_err().to_string().contains("device 1"));

        let mut handle = [0u8; NET_HANDLE_MAXSIZE];
        let listen = a.listen(0, &mut handle).unwrap();
        let key = handle.as_ptr() as usize;
        let start = Instant::now();
        let (mut send, mut recv) = (None, None);
        while send.is_none() || recv.is_none() {
            assert!(start.elapsed() < Duration::from_secs(30), "handshake hangs");
            if send.is_none() {
                send = a.connect(0, &handle, key).unwrap();
            }
            if recv.is_none() {
                // SAFETY: a live listen comm of this adapter.
                recv = unsafe { a.accept(listen.as_ptr()) }.unwrap();
            }
        }
        let (send, recv) = (send.unwrap().as_ptr(), recv.unwrap().as_ptr());
        assert!(
            a.pending().is_empty(),
            "connect state is dropped once connected"
        );

        // A receive comm where a send comm belongs, a listen comm as a request, NULL: all
        // refused with the kinds named, nothing freed.
        // SAFETY: every pointer is a live object of this adapter or NULL.
        unsafe {
            let e = a.close_send(recv).unwrap_err();
            assert!(e.to_string().contains("is a weft receive comm"), "{e}");
            let e = a.test(listen.as_ptr()).unwrap_err();
            assert!(e.to_string().contains("passed as a request"), "{e}");
            let e = a.close_recv(std::ptr::null_mut()).unwrap_err();
            assert!(e.to_string().contains("NULL receive comm"), "{e}");
            let e = a
                .reg_mr(listen.as_ptr(), std::ptr::null_mut(), 0, PtrKind::Host)
                .unwrap_err();
            assert!(
                e.to_string().contains("neither a send nor a receive"),
                "{e}"
            );
            let mut buf = [0u8; 16];
            let e = a
                .reg_mr(send, buf.as_mut_ptr(), buf.len(), PtrKind::Cuda)
                .unwrap_err();
            assert_eq!(e.kind(), NetErrorKind::Unsupported, "{e}");
            let mr = a
                .reg_mr(recv, buf.as_mut_ptr(), buf.len(), PtrKind::Host)
                .unwrap();
            // A memory handle is not a send comm.
            assert!(
                a.isend(mr.as_ptr(), buf.as_ptr(), 1, 0, mr.as_ptr())
                    .is_err()
            );
            a.dereg_mr(mr.as_ptr()).unwrap();
            a.close_listen(listen.as_ptr()).unwrap();
            a.close_send(send).unwrap();
            a.close_recv(recv).unwrap();
        }
    }

    #[test]
    fn abandoned_connect_state_is_replaced() {
        let a = adapter();
        let mut first = [0u8; NET_HANDLE_MAXSIZE];
        let listen = a.listen(0, &mut first).unwrap();
        let key = 0x1000;
        assert!(a.connect(0, &first, key).unwrap().is_none());
        assert_eq!(a.pending().len(), 1);
        // Other bytes at the same address: the old state goes, the garbage is refused.
        let mut garbage = first;
        garbage[0] ^= 0xff;
        assert!(a.connect(0, &garbage, key).is_err());
        assert!(a.pending().is_empty());
        // SAFETY: a live listen comm.
        unsafe { a.close_listen(listen.as_ptr()) }.unwrap();
    }
}
