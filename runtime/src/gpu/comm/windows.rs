//! The windows: the memory each rank's connections live in, mapped in every rank that
//! talks to it, and where each connection end lies in them.
//!
//! A rank's window is device memory (P2P), shared by pointer within one process and by
//! CUDA IPC handle across processes; or, where some GPU cannot reach another's memory, a
//! shared-memory segment pinned and mapped for the GPU (SHM: kernels then move data through
//! host memory over PCIe, as NCCL's SHM transport does for device buffers). Each rank
//! all-gathers a record of its window, and maps the window of every rank of its host it has
//! a connection with. Connections to ranks of other hosts live in staging memory of their
//! own (`super::net`), which the windows hold too.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use weft_core::abi::{CONN_DIRECT_WRITE, CONN_HOST_MEMORY, ConnInfo, Protocol, STEPS};
use weft_cuda::{Context, Device, DeviceBuffer, HostRegistration, IpcMapping};

use super::net::NetEnds;
use super::peers::GpuPeer;
use crate::bootstrap::Bootstrap;
use crate::config::TransportSettings;
use crate::gpu::GpuError;
use crate::gpu::layout::{EXCHANGE_OFFSET, Edge, Layout, TAGS_OFFSET};
use crate::transport::shm::ShmMapping;

/// Where a peer's window is mapped in this process.
#[derive(Debug)]
pub(super) enum PeerWindow {
    /// This rank's own window.
    Own,
    /// Another rank of this process: its pointer, usable after peer access was enabled.
    SameProcess(u64),
    /// Another process's window, opened from its IPC handle.
    Ipc(IpcMapping),
    /// Another rank's SHM window, mapped and registered here.
    Host(Window),
    /// No connection to this rank.
    None,
}

/// A rank's window: device memory (P2P), or a shared-memory segment pinned and mapped for
/// the GPU (SHM, where some GPUs cannot reach each other: kernels then move data through
/// host memory over PCIe, as NCCL's SHM transport does for device buffers).
#[derive(Debug)]
pub(super) enum Window {
    Device(DeviceBuffer),
    Host {
        // Dropped first: unregistered before it is unmapped.
        registration: HostRegistration,
        mapping: ShmMapping,
        path: PathBuf,
    },
}

/// Tells a peer's record which kind of window follows.
const WINDOW_DEVICE: u8 = 0;
const WINDOW_HOST: u8 = 1;

impl Window {
    /// A zeroed SHM segment of `bytes` in `dir` (`WEFT_SHM_DIR`), registered with `ctx`'s
    /// device.
    fn host(ctx: &Arc<Context>, rank: usize, bytes: usize, dir: &Path) -> Result<Window, GpuError> {
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let path = dir.join(format!("weft-gpu-{}-{stamp:x}-r{rank}", std::process::id()));
        let mapping = ShmMapping::create(dir, &path, bytes)
            .map_err(|e| GpuError::InvalidArgument(format!("the SHM window: {e}")))?;
        let (ptr, len) = mapping.bytes();
        // SAFETY: the mapping is page-aligned, `len` bytes long, and outlives the
        // registration (dropped first, see the field order).
        let registration = unsafe { HostRegistration::register(ctx, ptr, len) }?;
        Ok(Window::Host {
            registration,
            mapping,
            path,
        })
    }

    /// A zeroed window of device memory.
    pub(super) fn device(ctx: &Arc<Context>, bytes: usize) -> Result<Window, GpuError> {
        let buf = DeviceBuffer::alloc(ctx, bytes)?;
        buf.fill(0)?;
        Ok(Window::Device(buf))
    }

    /// What peers need to reach this window.
    pub(super) fn record(&self) -> Result<Vec<u8>, GpuError> {
        let mut out = Vec::with_capacity(80);
        match self {
            Window::Device(buf) => {
                out.push(WINDOW_DEVICE);
                out.extend_from_slice(&buf.ptr().to_be_bytes());
                out.extend_from_slice(&buf.ipc_handle()?.0);
            }
            Window::Host { mapping, path, .. } => {
                out.push(WINDOW_HOST);
                out.extend_from_slice(&(mapping.bytes().1 as u64).to_be_bytes());
                out.extend_from_slice(path.as_os_str().as_encoded_bytes());
            }
        }
        Ok(out)
    }

    /// Maps `peer`'s window from its record.
    pub(super) fn open_peer(
        ctx: &Arc<Context>,
        peer: &GpuPeer,
        record: &[u8],
        my_pid: u32,
    ) -> Result<PeerWindow, GpuError> {
        let bad = || GpuError::InvalidArgument("a malformed window record".to_string());
        let word = u64::from_be_bytes(
            record
                .get(1..9)
                .ok_or_else(bad)?
                .try_into()
                .map_err(|_| bad())?,
        );
        match record.first() {
            Some(&WINDOW_DEVICE) if peer.pid == my_pid => {
                // This rank's kernels reach the peer's memory; the peer's init enables the
                // other way from its own context. Never from the peer's context here: that
                // binds a GPU whose work may still run (the peer's rank may be in a
                // collective of another communicator), and a call on it could wait for
                // that work.
                let other = Context::primary(Device::get(peer.device as usize)?)?;
                ctx.enable_peer_access(&other)?;
                Ok(PeerWindow::SameProcess(word))
            }
            Some(&WINDOW_DEVICE) => {
                let handle: [u8; 64] = record
                    .get(9..73)
                    .ok_or_else(bad)?
                    .try_into()
                    .map_err(|_| bad())?;
                Ok(PeerWindow::Ipc(IpcMapping::open(
                    ctx,
                    &weft_cuda::IpcMemHandle(handle),
                )?))
            }
            Some(&WINDOW_HOST) => {
                let path = PathBuf::from(std::ffi::OsStr::from_bytes(
                    record.get(9..).ok_or_else(bad)?,
                ));
                let mapping = ShmMapping::open(&path, word)
                    .map_err(|e| GpuError::InvalidArgument(format!("its SHM window: {e}")))?;
                let (ptr, len) = mapping.bytes();
                // SAFETY: as in `Window::host`.
                let registration = unsafe { HostRegistration::register(ctx, ptr, len) }?;
                Ok(PeerWindow::Host(Window::Host {
                    registration,
                    mapping,
                    path,
                }))
            }
            _ => Err(bad()),
        }
    }

    /// The window's address for kernels of this process.
    pub(super) fn device_ptr(&self) -> u64 {
        match self {
            Window::Device(buf) => buf.ptr(),
            Window::Host { registration, .. } => registration.device_ptr(),
        }
    }

    /// Removes an SHM window's name (the mappings stay).
    fn unlink(&self) {
        if let Window::Host { path, .. } = self {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// This rank's window, the windows of the ranks it is connected with, and the layout of
/// the connections in them.
#[derive(Debug)]
pub(super) struct Windows {
    layout: Layout,
    // Dropped in order: the peers' windows, then ours (every buffer holds its own
    // reference to the context, so the order does not matter for the context).
    peers: Vec<PeerWindow>,
    own: Window,
    /// Direct writes between ranks of this process (every rank agreed at init).
    direct: bool,
    /// The connections to ranks of other hosts, in staging memory (none on one host).
    net: Option<NetEnds>,
}

impl Windows {
    /// Allocates this rank's window (zeroed: every counter starts at 0) in host memory
    /// when `via_host` (in `settings`' `WEFT_SHM_DIR`), else on the GPU; shares it, maps
    /// the window of every rank a connection of `layout` joins to this one, and agrees with
    /// every rank on direct writes (which `settings` may turn off). Collective: every rank
    /// calls it.
    pub(super) fn open(
        ctx: &Arc<Context>,
        bootstrap: &mut Bootstrap,
        rank: usize,
        peers: &[GpuPeer],
        layout: Layout,
        via_host: bool,
        settings: &TransportSettings,
    ) -> Result<Windows, GpuError> {
        let r = rank as u32;
        let bytes = layout.window_bytes(r);
        let own = if via_host {
            Window::host(ctx, rank, bytes, &settings.shm_dir)?
        } else {
            Window::device(ctx, bytes)?
        };
        let shared =
            bootstrap.all_gather_for(&own.record()?, "init's all_gather of the windows")?;

        let talks_to = |q: u32| {
            (0..layout.nchannels()).any(|c| layout.connected(c, r, q) || layout.connected(c, q, r))
        };
        let my_pid = std::process::id();
        let mut mapped = Vec::with_capacity(peers.len());
        for (q, (peer, record)) in peers.iter().zip(&shared).enumerate() {
            if q == rank {
                mapped.push(PeerWindow::Own);
            } else if !talks_to(q as u32) || peer.host_hash != peers[rank].host_hash {
                // No connection, or NET to another host (`super::net`, not a window).
                mapped.push(PeerWindow::None);
            } else {
                let opened = Window::open_peer(ctx, peer, record, my_pid).map_err(|e| {
                    GpuError::Unreachable {
                        peer: q,
                        detail: format!(
                            "opening its window (GPU {} in process {}) failed: {e}",
                            peer.bus_id, peer.pid
                        ),
                    }
                })?;
                mapped.push(opened);
            }
        }

        // Direct writes unless some rank turned them off (NCCL_P2P_DIRECT_DISABLE=1 or
        // WEFT_P2P_DIRECT=0): both ends of a connection must agree on where data lands.
        let direct_here = settings.p2p_direct_writes();
        let direct = bootstrap
            .all_gather_for(
                &[u8::from(direct_here)],
                "init's all_gather of the direct-write votes",
            )?
            .iter()
            .all(|a| a.first() == Some(&1));
        Ok(Windows {
            layout,
            peers: mapped,
            own,
            direct,
            net: None,
        })
    }

    /// Takes the connections to other hosts (init, once they are open).
    pub(super) fn with_net(self, net: Option<NetEnds>) -> Windows {
        Windows { net, ..self }
    }

    /// The connections to other hosts, if any.
    pub(super) fn net(&self) -> Option<&NetEnds> {
        self.net.as_ref()
    }

    /// Where the connections lie in the windows.
    pub(super) fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Whether ranks of this process may write into each other's user buffers (every rank
    /// agreed at init).
    pub(super) fn direct(&self) -> bool {
        self.direct
    }

    /// This rank's window when it is device memory (P2P).
    pub(super) fn own_device_buffer(&self) -> Option<&DeviceBuffer> {
        match &self.own {
            Window::Device(buf) => Some(buf),
            Window::Host { .. } => None,
        }
    }

    /// Removes this rank's SHM window's name once every peer has mapped it.
    pub(super) fn unlink_own(&self) {
        self.own.unlink();
    }

    /// "P2P" (device memory over NVLink or PCIe), "P2P/read" (the same in read mode) or
    /// "SHM" (host memory), as NCCL's `NCCL_DEBUG=INFO` names its transports.
    pub(super) fn transport_name(&self) -> &'static str {
        match self.own {
            Window::Device(_) if self.layout.read() => "P2P/read",
            Window::Device(_) => "P2P",
            Window::Host { .. } => "SHM",
        }
    }

    /// The address of `rank`'s window here.
    fn window_of(&self, rank: u32) -> Result<u64, GpuError> {
        match self.peers.get(rank as usize) {
            Some(PeerWindow::Own) => Ok(self.own.device_ptr()),
            Some(PeerWindow::SameProcess(p)) => Ok(*p),
            Some(PeerWindow::Ipc(m)) => Ok(m.ptr()),
            Some(PeerWindow::Host(w)) => Ok(w.device_ptr()),
            _ => Err(GpuError::InvalidArgument(format!(
                "no window of rank {rank} is mapped"
            ))),
        }
    }

    /// Whether `a` and `b` may write into each other's user buffers: both ranks live in this
    /// process (so a device pointer of one is valid for the other, with peer access) and
    /// every rank allowed it at init.
    fn direct_between(&self, a: u32, b: u32) -> bool {
        let here = |r: u32| {
            matches!(
                self.peers.get(r as usize),
                Some(PeerWindow::Own | PeerWindow::SameProcess(_))
            )
        };
        self.direct && here(a) && here(b)
    }

    /// The connection end `edge` as seen from this rank.
    pub(super) fn conn_info(&self, edge: Edge) -> Result<ConnInfo, GpuError> {
        if let Some(info) = self
            .net
            .as_ref()
            .and_then(|n| n.conn_info(edge, self.layout.step_bytes()))
        {
            return Ok(info);
        }
        let place = self
            .layout
            .place(edge)
            .ok_or_else(|| GpuError::InvalidArgument(format!("{edge:?} is not a connection")))?;
        let receiver = self.window_of(edge.to)?;
        let sender = self.window_of(edge.from)?;
        let slot = receiver + place.slot as u64;
        let mut buffs = [0u64; 3];
        let mut sizes = [0u32; 3];
        // The kernels take the FIFO wherever it is: written over NVLink and read locally,
        // or (read mode) written locally and read over NVLink.
        let fifo_window = if self.layout.read() { sender } else { receiver };
        buffs[Protocol::Simple.index()] = fifo_window + place.fifo as u64;
        sizes[Protocol::Simple.index()] =
            u32::try_from(self.layout.fifo_bytes()).unwrap_or(u32::MAX);
        if self.layout.ll_bytes() > 0 {
            buffs[Protocol::Ll.index()] = slot + self.layout.ll_offset() as u64;
            sizes[Protocol::Ll.index()] = u32::try_from(self.layout.ll_bytes()).unwrap_or(0);
        }
        Ok(ConnInfo {
            buffs,
            buff_sizes: sizes,
            step_size: u32::try_from(self.layout.step_bytes()).unwrap_or(u32::MAX),
            head: sender + place.head as u64,
            tail: slot,
            sizes_fifo: 0,
            ptr_exchange: sender + (place.head + EXCHANGE_OFFSET) as u64,
            step: 0,
            flags: match self.own {
                Window::Device(_) if self.direct_between(edge.from, edge.to) => CONN_DIRECT_WRITE,
                Window::Device(_) => 0,
                Window::Host { .. } => CONN_HOST_MEMORY,
            },
            steps: STEPS,
            direct_ops: 0,
            tags: slot + TAGS_OFFSET as u64,
        })
    }
}
