//! NET: the connections of a GPU communicator whose two ranks are on different hosts.
//!
//! Each end of such a connection is a staging area ([`Staging`]) in pinned host memory
//! mapped for this rank's GPU, laid out as the kernels' connection end (tail, head, tags,
//! step sizes, the SIMPLE FIFO): the sending kernel writes its steps there over PCIe, the
//! proxy thread sends them; on the other host the proxy receives into the receiver's area
//! and the kernel reads them from host memory, as NCCL's NET transport does without
//! GPUDirect RDMA. The kernels need nothing else: a sending end with a `sizes_fifo` (flagged
//! `CONN_PROXY_DRIVEN`) records each step's size there for the proxy.
//!
//! With `WEFT_NET_RECV_COPY=1` a receiving end's FIFO is in device memory instead: the proxy
//! still receives into the staging area, then copies each step there with the copy engine
//! ([`CopyEngine`], a [`StepMover`]) and publishes it once the copy finished, so the kernel
//! reads device memory rather than pinned host memory over PCIe (issue 24 asks for both
//! forms behind a switch, measured against each other).
//!
//! SIMPLE only: the proxy moves whole steps, and LL's flagged lines would need it to watch
//! every line; a communicator with NET connections runs without LL buffers, as NCCL's NET
//! carries no LL without a flush per line. Connections are set up at init, every one of
//! them (NCCL connects send/receive pairs on first use).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use weft_core::abi::{CONN_HOST_MEMORY, CONN_PROXY_DRIVEN, ConnInfo, Protocol, STEPS};
use weft_cuda::{Context, DeviceBuffer, Event, HostMapped, Stream};

use super::faults::AbortHandle;
use super::nic;
use super::peers::{GpuPeer, several_hosts};
use crate::bootstrap::Bootstrap;
use crate::comm::CommOptions;
use crate::comm::setup::open_net;
use crate::conn::{AbortFlag, ConnId, Direction};
use crate::gpu::GpuError;
use crate::gpu::layout::{Edge, Layout};
use crate::net::NET_HANDLE_MAXSIZE;
use crate::net::any::AnyNet;
use crate::proxy::staged::{FirstFailure, Staging, StepMover, layout as staging_layout};
use crate::transport::net::NET_NAME;
use crate::transport::staged::StagedNet;

/// How long sends still in flight get when the communicator goes (its kernels are done by
/// then; this is the network's time to deliver their last steps).
const LINGER: Duration = Duration::from_secs(5);

/// One end of a NET connection on this rank.
#[derive(Debug)]
struct NetEnd {
    staging: Arc<Staging>,
    /// The area's address for this rank's kernels.
    device: u64,
    /// A receiving end with the copy-engine receive: its FIFO in device memory (the
    /// kernel reads the steps there; the area's FIFO is the network's).
    device_fifo: Option<u64>,
}

/// The copy-engine receive's mover: each received step copied from its slot of the
/// staging area (pinned host memory, by its device-mapped address) into the same slot of a
/// FIFO in device memory, on the rank's copy stream; an event per slot marks the copy's end.
struct CopyEngine {
    stream: Arc<Stream>,
    fifo: DeviceBuffer,
    /// The staging area's FIFO, device-mapped.
    staged: u64,
    step_bytes: usize,
    copied: Vec<Event>,
}

impl StepMover for CopyEngine {
    fn start(&self, slot: usize, bytes: usize) -> Result<(), String> {
        let at = (slot * self.step_bytes) as u64;
        if bytes > self.step_bytes || slot >= self.copied.len() {
            return Err(format!(
                "{bytes} bytes into slot {slot} of {}",
                self.copied.len()
            ));
        }
        // SAFETY: both ranges hold `step_bytes` at `at` (slot < steps, checked above); the
        // device FIFO lives as long as this mover, which waits for its stream before it is
        // dropped, and the staging area outlives its mover (`Staging` drops it first).
        unsafe {
            weft_cuda::copy_async(self.fifo.ptr() + at, self.staged + at, bytes, &self.stream)
        }
        .map_err(|e| e.to_string())?;
        self.copied[slot]
            .record(&self.stream)
            .map_err(|e| e.to_string())
    }

    fn finished(&self, slot: usize) -> Result<bool, String> {
        match self.copied.get(slot) {
            Some(event) => event.is_done().map_err(|e| e.to_string()),
            None => Err(format!("slot {slot} of {}", self.copied.len())),
        }
    }
}

impl Drop for CopyEngine {
    /// A copy may still run into the FIFO (a step the kernel never read): it ends before
    /// the memory goes. Bounded: copies wait on nothing but the copy engine.
    fn drop(&mut self) {
        if let Err(e) = self.stream.synchronize() {
            log::warn!("weft: waiting for the NET receive copies before freeing their FIFO: {e}");
        }
    }
}

/// This rank's NET connection ends and the proxy that moves them.
#[derive(Debug)]
pub(super) struct NetEnds {
    ends: BTreeMap<Edge, NetEnd>,
    net: StagedNet<AnyNet>,
    /// This GPU's sysfs path and the backend's devices' (each channel's device: `nic`).
    gpu_path: Option<String>,
    nics: Vec<Option<String>>,
    /// Stops the proxy when the communicator is aborted.
    abort: AbortFlag,
    failure: FirstFailure,
    /// The copy-engine receive's stream (`WEFT_NET_RECV_COPY=1`), shared by this rank's
    /// receiving ends.
    copy: Option<Arc<Stream>>,
}

/// One record of the handshake: a receiving rank's listen handle for one connection.
const RECORD_BYTES: usize = 8 + NET_HANDLE_MAXSIZE;

impl NetEnds {
    /// Opens this rank's end of every connection of `layout` that crosses hosts, with the
    /// backend `opts` chooses, and connects them (in the background: the proxy connects and
    /// accepts with `opts.timeout` as deadline). A failure of any connection, now or later,
    /// raises `abort` (the kernels' flag) and becomes the communicator's error. `None` where
    /// every rank is on this host. Collective: every rank calls it.
    pub(super) fn open(
        ctx: &Arc<Context>,
        bootstrap: &mut Bootstrap,
        rank: usize,
        peers: &[GpuPeer],
        layout: &Layout,
        opts: &CommOptions,
        abort: AbortHandle,
    ) -> Result<Option<NetEnds>, GpuError> {
        if !several_hosts(peers) {
            return Ok(None);
        }
        let r = rank as u32;
        let outgoing: Vec<Edge> = layout.net_edges(r, false).collect();
        let incoming: Vec<Edge> = layout.net_edges(r, true).collect();
        // Every rank takes part in the exchange below, even one without NET connections.
        let proxy_abort = AbortFlag::new();
        let net = open_net(opts)
            .and_then(|n| {
                StagedNet::new(Arc::new(n), 0, proxy_abort.clone(), opts.timeout, LINGER)
                    .map_err(|e| e.to_string())
            })
            .map_err(|e| {
                GpuError::InvalidArgument(format!(
                    "the NET backend for connections to other hosts: {e} (WEFT_TRANSPORT, \
                 NCCL_NET_PLUGIN and NCCL_NET choose it, NCCL_SOCKET_IFNAME the interfaces)"
                ))
            });
        // From here every connection belongs to `setup`, whose `Drop` closes their areas
        // (so their links finish at once) on any early return.
        let gpu_path = peers.get(rank).and_then(|p| nic::gpu_pci_path(&p.bus_id));
        // The copy-engine receive's stream, shared by this rank's receiving ends.
        let copy_stream = if opts.settings.gpu.net_recv_copy && !incoming.is_empty() {
            Some(Arc::new(Stream::new(ctx)?))
        } else {
            None
        };
        let mut setup = net.map(|net| NetEnds {
            ends: BTreeMap::new(),
            nics: net.device_paths(),
            gpu_path,
            net,
            abort: proxy_abort,
            failure: FirstFailure::default(),
            copy: copy_stream.clone(),
        });
        let mut handles = Vec::with_capacity(incoming.len() * RECORD_BYTES);
        if let Ok(ends) = &mut setup {
            if let Err(e) = ends.listen(ctx, layout, &incoming, r, &abort, &mut handles) {
                setup = Err(e);
            }
        }
        // Each rank's blob: its backend's name (empty where it could not open one or listen
        // on it), then a record per connection it receives on. A rank that failed still
        // joins the exchange, so that the others fail here, naming it, instead of at their
        // connect deadline.
        let name = setup
            .as_ref()
            .map_or(String::new(), |n| n.net.backend().to_string());
        let name_bytes = name
            .as_bytes()
            .get(..name.len().min(255))
            .unwrap_or_default();
        let mut blob = vec![name_bytes.len() as u8];
        blob.extend_from_slice(name_bytes);
        blob.extend_from_slice(&handles);
        let shared = bootstrap.all_gather_for(&blob, "init's all_gather of the NET listeners")?;
        let mut ends = setup?;
        let theirs_by_rank = listeners(&shared, name_bytes)?;
        for &edge in &outgoing {
            let theirs = theirs_by_rank
                .get(edge.to as usize)
                .copied()
                .unwrap_or_default();
            let handle = theirs
                .chunks_exact(RECORD_BYTES)
                .find(|rec| {
                    rec[..4] == edge.channel.to_be_bytes() && rec[4..8] == edge.from.to_be_bytes()
                })
                .map(|rec| &rec[8..])
                .ok_or_else(|| GpuError::Unreachable {
                    peer: edge.to as usize,
                    detail: format!(
                        "it listed no NET listener for channel {}'s connection from rank {r} \
                         (ranks disagree on the channels: same settings everywhere?)",
                        edge.channel
                    ),
                })?;
            let end = NetEnd::alloc(ctx, layout, &ends.failure, &abort, None)?;
            ends.net
                .send_on(
                    conn_id(edge, r, Direction::Send),
                    ends.nic(edge.channel),
                    handle,
                    end.staging.clone(),
                )
                .map_err(|e| unreachable(edge.to, e))?;
            ends.ends.insert(edge, end);
        }
        let mut used: Vec<usize> = ends.ends.keys().map(|e| ends.nic(e.channel)).collect();
        used.sort_unstable();
        used.dedup();
        log::info!(
            "weft: rank {rank}: {} NET connection(s) to other hosts on device(s) {used:?} of \
             {} ({}){}",
            ends.ends.len(),
            ends.nics.len(),
            ends.net.backend(),
            if copy_stream.is_some() {
                "; received steps copied to device memory (WEFT_NET_RECV_COPY=1)"
            } else {
                ""
            }
        );
        Ok(Some(ends))
    }

    /// Listens for every connection of `incoming` (into this rank), each into a new area
    /// (its steps copied to a device FIFO on the copy stream, where there is one); appends
    /// the handshake's record of each to `records`.
    fn listen(
        &mut self,
        ctx: &Arc<Context>,
        layout: &Layout,
        incoming: &[Edge],
        rank: u32,
        abort: &AbortHandle,
        records: &mut Vec<u8>,
    ) -> Result<(), GpuError> {
        for &edge in incoming {
            let end = NetEnd::alloc(ctx, layout, &self.failure, abort, self.copy.as_ref())?;
            let handle = self
                .net
                .recv_on(
                    conn_id(edge, rank, Direction::Recv),
                    self.nic(edge.channel),
                    end.staging.clone(),
                )
                .map_err(|e| unreachable(edge.from, e))?;
            records.extend_from_slice(&edge.channel.to_be_bytes());
            records.extend_from_slice(&edge.from.to_be_bytes());
            records.extend_from_slice(handle.as_bytes());
            self.ends.insert(edge, end);
        }
        Ok(())
    }

    /// The kernels' view of `edge`'s end on this rank, if it is a NET connection.
    pub(super) fn conn_info(&self, edge: Edge, step_bytes: usize) -> Option<ConnInfo> {
        let end = self.ends.get(&edge)?;
        let at = |offset: usize| end.device + offset as u64;
        let mut buffs = [0u64; 3];
        let mut sizes = [0u32; 3];
        buffs[Protocol::Simple.index()] = end.device_fifo.unwrap_or(at(staging_layout::FIFO));
        sizes[Protocol::Simple.index()] =
            u32::try_from(step_bytes * STEPS as usize).unwrap_or(u32::MAX);
        Some(ConnInfo {
            buffs,
            buff_sizes: sizes,
            step_size: u32::try_from(step_bytes).unwrap_or(u32::MAX),
            head: at(staging_layout::HEAD),
            tail: at(staging_layout::TAIL),
            sizes_fifo: at(staging_layout::SIZES),
            ptr_exchange: 0,
            step: 0,
            flags: CONN_HOST_MEMORY | CONN_PROXY_DRIVEN,
            steps: STEPS,
            direct_ops: 0,
            tags: at(staging_layout::TAGS),
        })
    }

    /// The NET backend's name (`Socket`, `IB`, ...).
    pub(super) fn backend(&self) -> String {
        self.net.backend().to_string()
    }

    /// The backend's device for this rank's connections on `channel` (the one nearest
    /// this GPU; see `nic`).
    fn nic(&self, channel: u32) -> usize {
        nic::nic_for_channel(self.gpu_path.as_deref(), &self.nics, channel)
    }

    /// NCCL's name of channel `channel`'s connections on this rank: `NET/Socket/<device>`.
    pub(super) fn describe(&self, channel: u32) -> String {
        self.net.describe_dev(self.nic(channel))
    }

    /// Where the first failure of a connection is kept (the proxy's words, naming the
    /// peer).
    pub(super) fn failure(&self) -> FirstFailure {
        self.failure.clone()
    }

    /// A launch that may use these connections was enqueued (see `StagedNet::wake`).
    pub(super) fn wake(&self) {
        self.net.wake();
    }

    /// Stops the proxy: every connection fails, nothing waits on the network.
    pub(super) fn abort(&self) {
        self.abort.abort();
    }
}

impl Drop for NetEnds {
    /// No kernel uses the areas once the communicator goes: their links finish once their
    /// last sends are delivered (or after [`LINGER`]), then the proxy stops.
    fn drop(&mut self) {
        for end in self.ends.values() {
            end.staging.close();
        }
        if !self.net.wait_idle(LINGER) {
            // A peer that is gone without a word: fail what is left now rather than let
            // the proxy linger again on its way out.
            self.abort.abort();
        }
    }
}

impl NetEnd {
    /// A zeroed staging area on pinned host memory mapped for `ctx`'s GPU; with `copy`
    /// (a receiving end, `WEFT_NET_RECV_COPY=1`), also a FIFO in device memory that its
    /// steps are copied into on that stream.
    fn alloc(
        ctx: &Arc<Context>,
        layout: &Layout,
        failure: &FirstFailure,
        abort: &AbortHandle,
        copy: Option<&Arc<Stream>>,
    ) -> Result<NetEnd, GpuError> {
        let step_bytes = layout.step_bytes();
        let bytes = staging_layout::bytes(STEPS as usize, step_bytes);
        let memory = HostMapped::alloc(ctx, bytes)?;
        let (host, device, len) = (memory.host_ptr(), memory.device_ptr(), memory.len());
        let abort = abort.clone();
        let hook = failure.hook(move || abort.fail());
        // SAFETY: `memory` (moved into the area) keeps `host..host + len` alive, zeroed by
        // `HostMapped::alloc`; only this connection's kernel end and its link use it.
        let staging = unsafe {
            Staging::new(
                host,
                len,
                Box::new(memory),
                STEPS as usize,
                step_bytes,
                hook,
            )
        }
        .map_err(GpuError::InvalidArgument)?;
        let (staging, device_fifo) = match copy {
            Some(stream) => {
                let fifo = DeviceBuffer::alloc(ctx, STEPS as usize * step_bytes)?;
                let fifo_ptr = fifo.ptr();
                let copied = (0..STEPS)
                    .map(|_| Event::new(ctx, false))
                    .collect::<Result<Vec<Event>, _>>()?;
                let mover = CopyEngine {
                    stream: Arc::clone(stream),
                    fifo,
                    staged: device + staging_layout::FIFO as u64,
                    step_bytes,
                    copied,
                };
                (staging.with_mover(Arc::new(mover)), Some(fifo_ptr))
            }
            None => (staging, None),
        };
        Ok(NetEnd {
            staging: Arc::new(staging),
            device,
            device_fifo,
        })
    }
}

/// Every rank's listener records from the all-gathered blobs (its backend's name, then
/// the records), checking that every rank opened the backend this rank did (`mine`).
fn listeners<'a>(shared: &'a [Vec<u8>], mine: &[u8]) -> Result<Vec<&'a [u8]>, GpuError> {
    let mut out = Vec::with_capacity(shared.len());
    for (q, blob) in shared.iter().enumerate() {
        let len = usize::from(blob.first().copied().unwrap_or(0));
        let theirs = blob.get(1..1 + len).unwrap_or_default();
        if theirs.is_empty() {
            return Err(GpuError::Unreachable {
                peer: q,
                detail: "it could not open a NET backend for the ranks of other hosts (its \
                         own error says why)"
                    .to_string(),
            });
        }
        if theirs != mine {
            return Err(GpuError::InvalidArgument(format!(
                "rank {q} joins other hosts over NET backend {}, this rank over {}: set \
                 WEFT_TRANSPORT, NCCL_NET_PLUGIN and NCCL_NET alike on every host",
                String::from_utf8_lossy(theirs),
                String::from_utf8_lossy(mine)
            )));
        }
        out.push(blob.get(1 + len..).unwrap_or_default());
    }
    Ok(out)
}

fn conn_id(edge: Edge, rank: u32, dir: Direction) -> ConnId {
    ConnId {
        transport: NET_NAME,
        rank,
        peer: if dir == Direction::Send {
            edge.to
        } else {
            edge.from
        },
        channel: edge.channel,
        dir,
    }
}

fn unreachable(peer: u32, e: impl std::fmt::Display) -> GpuError {
    GpuError::Unreachable {
        peer: peer as usize,
        detail: format!("NET: {e}"),
    }
}

#[cfg(test)]
mod test {
    use super::*;

    fn blob(name: &str, records: &[u8]) -> Vec<u8> {
        let mut out = vec![name.len() as u8];
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(records);
        out
    }

    #[test]
    fn ranks_must_open_the_same_backend() {
        let ok = [blob("Socket", &[1, 2]), blob("Socket", &[])];
        assert_eq!(listeners(&ok, b"Socket").unwrap(), [&[1u8, 2][..], &[][..]]);
        let other = [blob("Socket", &[]), blob("IB", &[])];
        let e = listeners(&other, b"Socket").unwrap_err().to_string();
        assert!(
            e.contains("rank 1 joins other hosts over NET backend IB"),
            "{e}"
        );
        let failed = [blob("Socket", &[]), blob("", &[])];
        let e = listeners(&failed, b"Socket").unwrap_err();
        assert_eq!(e.culprit(), Some(1));
        assert!(
            e.to_string().contains("could not open a NET backend"),
            "{e}"
        );
        assert!(listeners(&[Vec::new()], b"Socket").is_err());
    }
}
