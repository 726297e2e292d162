//! [`AnyNet`]: one `Net` type over whichever backend this process chose at run time, so
//! that the communicator and the NET transport (generic over one `Net`) need not know the
//! choice (weft's socket, verbs and mesh backends, or an NCCL net plugin it loaded). Each
//! associated type is an enum of the backends' own; a comm of one backend
//! handed to another is an `InvalidArgument` error, never a panic.

use crate::external::{
    ExternalConnecting, ExternalListenComm, ExternalMemHandle, ExternalNet, ExternalRecvComm,
    ExternalRequest, ExternalSendComm,
};
use crate::ib::{
    IbConnecting, IbListenComm, IbMemHandle, IbNet, IbRecvComm, IbRequest, IbSendComm,
};
use crate::mesh::{
    MeshConnecting, MeshListenComm, MeshMemHandle, MeshNet, MeshRecvComm, MeshRequest, MeshSendComm,
};
use crate::socket::{
    SocketConnecting, SocketListenComm, SocketMemHandle, SocketNet, SocketRecvComm, SocketRequest,
    SocketSendComm,
};
use crate::{
    CommRef, Completion, Net, NetError, NetErrorKind, NetHandle, NetProperties, PtrKind, RecvBuffer,
};

/// A backend chosen at run time.
// One per process: the size of its largest backend costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum AnyNet {
    /// TCP sockets.
    Socket(SocketNet),
    /// Verbs (InfiniBand, RoCE).
    Ib(IbNet),
    /// A multi-subnet mesh, over verbs or sockets per link.
    Mesh(MeshNet),
    /// An NCCL net plugin loaded with `NCCL_NET_PLUGIN`.
    External(ExternalNet),
}

macro_rules! either {
    ($(#[$doc:meta])* $name:ident { $socket:ty, $ib:ty, $mesh:ty, $external:ty }) => {
        $(#[$doc])*
        #[derive(Debug)]
        pub enum $name {
            /// Of the socket backend.
            Socket($socket),
            /// Of the verbs backend.
            Ib($ib),
            /// Of the mesh backend.
            Mesh($mesh),
            /// Of an external plugin.
            External($external),
        }
    };
}

either!(
    /// A listen comm of any backend.
    AnyListenComm { SocketListenComm, IbListenComm, MeshListenComm, ExternalListenComm }
);
either!(
    /// A send comm of any backend.
    AnySendComm { SocketSendComm, IbSendComm, MeshSendComm, ExternalSendComm }
);
either!(
    /// A receive comm of any backend.
    AnyRecvComm { SocketRecvComm, IbRecvComm, MeshRecvComm, ExternalRecvComm }
);
/// A connect in progress on any backend.
#[derive(Debug)]
pub enum AnyConnecting {
    /// Of the socket backend.
    Socket(SocketConnecting),
    /// Of the verbs backend.
    Ib(IbConnecting),
    /// Of the mesh backend.
    Mesh(MeshConnecting),
    /// Of an external plugin.
    External(ExternalConnecting),
}
either!(
    /// A registration of any backend.
    AnyMemHandle { SocketMemHandle, IbMemHandle, MeshMemHandle, ExternalMemHandle }
);
either!(
    /// A request of any backend.
    AnyRequest { SocketRequest, IbRequest, MeshRequest, ExternalRequest }
);

fn mixed(what: &str) -> NetError {
    NetError::new(
        NetErrorKind::InvalidArgument,
        format!("{what} of one NET backend handed to another (socket, verbs, mesh or a plugin)"),
    )
}

impl Net for AnyNet {
    type ListenComm = AnyListenComm;
    type SendComm = AnySendComm;
    type RecvComm = AnyRecvComm;
    type Connecting = AnyConnecting;
    type MemHandle = AnyMemHandle;
    type Request = AnyRequest;

    fn name(&self) -> &str {
        match self {
            AnyNet::Socket(n) => n.name(),
            AnyNet::Ib(n) => n.name(),
            AnyNet::Mesh(n) => n.name(),
            AnyNet::External(n) => n.name(),
        }
    }

    fn devices(&self) -> usize {
        match self {
            AnyNet::Socket(n) => n.devices(),
            AnyNet::Ib(n) => n.devices(),
            AnyNet::Mesh(n) => n.devices(),
            AnyNet::External(n) => n.devices(),
        }
    }

    fn properties(&self, dev: usize) -> Result<NetProperties, NetError> {
        match self {
            AnyNet::Socket(n) => n.properties(dev),
            AnyNet::Ib(n) => n.properties(dev),
            AnyNet::Mesh(n) => n.properties(dev),
            AnyNet::External(n) => n.properties(dev),
        }
    }

    fn listen(&self, dev: usize) -> Result<(NetHandle, AnyListenComm), NetError> {
        Ok(match self {
            AnyNet::Socket(n) => {
                let (h, l) = n.listen(dev)?;
                (h, AnyListenComm::Socket(l))
            }
            AnyNet::Ib(n) => {
                let (h, l) = n.listen(dev)?;
                (h, AnyListenComm::Ib(l))
            }
            AnyNet::Mesh(n) => {
                let (h, l) = n.listen(dev)?;
                (h, AnyListenComm::Mesh(l))
            }
            AnyNet::External(n) => {
                let (h, l) = n.listen(dev)?;
                (h, AnyListenComm::External(l))
            }
        })
    }

    fn connect(
        &self,
        dev: usize,
        handle: &NetHandle,
        state: &mut Option<AnyConnecting>,
    ) -> Result<Option<AnySendComm>, NetError> {
        match self {
            AnyNet::Socket(n) => {
                let mut inner = match state.take() {
                    None => None,
                    Some(AnyConnecting::Socket(c)) => Some(c),
                    Some(_) => return Err(mixed("a connect state")),
                };
                let r = n.connect(dev, handle, &mut inner);
                *state = inner.map(AnyConnecting::Socket);
                Ok(r?.map(AnySendComm::Socket))
            }
            AnyNet::Ib(n) => {
                let mut inner = match state.take() {
                    None => None,
                    Some(AnyConnecting::Ib(c)) => Some(c),
                    Some(_) => return Err(mixed("a connect state")),
                };
                let r = n.connect(dev, handle, &mut inner);
                *state = inner.map(AnyConnecting::Ib);
                Ok(r?.map(AnySendComm::Ib))
            }
            AnyNet::Mesh(n) => {
                let mut inner = match state.take() {
                    None => None,
                    Some(AnyConnecting::Mesh(c)) => Some(c),
                    Some(_) => return Err(mixed("a connect state")),
                };
                let r = n.connect(dev, handle, &mut inner);
                *state = inner.map(AnyConnecting::Mesh);
                Ok(r?.map(AnySendComm::Mesh))
            }
            AnyNet::External(n) => {
                let mut inner = match state.take() {
                    None => None,
                    Some(AnyConnecting::External(c)) => Some(c),
                    Some(_) => return Err(mixed("a connect state")),
                };
                let r = n.connect(dev, handle, &mut inner);
                *state = inner.map(AnyConnecting::External);
                Ok(r?.map(AnySendComm::External))
            }
        }
    }

    fn accept(&self, listen: &mut AnyListenComm) -> Result<Option<AnyRecvComm>, NetError> {
        match (self, listen) {
            (AnyNet::Socket(n), AnyListenComm::Socket(l)) => {
                Ok(n.accept(l)?.map(AnyRecvComm::Socket))
            }
            (AnyNet::Ib(n), AnyListenComm::Ib(l)) => Ok(n.accept(l)?.map(AnyRecvComm::Ib)),
            (AnyNet::Mesh(n), AnyListenComm::Mesh(l)) => Ok(n.accept(l)?.map(AnyRecvComm::Mesh)),
            (AnyNet::External(n), AnyListenComm::External(l)) => {
                Ok(n.accept(l)?.map(AnyRecvComm::External))
            }
            _ => Err(mixed("a listen comm")),
        }
    }

    unsafe fn reg_mr(
        &self,
        comm: CommRef<'_, AnySendComm, AnyRecvComm>,
        data: *mut u8,
        size: usize,
        kind: PtrKind,
    ) -> Result<AnyMemHandle, NetError> {
        // SAFETY (all arms): the caller's contract for `data` is passed on unchanged.
        match (self, comm) {
            (AnyNet::Socket(n), CommRef::Send(AnySendComm::Socket(c))) => {
                // SAFETY: see above.
                unsafe { n.reg_mr(CommRef::Send(c), data, size, kind) }.map(AnyMemHandle::Socket)
            }
            (AnyNet::Socket(n), CommRef::Recv(AnyRecvComm::Socket(c))) => {
                // SAFETY: see above.
                unsafe { n.reg_mr(CommRef::Recv(c), data, size, kind) }.map(AnyMemHandle::Socket)
            }
            (AnyNet::Ib(n), CommRef::Send(AnySendComm::Ib(c))) => {
                // SAFETY: see above.
                unsafe { n.reg_mr(CommRef::Send(c), data, size, kind) }.map(AnyMemHandle::Ib)
            }
            (AnyNet::Mesh(n), CommRef::Send(AnySendComm::Mesh(c))) => {
                // SAFETY: see above.
                unsafe { n.reg_mr(CommRef::Send(c), data, size, kind) }.map(AnyMemHandle::Mesh)
            }
            (AnyNet::Ib(n), CommRef::Recv(AnyRecvComm::Ib(c))) => {
                // SAFETY: see above.
                unsafe { n.reg_mr(CommRef::Recv(c), data, size, kind) }.map(AnyMemHandle::Ib)
            }
            (AnyNet::Mesh(n), CommRef::Recv(AnyRecvComm::Mesh(c))) => {
                // SAFETY: see above.
                unsafe { n.reg_mr(CommRef::Recv(c), data, size, kind) }.map(AnyMemHandle::Mesh)
            }
            (AnyNet::External(n), CommRef::Send(AnySendComm::External(c))) => {
                // SAFETY: see above.
                unsafe { n.reg_mr(CommRef::Send(c), data, size, kind) }.map(AnyMemHandle::External)
            }
            (AnyNet::External(n), CommRef::Recv(AnyRecvComm::External(c))) => {
                // SAFETY: see above.
                unsafe { n.reg_mr(CommRef::Recv(c), data, size, kind) }.map(AnyMemHandle::External)
            }
            _ => Err(mixed("a comm")),
        }
    }

    unsafe fn reg_mr_dmabuf(
        &self,
        comm: CommRef<'_, AnySendComm, AnyRecvComm>,
        data: *mut u8,
        size: usize,
        offset: u64,
        fd: i32,
    ) -> Result<AnyMemHandle, NetError> {
        // Only the verbs backend registers dma-bufs; the others refuse in their own words.
        match (self, comm) {
            (AnyNet::Ib(n), CommRef::Send(AnySendComm::Ib(c))) => {
                // SAFETY: the caller's contract for the dma-buf is passed on unchanged.
                unsafe { n.reg_mr_dmabuf(CommRef::Send(c), data, size, offset, fd) }
                    .map(AnyMemHandle::Ib)
            }
            (AnyNet::Ib(n), CommRef::Recv(AnyRecvComm::Ib(c))) => {
                // SAFETY: as above.
                unsafe { n.reg_mr_dmabuf(CommRef::Recv(c), data, size, offset, fd) }
                    .map(AnyMemHandle::Ib)
            }
            (AnyNet::Ib(_), _) => Err(mixed("a comm")),
            (AnyNet::Socket(n), _) => Err(NetError::new(
                NetErrorKind::Unsupported,
                format!("the {} backend does not register dma-bufs", n.name()),
            )),
            (AnyNet::Mesh(n), _) => Err(NetError::new(
                NetErrorKind::Unsupported,
                format!("the {} backend does not register dma-bufs", n.name()),
            )),
            (AnyNet::External(n), _) => Err(NetError::new(
                NetErrorKind::Unsupported,
                format!(
                    "weft does not register dma-bufs through a loaded plugin ({})",
                    n.name()
                ),
            )),
        }
    }

    fn dereg_mr(&self, mr: AnyMemHandle) -> Result<(), NetError> {
        match (self, mr) {
            (AnyNet::Socket(n), AnyMemHandle::Socket(m)) => n.dereg_mr(m),
            (AnyNet::Ib(n), AnyMemHandle::Ib(m)) => n.dereg_mr(m),
            (AnyNet::Mesh(n), AnyMemHandle::Mesh(m)) => n.dereg_mr(m),
            (AnyNet::External(n), AnyMemHandle::External(m)) => n.dereg_mr(m),
            _ => Err(mixed("a registration")),
        }
    }

    unsafe fn isend(
        &self,
        comm: &mut AnySendComm,
        data: *const u8,
        size: usize,
        tag: u32,
        mr: &AnyMemHandle,
    ) -> Result<Option<AnyRequest>, NetError> {
        match (self, comm, mr) {
            (AnyNet::Socket(n), AnySendComm::Socket(c), AnyMemHandle::Socket(m)) => {
                // SAFETY: the caller's contract, passed on.
                Ok(unsafe { n.isend(c, data, size, tag, m) }?.map(AnyRequest::Socket))
            }
            (AnyNet::Ib(n), AnySendComm::Ib(c), AnyMemHandle::Ib(m)) => {
                // SAFETY: the caller's contract, passed on.
                Ok(unsafe { n.isend(c, data, size, tag, m) }?.map(AnyRequest::Ib))
            }
            (AnyNet::Mesh(n), AnySendComm::Mesh(c), AnyMemHandle::Mesh(m)) => {
                // SAFETY: the caller's contract, passed on.
                Ok(unsafe { n.isend(c, data, size, tag, m) }?.map(AnyRequest::Mesh))
            }
            (AnyNet::External(n), AnySendComm::External(c), AnyMemHandle::External(m)) => {
                // SAFETY: the caller's contract, passed on.
                Ok(unsafe { n.isend(c, data, size, tag, m) }?.map(AnyRequest::External))
            }
            _ => Err(mixed("a send comm or registration")),
        }
    }

    unsafe fn isend_batch(
        &self,
        comm: &mut AnySendComm,
        sends: &[(*const u8, usize, u32)],
        mr: &AnyMemHandle,
    ) -> Result<Vec<AnyRequest>, NetError> {
        let posted = match (self, comm, mr) {
            (AnyNet::Socket(n), AnySendComm::Socket(c), AnyMemHandle::Socket(m)) => {
                // SAFETY: the caller's contract, passed on.
                let r = unsafe { n.isend_batch(c, sends, m) }?;
                r.into_iter().map(AnyRequest::Socket).collect()
            }
            (AnyNet::Ib(n), AnySendComm::Ib(c), AnyMemHandle::Ib(m)) => {
                // SAFETY: the caller's contract, passed on.
                let r = unsafe { n.isend_batch(c, sends, m) }?;
                r.into_iter().map(AnyRequest::Ib).collect()
            }
            (AnyNet::Mesh(n), AnySendComm::Mesh(c), AnyMemHandle::Mesh(m)) => {
                // SAFETY: the caller's contract, passed on.
                let r = unsafe { n.isend_batch(c, sends, m) }?;
                r.into_iter().map(AnyRequest::Mesh).collect()
            }
            (AnyNet::External(n), AnySendComm::External(c), AnyMemHandle::External(m)) => {
                // SAFETY: the caller's contract, passed on.
                let r = unsafe { n.isend_batch(c, sends, m) }?;
                r.into_iter().map(AnyRequest::External).collect()
            }
            _ => return Err(mixed("a send comm or registration")),
        };
        Ok(posted)
    }

    unsafe fn irecv(
        &self,
        comm: &mut AnyRecvComm,
        bufs: &[RecvBuffer<'_, AnyMemHandle>],
    ) -> Result<Option<AnyRequest>, NetError> {
        match (self, comm) {
            (AnyNet::Socket(n), AnyRecvComm::Socket(c)) => {
                let inner = socket_bufs(bufs)?;
                // SAFETY: the caller's contract, passed on (same buffers).
                Ok(unsafe { n.irecv(c, &inner) }?.map(AnyRequest::Socket))
            }
            (AnyNet::Ib(n), AnyRecvComm::Ib(c)) => {
                let inner = ib_bufs(bufs)?;
                // SAFETY: the caller's contract, passed on (same buffers).
                Ok(unsafe { n.irecv(c, &inner) }?.map(AnyRequest::Ib))
            }
            (AnyNet::Mesh(n), AnyRecvComm::Mesh(c)) => {
                let inner = mesh_bufs(bufs)?;
                // SAFETY: the caller's contract, passed on (same buffers).
                Ok(unsafe { n.irecv(c, &inner) }?.map(AnyRequest::Mesh))
            }
            (AnyNet::External(n), AnyRecvComm::External(c)) => {
                let inner = external_bufs(bufs)?;
                // SAFETY: the caller's contract, passed on (same buffers).
                Ok(unsafe { n.irecv(c, &inner) }?.map(AnyRequest::External))
            }
            _ => Err(mixed("a receive comm")),
        }
    }

    unsafe fn iflush(
        &self,
        comm: &mut AnyRecvComm,
        bufs: &[RecvBuffer<'_, AnyMemHandle>],
    ) -> Result<Option<AnyRequest>, NetError> {
        match (self, comm) {
            (AnyNet::Socket(n), AnyRecvComm::Socket(c)) => {
                let inner = socket_bufs(bufs)?;
                // SAFETY: the caller's contract, passed on (same buffers).
                Ok(unsafe { n.iflush(c, &inner) }?.map(AnyRequest::Socket))
            }
            (AnyNet::Ib(n), AnyRecvComm::Ib(c)) => {
                let inner = ib_bufs(bufs)?;
                // SAFETY: the caller's contract, passed on (same buffers).
                Ok(unsafe { n.iflush(c, &inner) }?.map(AnyRequest::Ib))
            }
            (AnyNet::Mesh(n), AnyRecvComm::Mesh(c)) => {
                let inner = mesh_bufs(bufs)?;
                // SAFETY: the caller's contract, passed on (same buffers).
                Ok(unsafe { n.iflush(c, &inner) }?.map(AnyRequest::Mesh))
            }
            (AnyNet::External(n), AnyRecvComm::External(c)) => {
                let inner = external_bufs(bufs)?;
                // SAFETY: the caller's contract, passed on (same buffers).
                Ok(unsafe { n.iflush(c, &inner) }?.map(AnyRequest::External))
            }
            _ => Err(mixed("a receive comm")),
        }
    }

    fn test(&self, request: &mut AnyRequest) -> Result<Option<Completion>, NetError> {
        match (self, request) {
            (AnyNet::Socket(n), AnyRequest::Socket(r)) => n.test(r),
            (AnyNet::Ib(n), AnyRequest::Ib(r)) => n.test(r),
            (AnyNet::Mesh(n), AnyRequest::Mesh(r)) => n.test(r),
            (AnyNet::External(n), AnyRequest::External(r)) => n.test(r),
            _ => Err(mixed("a request")),
        }
    }

    fn close_send(&self, comm: AnySendComm) -> Result<(), NetError> {
        match (self, comm) {
            (AnyNet::Socket(n), AnySendComm::Socket(c)) => n.close_send(c),
            (AnyNet::Ib(n), AnySendComm::Ib(c)) => n.close_send(c),
            (AnyNet::Mesh(n), AnySendComm::Mesh(c)) => n.close_send(c),
            (AnyNet::External(n), AnySendComm::External(c)) => n.close_send(c),
            _ => Err(mixed("a send comm")),
        }
    }

    fn close_recv(&self, comm: AnyRecvComm) -> Result<(), NetError> {
        match (self, comm) {
            (AnyNet::Socket(n), AnyRecvComm::Socket(c)) => n.close_recv(c),
            (AnyNet::Ib(n), AnyRecvComm::Ib(c)) => n.close_recv(c),
            (AnyNet::Mesh(n), AnyRecvComm::Mesh(c)) => n.close_recv(c),
            (AnyNet::External(n), AnyRecvComm::External(c)) => n.close_recv(c),
            _ => Err(mixed("a receive comm")),
        }
    }

    fn close_listen(&self, comm: AnyListenComm) -> Result<(), NetError> {
        match (self, comm) {
            (AnyNet::Socket(n), AnyListenComm::Socket(c)) => n.close_listen(c),
            (AnyNet::Ib(n), AnyListenComm::Ib(c)) => n.close_listen(c),
            (AnyNet::Mesh(n), AnyListenComm::Mesh(c)) => n.close_listen(c),
            (AnyNet::External(n), AnyListenComm::External(c)) => n.close_listen(c),
            _ => Err(mixed("a listen comm")),
        }
    }
}

/// `bufs` with each registration narrowed to one backend's by `pick`; a registration of
/// another backend is an error, as every mixed use is.
fn narrow_bufs<'a, M>(
    bufs: &[RecvBuffer<'a, AnyMemHandle>],
    pick: impl Fn(&'a AnyMemHandle) -> Option<&'a M>,
) -> Result<Vec<RecvBuffer<'a, M>>, NetError> {
    bufs.iter()
        .map(|b| {
            let mr = pick(b.mr).ok_or_else(|| mixed("a registration"))?;
            Ok(RecvBuffer {
                data: b.data,
                size: b.size,
                tag: b.tag,
                mr,
            })
        })
        .collect()
}

fn socket_bufs<'a>(
    bufs: &[RecvBuffer<'a, AnyMemHandle>],
) -> Result<Vec<RecvBuffer<'a, SocketMemHandle>>, NetError> {
    narrow_bufs(bufs, |m| match m {
        AnyMemHandle::Socket(m) => Some(m),
        _ => None,
    })
}

fn ib_bufs<'a>(
    bufs: &[RecvBuffer<'a, AnyMemHandle>],
) -> Result<Vec<RecvBuffer<'a, IbMemHandle>>, NetError> {
    narrow_bufs(bufs, |m| match m {
        AnyMemHandle::Ib(m) => Some(m),
        _ => None,
    })
}

fn mesh_bufs<'a>(
    bufs: &[RecvBuffer<'a, AnyMemHandle>],
) -> Result<Vec<RecvBuffer<'a, MeshMemHandle>>, NetError> {
    narrow_bufs(bufs, |m| match m {
        AnyMemHandle::Mesh(m) => Some(m),
        _ => None,
    })
}

fn external_bufs<'a>(
    bufs: &[RecvBuffer<'a, AnyMemHandle>],
) -> Result<Vec<RecvBuffer<'a, ExternalMemHandle>>, NetError> {
    narrow_bufs(bufs, |m| match m {
        AnyMemHandle::External(m) => Some(m),
        _ => None,
    })
}
