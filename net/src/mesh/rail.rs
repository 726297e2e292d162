//! One rail of a mesh connection: a connection of the verbs or of the socket backend, and
//! the calls that go to whichever it is.

use crate::ib::{IbMemHandle, IbNet, IbRecvComm, IbRequest, IbSendComm};
use crate::socket::{SocketMemHandle, SocketNet, SocketRecvComm, SocketRequest, SocketSendComm};
use crate::{CommRef, Completion, Net, NetError, NetErrorKind, PtrKind, RecvBuffer};

/// The sending end of one rail.
#[derive(Debug)]
pub enum RailSend {
    Ib(IbSendComm),
    Socket(SocketSendComm),
}

/// The receiving end of one rail.
#[derive(Debug)]
pub enum RailRecv {
    Ib(IbRecvComm),
    Socket(SocketRecvComm),
}

/// A registration on one rail.
#[derive(Debug)]
pub enum RailMr {
    Ib(IbMemHandle),
    Socket(SocketMemHandle),
}

/// A request on one rail.
#[derive(Debug)]
pub enum RailRequest {
    Ib(IbRequest),
    Socket(SocketRequest),
}

impl RailRequest {
    /// Closes the rail this request is on: nothing writes into its buffers afterwards.
    pub fn close_comm(&self) {
        match self {
            RailRequest::Ib(r) => r.close_comm(),
            RailRequest::Socket(r) => r.close_comm(),
        }
    }
}

/// The two backends a rail may belong to.
#[derive(Clone, Copy)]
pub struct Backends<'a> {
    pub ib: Option<&'a IbNet>,
    pub socket: &'a SocketNet,
}

fn mixed(what: &str) -> NetError {
    NetError::new(
        NetErrorKind::InvalidArgument,
        format!("mesh: {what} of one rail handed to another (verbs vs sockets)"),
    )
    .hint("use each registration with the comm it was registered for")
}

impl Backends<'_> {
    fn ib(&self) -> Result<&IbNet, NetError> {
        self.ib.ok_or_else(|| {
            NetError::new(
                NetErrorKind::InvalidArgument,
                "mesh: a verbs rail on a mesh without verbs devices",
            )
        })
    }

    /// Registers `data..data+size` for a rail.
    ///
    /// # Safety
    /// As for [`Net::reg_mr`].
    pub unsafe fn reg_mr(
        &self,
        comm: CommRef<'_, RailSend, RailRecv>,
        data: *mut u8,
        size: usize,
        kind: PtrKind,
    ) -> Result<RailMr, NetError> {
        // SAFETY (every arm): the caller's contract, passed on.
        match comm {
            CommRef::Send(RailSend::Ib(c)) => {
                // SAFETY: see above.
                unsafe { self.ib()?.reg_mr(CommRef::Send(c), data, size, kind) }.map(RailMr::Ib)
            }
            CommRef::Recv(RailRecv::Ib(c)) => {
                // SAFETY: see above.
                unsafe { self.ib()?.reg_mr(CommRef::Recv(c), data, size, kind) }.map(RailMr::Ib)
            }
            CommRef::Send(RailSend::Socket(c)) => {
                // SAFETY: see above.
                unsafe { self.socket.reg_mr(CommRef::Send(c), data, size, kind) }
                    .map(RailMr::Socket)
            }
            CommRef::Recv(RailRecv::Socket(c)) => {
                // SAFETY: see above.
                unsafe { self.socket.reg_mr(CommRef::Recv(c), data, size, kind) }
                    .map(RailMr::Socket)
            }
        }
    }

    pub fn dereg_mr(&self, mr: RailMr) -> Result<(), NetError> {
        match mr {
            RailMr::Ib(m) => self.ib()?.dereg_mr(m),
            RailMr::Socket(m) => self.socket.dereg_mr(m),
        }
    }

    /// # Safety
    /// As for [`Net::isend`].
    pub unsafe fn isend(
        &self,
        comm: &mut RailSend,
        data: *const u8,
        size: usize,
        tag: u32,
        mr: &RailMr,
    ) -> Result<Option<RailRequest>, NetError> {
        match (comm, mr) {
            (RailSend::Ib(c), RailMr::Ib(m)) => {
                // SAFETY: the caller's contract, passed on.
                Ok(unsafe { self.ib()?.isend(c, data, size, tag, m) }?.map(RailRequest::Ib))
            }
            (RailSend::Socket(c), RailMr::Socket(m)) => {
                // SAFETY: the caller's contract, passed on.
                Ok(unsafe { self.socket.isend(c, data, size, tag, m) }?.map(RailRequest::Socket))
            }
            _ => Err(mixed("a registration")),
        }
    }

    /// # Safety
    /// As for [`Net::irecv`].
    pub unsafe fn irecv(
        &self,
        comm: &mut RailRecv,
        bufs: &[RecvBuffer<'_, RailMr>],
    ) -> Result<Option<RailRequest>, NetError> {
        match comm {
            RailRecv::Ib(c) => {
                let inner = bufs
                    .iter()
                    .map(|b| match b.mr {
                        RailMr::Ib(m) => Ok(RecvBuffer {
                            data: b.data,
                            size: b.size,
                            tag: b.tag,
                            mr: m,
                        }),
                        RailMr::Socket(_) => Err(mixed("a registration")),
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                // SAFETY: the caller's contract, passed on (same buffers).
                Ok(unsafe { self.ib()?.irecv(c, &inner) }?.map(RailRequest::Ib))
            }
            RailRecv::Socket(c) => {
                let inner = bufs
                    .iter()
                    .map(|b| match b.mr {
                        RailMr::Socket(m) => Ok(RecvBuffer {
                            data: b.data,
                            size: b.size,
                            tag: b.tag,
                            mr: m,
                        }),
                        RailMr::Ib(_) => Err(mixed("a registration")),
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                // SAFETY: the caller's contract, passed on (same buffers).
                Ok(unsafe { self.socket.irecv(c, &inner) }?.map(RailRequest::Socket))
            }
        }
    }

    pub fn test(&self, request: &mut RailRequest) -> Result<Option<Completion>, NetError> {
        match request {
            RailRequest::Ib(r) => self.ib()?.test(r),
            RailRequest::Socket(r) => self.socket.test(r),
        }
    }

    pub fn close_send(&self, comm: RailSend) -> Result<(), NetError> {
        match comm {
            RailSend::Ib(c) => self.ib()?.close_send(c),
            RailSend::Socket(c) => self.socket.close_send(c),
        }
    }

    pub fn close_recv(&self, comm: RailRecv) -> Result<(), NetError> {
        match comm {
            RailRecv::Ib(c) => self.ib()?.close_recv(c),
            RailRecv::Socket(c) => self.socket.close_recv(c),
        }
    }
}
