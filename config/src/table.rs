//! Every environment variable weft reads, in one table: its names (weft's first, then NCCL's
//! where NCCL has one with that meaning), what it is when unset, what values it takes, and
//! what it does. [`crate::Settings`] reads each through its entry; `weft config` and
//! docs/environment.md list them from [`TABLE`].
//!
//! A value its parser refuses is an error that names the variable, the value and what is
//! allowed ([`OnBad::Reject`]), except for the variables NCCL (or weft until now) reads
//! leniently: those are ignored with a warning and keep their default ([`OnBad::Ignore`]).

use std::path::PathBuf;
use std::time::Duration;

use weft_core::algo::GpuAlgo;
use weft_core::topo::model::PathType;
use weft_core::tune::ProtocolEnable;

use crate::choice::{AddressFamily, DebugLevel, MeshTransport, NetBackend, TransportChoice};
use crate::parse::{self, Parsed};

/// Which part of weft a variable configures (the sections of the listing and the doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Group {
    Net,
    Bootstrap,
    Topology,
    Transport,
    Gpu,
    Kernels,
    Debug,
}

impl Group {
    /// Every group, in the order of the listing.
    pub const ALL: [Group; 7] = [
        Group::Net,
        Group::Bootstrap,
        Group::Topology,
        Group::Transport,
        Group::Gpu,
        Group::Kernels,
        Group::Debug,
    ];

    /// Its short name (the field of [`crate::Settings`]).
    pub fn name(self) -> &'static str {
        match self {
            Group::Net => "net",
            Group::Bootstrap => "bootstrap",
            Group::Topology => "topology",
            Group::Transport => "transport",
            Group::Gpu => "gpu",
            Group::Kernels => "kernels",
            Group::Debug => "debug",
        }
    }

    /// What its variables are about.
    pub fn title(self) -> &'static str {
        match self {
            Group::Net => "sockets and the NET backends (socket, verbs, mesh), the net plugin",
            Group::Bootstrap => "the rendezvous and the ring of bootstrap sockets",
            Group::Topology => "the topology, its paths and the channel count",
            Group::Transport => "connections: transports, FIFOs, protocols, deadlines",
            Group::Gpu => "the GPU communicator's algorithms and NVLS",
            Group::Kernels => "compiling the CUDA kernels, and their cache",
            Group::Debug => "logging",
        }
    }
}

/// What a variable is when it is unset (or blank).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhenUnset {
    /// This value, which the variable's parser takes.
    Value(&'static str),
    /// No value: what weft then does (a choice made at run time, or nothing).
    Means(&'static str),
}

/// What a value the parser refuses does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnBad {
    /// It is an error (reading the settings fails).
    Reject,
    /// It is ignored with a warning, and the variable keeps its default (NCCL's way).
    Ignore,
}

/// A variable, apart from its type.
#[derive(Debug, PartialEq, Eq)]
pub struct VarInfo {
    /// Its names in the order they are looked up: weft's first, then NCCL's.
    pub names: &'static [&'static str],
    pub group: Group,
    pub unset: WhenUnset,
    /// The values it takes, as errors and the doc say it.
    pub allowed: &'static str,
    /// What it does, in one line.
    pub about: &'static str,
    pub on_bad: OnBad,
}

impl VarInfo {
    /// The name listings show first (weft's, or NCCL's where weft has none).
    pub fn name(&self) -> &'static str {
        self.names.first().copied().unwrap_or("")
    }

    /// Its names joined with " / ".
    pub fn names_joined(&self) -> String {
        self.names.join(" / ")
    }
}

/// A variable with the parser of its type.
pub struct Var<T: 'static> {
    pub info: VarInfo,
    pub parse: fn(&str) -> Parsed<T>,
}

impl<T> std::fmt::Debug for Var<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.info.fmt(f)
    }
}

/// A table entry: a [`Var`] of any type.
pub trait Entry: Sync {
    fn info(&self) -> &VarInfo;
    /// Whether `text` (blanks trimmed) parses.
    fn check(&self, text: &str) -> Parsed<()>;
}

impl<T> Entry for Var<T> {
    fn info(&self) -> &VarInfo {
        &self.info
    }

    fn check(&self, text: &str) -> Parsed<()> {
        (self.parse)(text.trim()).map(|_| ())
    }
}

/// Shorthand for the entries below.
const fn var<T>(
    names: &'static [&'static str],
    group: Group,
    unset: WhenUnset,
    allowed: &'static str,
    about: &'static str,
    on_bad: OnBad,
    parse: fn(&str) -> Parsed<T>,
) -> Var<T> {
    Var {
        info: VarInfo {
            names,
            group,
            unset,
            allowed,
            about,
            on_bad,
        },
        parse,
    }
}

use Group::*;
use OnBad::{Ignore, Reject};
use WhenUnset::{Means, Value};

const IFNAME_SYNTAX: &str =
    "interface name prefixes (`eth,ens`); `^` excludes (`^docker`), `=` matches exactly (`=eth0`)";
const PATH_LEVELS: &str = "LOC, NVL, PIX, PXB, PHB, SYS or 0..5";

// ---- net: sockets ----

pub static SOCKET_IFNAME: Var<String> = var(
    &["WEFT_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"],
    Net,
    Means(
        "NCCL's order: ib*, else all but docker*, lo and virbr*, else docker* and virbr*, else lo",
    ),
    IFNAME_SYNTAX,
    "Interfaces for sockets: the bootstrap, the socket backend, verbs handshakes, topology detection.",
    Reject,
    parse::text,
);
pub static SOCKET_FAMILY: Var<AddressFamily> = var(
    &["WEFT_SOCKET_FAMILY", "NCCL_SOCKET_FAMILY"],
    Net,
    Means("both, IPv4 first"),
    "AF_INET or AF_INET6",
    "Only addresses of this family for sockets.",
    Reject,
    parse::address_family,
);
pub static SOCKET_NTHREADS: Var<u8> = var(
    &["WEFT_SOCKET_NTHREADS", "NCCL_SOCKET_NTHREADS"],
    Net,
    Value("4"),
    "a number from 1 to 16",
    "Helper threads per socket connection.",
    Reject,
    parse::small::<1, 16>,
);
pub static NSOCKS_PERTHREAD: Var<u8> = var(
    &["WEFT_NSOCKS_PERTHREAD", "NCCL_NSOCKS_PERTHREAD"],
    Net,
    Value("1"),
    "a number from 1 to 64 (threads x this at most 64)",
    "Data sockets per helper thread.",
    Reject,
    parse::small::<1, 64>,
);
pub static SOCKET_CONNECT_TIMEOUT: Var<Duration> = var(
    &["WEFT_SOCKET_CONNECT_TIMEOUT"],
    Net,
    Value("120"),
    "a number from 1 to 86400 (seconds)",
    "How long a socket connect may take, handshake included.",
    Reject,
    parse::whole_seconds::<1, 86_400>,
);
pub static SOCKET_SPIN_US: Var<Duration> = var(
    &["WEFT_SOCKET_SPIN_US"],
    Net,
    Means("50 with 16 or more usable CPUs, else 0"),
    "a number from 0 to 100000 (microseconds)",
    "How long a socket helper thread spins for work before it sleeps (helps only where each has a core).",
    Reject,
    parse::micros::<0, 100_000>,
);
pub static SOCKET_TRACE: Var<PathBuf> = var(
    &["WEFT_SOCKET_TRACE"],
    Net,
    Means("off"),
    "a directory",
    "Each socket connection end writes its per-message timestamps there on close (scripts/socket_trace.py).",
    Reject,
    parse::path,
);

// ---- net: verbs ----

pub static IB_HCA: Var<String> = var(
    &["WEFT_IB_HCA", "NCCL_IB_HCA"],
    Net,
    Means("every device and port"),
    "devices and ports (`mlx5_0:1,mlx5_1`); `^` excludes, `=` matches exactly",
    "RDMA devices and ports the verbs backend uses.",
    Reject,
    parse::text,
);
pub static IB_GID_INDEX: Var<u8> = var(
    &["WEFT_IB_GID_INDEX", "NCCL_IB_GID_INDEX"],
    Net,
    Means("each port's RoCE v2 GID of an address of NCCL_IB_ADDR_FAMILY"),
    "a number from 0 to 255",
    "The GID index on every verbs port.",
    Reject,
    parse::small::<0, 255>,
);
pub static IB_ADDR_FAMILY: Var<AddressFamily> = var(
    &["WEFT_IB_ADDR_FAMILY", "NCCL_IB_ADDR_FAMILY"],
    Net,
    Value("AF_INET"),
    "AF_INET or AF_INET6",
    "The address family of the GID chosen when no GID index is set.",
    Reject,
    parse::address_family,
);
pub static IB_QPS_PER_CONNECTION: Var<u8> = var(
    &["WEFT_IB_QPS_PER_CONNECTION", "NCCL_IB_QPS_PER_CONNECTION"],
    Net,
    Value("1"),
    "a number from 1 to 8",
    "Queue pairs each verbs message is split over.",
    Reject,
    parse::small::<1, 8>,
);
pub static IB_TIMEOUT: Var<u8> = var(
    &["WEFT_IB_TIMEOUT", "NCCL_IB_TIMEOUT"],
    Net,
    Value("20"),
    "a number from 1 to 31 (4.096 us x 2^n)",
    "The verbs ACK timeout exponent.",
    Reject,
    parse::small::<1, 31>,
);
pub static IB_RETRY_CNT: Var<u8> = var(
    &["WEFT_IB_RETRY_CNT", "NCCL_IB_RETRY_CNT"],
    Net,
    Value("7"),
    "a number from 0 to 7",
    "Verbs transport retries.",
    Reject,
    parse::small::<0, 7>,
);
pub static IB_TC: Var<u8> = var(
    &["WEFT_IB_TC", "NCCL_IB_TC"],
    Net,
    Value("0"),
    "a number from 0 to 255",
    "The verbs traffic class.",
    Reject,
    parse::small::<0, 255>,
);
pub static IB_SL: Var<u8> = var(
    &["WEFT_IB_SL", "NCCL_IB_SL"],
    Net,
    Value("0"),
    "a number from 0 to 15",
    "The verbs service level.",
    Reject,
    parse::small::<0, 15>,
);
pub static IB_INLINE: Var<u32> = var(
    &["WEFT_IB_INLINE"],
    Net,
    Value("128"),
    "a number from 0 to 1024 (bytes; 0: never)",
    "The most bytes a verbs send writes inline.",
    Reject,
    parse::count::<0, 1024>,
);
pub static IB_CONNECT_TIMEOUT: Var<Duration> = var(
    &["WEFT_IB_CONNECT_TIMEOUT"],
    Net,
    Value("120"),
    "a number from 1 to 86400 (seconds)",
    "How long a verbs connect may take.",
    Reject,
    parse::whole_seconds::<1, 86_400>,
);
pub static IB_FORCE_FLUSH: Var<bool> = var(
    &["WEFT_IB_FORCE_FLUSH"],
    Net,
    Value("0"),
    "a whole number; not 0: on",
    "Tests only: flush verbs receives into host memory too, so the flush path runs without a GPU.",
    Reject,
    parse::nonzero,
);

// ---- net: GPUDirect RDMA ----

pub static NET_GDR_LEVEL: Var<PathType> = var(
    &["WEFT_NET_GDR_LEVEL", "NCCL_NET_GDR_LEVEL"],
    Net,
    Means("P2C when NCCL_NET_GDR_C2C is on, else PXB"),
    "LOC, NVL, NVB, C2C, PIX, PXB, P2C, PXN, PHB, SYS or 0..5",
    "The farthest GPU-NIC path GPUDirect RDMA takes; LOC: none (verbs then offer host memory only).",
    Ignore,
    parse::path_level,
);
pub static DMABUF_ENABLE: Var<bool> = var(
    &["WEFT_DMABUF_ENABLE", "NCCL_DMABUF_ENABLE"],
    Net,
    Value("1"),
    "a whole number; 0: off",
    "Registers GPU memory with verbs as dma-buf where the kernel and libibverbs can.",
    Reject,
    parse::nonzero,
);
pub static GDR_FLUSH_DISABLE: Var<bool> = var(
    &["WEFT_GDR_FLUSH_DISABLE", "NCCL_GDR_FLUSH_DISABLE"],
    Net,
    Value("0"),
    "a whole number; not 0: on",
    "No flush (an RDMA read) after a verbs receive into GPU memory.",
    Reject,
    parse::nonzero,
);

// ---- net: mesh ----

pub static MESH_IFNAME: Var<String> = var(
    &["WEFT_MESH_IFNAME"],
    Net,
    Means("RDMA netdevs, and NCCL's default choice of the others"),
    IFNAME_SYNTAX,
    "Which netdevs join the mesh, RDMA or not.",
    Reject,
    parse::text,
);
pub static MESH_TRANSPORT: Var<MeshTransport> = var(
    &["WEFT_MESH_TRANSPORT"],
    Net,
    Value("auto"),
    "auto, ib or socket",
    "auto: verbs where both ends of a pair have an RDMA port, else sockets; ib: verbs only; socket: sockets only.",
    Reject,
    parse::mesh_transport,
);
pub static MESH_RAILS: Var<u8> = var(
    &["WEFT_MESH_RAILS"],
    Net,
    Value("8"),
    "a number from 1 to 8",
    "The most rails per mesh connection (1: no striping).",
    Reject,
    parse::small::<1, 8>,
);
pub static MESH_GID_INDEX: Var<u8> = var(
    &["WEFT_MESH_GID_INDEX", "NCCL_MESH_GID_INDEX"],
    Net,
    Means("each port's RoCE v2 GID of its address"),
    "a number from 0 to 255",
    "The GID index on every port of the mesh.",
    Reject,
    parse::small::<0, 255>,
);
pub static MESH_DEBUG: Var<bool> = var(
    &["WEFT_MESH_DEBUG", "NCCL_MESH_DEBUG"],
    Net,
    Value("0"),
    "0, no, off or false: off; anything else: on",
    "Logs each mesh route chosen (at WARN, so that it shows by default).",
    Reject,
    parse::on_unless_off,
);

// ---- net: plugin ----

pub static NET_BACKEND: Var<NetBackend> = var(
    &["WEFT_NET_BACKEND"],
    Net,
    Value("auto"),
    "auto, ib, mesh or socket",
    "The net plugin's backend; auto: verbs when a port is active, else sockets.",
    Reject,
    parse::net_backend,
);
pub static NET: Var<String> = var(
    &["NCCL_NET"],
    Net,
    Means("any"),
    "a network's name (IB, Socket, or a net plugin's)",
    "NCCL's network choice: the host communicator's NET takes the plugin of NCCL_NET_PLUGIN by that name, or weft's own (IB, Socket, Mesh); topology detection reads it to know whether a net plugin serves.",
    Reject,
    parse::text,
);

pub static NET_PLUGIN: Var<String> = var(
    &["NCCL_NET_PLUGIN"],
    Net,
    Means("libnccl-net.so when the loader finds one, else weft's own networks"),
    "none, or a comma-separated list of plugin names (NAME: libnccl-net-NAME.so) or paths",
    "External NCCL net plugins (ncclNet v8 to v11) for the host communicator's NET connections, tried before weft's own, as NCCL does.",
    Reject,
    parse::text,
);

// ---- bootstrap ----

pub static BOOTSTRAP_TIMEOUT: Var<Duration> = var(
    &["WEFT_BOOTSTRAP_TIMEOUT"],
    Bootstrap,
    Value("30"),
    "a positive number of seconds",
    "The longest one bootstrap wait may take (connect, each rendezvous and ring step); WEFT_TIMEOUT sets it too.",
    Ignore,
    parse::seconds,
);
pub static BOOTSTRAP_PORT: Var<u16> = var(
    &["WEFT_BOOTSTRAP_PORT"],
    Bootstrap,
    Value("0"),
    "a number from 0 to 65535 (0: any free port)",
    "The port the rendezvous root listens on.",
    Ignore,
    |s| parse::number::<0, 65_535>(s).and_then(|p| u16::try_from(p).map_err(|_| None)),
);
pub static HOSTID: Var<String> = var(
    &["WEFT_HOSTID", "NCCL_HOSTID"],
    Bootstrap,
    Means("the host name and boot id"),
    "any text",
    "Replaces the host's identity: ranks with the same one may use SHM and P2P.",
    Reject,
    parse::text,
);

// ---- topology ----

pub static TOPO_FILE: Var<PathBuf> = var(
    &["WEFT_TOPO_FILE", "NCCL_TOPO_FILE"],
    Topology,
    Means("detected from sysfs, CUDA and NVML"),
    "an NCCL topology XML file",
    "The topology the channel search runs on, instead of detection.",
    Reject,
    parse::path,
);
pub static TOPO_DUMP_FILE: Var<PathBuf> = var(
    &["WEFT_TOPO_DUMP_FILE", "NCCL_TOPO_DUMP_FILE"],
    Topology,
    Means("not written"),
    "a file",
    "Receives the topology XML, as NCCL writes it.",
    Reject,
    parse::path,
);
pub static GRAPH_DUMP_FILE: Var<PathBuf> = var(
    &["WEFT_GRAPH_DUMP_FILE", "NCCL_GRAPH_DUMP_FILE"],
    Topology,
    Means("not written"),
    "a file",
    "`weft topo` writes the searched graphs there, as NCCL's graph XML.",
    Reject,
    parse::path,
);
pub static P2P_LEVEL: Var<PathType> = var(
    &["NCCL_P2P_LEVEL"],
    Topology,
    Means("PXB, or SYS on AMD hosts with at most two GPUs"),
    PATH_LEVELS,
    "The farthest GPU-GPU path P2P takes.",
    Ignore,
    parse::path_level,
);
pub static NVB_DISABLE: Var<bool> = var(
    &["NCCL_NVB_DISABLE"],
    Topology,
    Value("0"),
    "0 or 1",
    "Never routes GPU to GPU through a third GPU's NVLinks.",
    Ignore,
    parse::switch,
);
pub static NET_GDR_C2C: Var<bool> = var(
    &["NCCL_NET_GDR_C2C"],
    Topology,
    Value("1"),
    "0 or 1",
    "GPUDirect RDMA may go through the CPU's C2C link (Grace).",
    Ignore,
    parse::switch,
);
pub static NET_GDR_READ: Var<bool> = var(
    &["NCCL_NET_GDR_READ"],
    Topology,
    Means("on from compute capability 8.0, else only with NVLink peers"),
    "0 or 1",
    "GPUDirect RDMA for sends (the NIC reads GPU memory).",
    Ignore,
    parse::switch,
);
pub static PXN_DISABLE: Var<bool> = var(
    &["NCCL_PXN_DISABLE"],
    Topology,
    Value("0"),
    "0 or 1",
    "No PXN: a GPU never reaches a NIC through another GPU.",
    Ignore,
    parse::switch,
);
pub static PXN_C2C: Var<bool> = var(
    &["NCCL_PXN_C2C"],
    Topology,
    Value("1"),
    "0 or 1",
    "A PXN relay may reach its NIC through C2C.",
    Ignore,
    parse::switch,
);
pub static NCHANNELS: Var<u32> = var(
    &["WEFT_NCHANNELS"],
    Topology,
    Means("what the channel search finds, within the MIN/MAX bounds"),
    "a number from 1 to 64",
    "Channels (rings) every communicator builds; wins over the MIN/MAX bounds. Every rank must set the same.",
    Reject,
    parse::count::<1, 64>,
);
pub static MIN_NCHANNELS: Var<i64> = var(
    &[
        "WEFT_MIN_NCHANNELS",
        "NCCL_MIN_NCHANNELS",
        "NCCL_MIN_NRINGS",
    ],
    Topology,
    Means("0"),
    "an integer (clamped to 0..64)",
    "The fewest channels: the searched rings are repeated up to this.",
    Reject,
    parse::integer,
);
pub static MAX_NCHANNELS: Var<i64> = var(
    &[
        "WEFT_MAX_NCHANNELS",
        "NCCL_MAX_NCHANNELS",
        "NCCL_MAX_NRINGS",
    ],
    Topology,
    Means("64"),
    "an integer (clamped to 1..64)",
    "The most channels: searched rings beyond it are dropped.",
    Reject,
    parse::integer,
);

// ---- transport ----

pub static TRANSPORT: Var<TransportChoice> = var(
    &["WEFT_TRANSPORT"],
    Transport,
    Value("auto"),
    "auto, shm, net, ib or mesh",
    "The transport of host communicators' connections (auto: SHM within a host, NET across).",
    Reject,
    parse::transport,
);
pub static TIMEOUT: Var<Duration> = var(
    &["WEFT_TIMEOUT"],
    Transport,
    Value("30"),
    "a positive number of seconds",
    "Deadline of every wait on a peer in a communicator: bootstrap steps, connects, FIFO waits.",
    Reject,
    parse::seconds,
);
pub static CONN_TIMEOUT: Var<Duration> = var(
    &["WEFT_CONN_TIMEOUT"],
    Transport,
    Value("600"),
    "a positive number of seconds",
    "Deadline of the FIFO waits of transports built on their own, outside a communicator.",
    Ignore,
    parse::seconds,
);
pub static WAIT_SPINS: Var<u32> = var(
    &["WEFT_WAIT_SPINS"],
    Transport,
    Means("chosen from the ranks of the host and its CPUs"),
    "a number from 0 to 4294967295",
    "Busy polls before a FIFO wait yields the CPU.",
    Reject,
    parse::count::<0, 4_294_967_295>,
);
pub static WAIT_YIELDS: Var<u32> = var(
    &["WEFT_WAIT_YIELDS"],
    Transport,
    Means("chosen from the ranks of the host and its CPUs"),
    "a number from 0 to 4294967295",
    "Yields before a FIFO wait starts to sleep.",
    Reject,
    parse::count::<0, 4_294_967_295>,
);
pub static BUFFSIZE: Var<usize> = var(
    &["WEFT_BUFFSIZE", "NCCL_BUFFSIZE"],
    Transport,
    Means("8 steps of 128 KiB with SHM only, of 512 KiB when NET is involved"),
    "bytes for the 8 FIFO steps, at least 4096, e.g. 4194304",
    "Each connection's FIFO (steps rounded down to a multiple of 64 bytes). Every rank must set the same.",
    Reject,
    parse::ring_bytes,
);
pub static SHM_BUFFSIZE: Var<usize> = var(
    &["WEFT_SHM_BUFFSIZE"],
    Transport,
    Means("the FIFO of WEFT_BUFFSIZE / NCCL_BUFFSIZE, else 8 steps of 128 KiB"),
    "bytes for the 8 FIFO steps, at least 4096",
    "The FIFO of SHM connections of a transport built on its own.",
    Reject,
    parse::ring_bytes,
);
pub static NET_BUFFSIZE: Var<usize> = var(
    &["WEFT_NET_BUFFSIZE"],
    Transport,
    Means("the FIFO of WEFT_BUFFSIZE / NCCL_BUFFSIZE, else 8 steps of 512 KiB"),
    "bytes for the 8 FIFO steps, at least 4096",
    "The FIFO of NET connections of a transport built on its own.",
    Reject,
    parse::ring_bytes,
);
pub static LL_BUFFSIZE: Var<usize> = var(
    &["WEFT_LL_BUFFSIZE", "NCCL_LL_BUFFSIZE"],
    Transport,
    Means("131072: 8 steps of 2048 lines"),
    "bytes for the 8 LL steps (8-byte lines), e.g. 131072, or 0",
    "The LL buffer of SHM and P2P connections (lines per step rounded down to 128; 0: no LL).",
    Reject,
    parse::bytes,
);
pub static PROTO: Var<ProtocolEnable> = var(
    &["WEFT_PROTO", "NCCL_PROTO"],
    Transport,
    Value("LL,LL128,Simple"),
    "protocols (LL, LL128, Simple), `^` excludes, per collective: `LL,Simple;allreduce:^LL`",
    "The protocols calls may use. Every rank must set the same.",
    Reject,
    parse::protocols,
);
pub static SHM_DIR: Var<PathBuf> = var(
    &["WEFT_SHM_DIR"],
    Transport,
    Value("/dev/shm"),
    "a directory (a tmpfs: a disk works, slowly)",
    "Where SHM segments and host windows are created.",
    Reject,
    parse::path,
);
pub static SHM_DISABLE: Var<bool> = var(
    &["WEFT_SHM_DISABLE", "NCCL_SHM_DISABLE"],
    Transport,
    Value("0"),
    "0 or 1",
    "No SHM transport.",
    Ignore,
    parse::switch,
);
pub static P2P_DISABLE: Var<bool> = var(
    &["WEFT_P2P_DISABLE", "NCCL_P2P_DISABLE"],
    Transport,
    Value("0"),
    "0 or 1",
    "No P2P between GPUs: device data goes through SHM, and paths count as LOC.",
    Ignore,
    parse::switch,
);
pub static P2P_READ_ENABLE: Var<bool> = var(
    &["WEFT_P2P_READ_ENABLE", "NCCL_P2P_READ_ENABLE"],
    Transport,
    Means("read mode where every GPU has compute capability 8.0 and every pair has NVLink"),
    "0 or 1",
    "GPU P2P in read mode (SIMPLE FIFOs in the sender's memory, read by the receiver).",
    Reject,
    parse::switch,
);
pub static P2P_DIRECT: Var<bool> = var(
    &["WEFT_P2P_DIRECT"],
    Transport,
    Value("1"),
    "0 or 1",
    "GPU P2P writes straight into the peer's buffers; 0 on any rank turns it off for all.",
    Ignore,
    parse::switch,
);
pub static P2P_DIRECT_DISABLE: Var<bool> = var(
    &["NCCL_P2P_DIRECT_DISABLE"],
    Transport,
    Value("0"),
    "0 or 1",
    "NCCL's switch for the same: 1 turns direct writes off.",
    Ignore,
    parse::switch,
);
pub static P2P_LL_THRESHOLD: Var<usize> = var(
    &["WEFT_P2P_LL_THRESHOLD", "NCCL_P2P_LL_THRESHOLD"],
    Transport,
    Means("16384 on P2P windows, never on SHM ones"),
    "bytes per channel, e.g. 16384",
    "GPU send/receive: messages up to this many bytes per channel go LL.",
    Reject,
    parse::bytes,
);

// ---- gpu ----

pub static ALGO: Var<GpuAlgo> = var(
    &["WEFT_ALGO"],
    Gpu,
    Means("automatic: one-shot for small all-reduces between peer-mapped ranks, else the ring"),
    "ring, oneshot, twoshot or nvls",
    "The algorithm every GPU call must use, for measurement. Every rank must set the same. Across hosts oneshot runs the gathered all-reduce (every input sent to every rank, up to 256 KiB per rank).",
    Reject,
    parse::algo,
);
pub static MIN_SLICES: Var<u32> = var(
    &["WEFT_MIN_SLICES"],
    Gpu,
    Means("1"),
    "a number from 1 to 8",
    "GPU SIMPLE rings: the fewest FIFO steps each primitive is cut into, for measurement.",
    Reject,
    parse::count::<1, 8>,
);
pub static DIRECT_WINDOW: Var<u64> = var(
    &["WEFT_DIRECT_WINDOW"],
    Gpu,
    Value("8388608"),
    "a number from 65536 to 17179869184 (bytes, rounded down to 16)",
    "The data window of the one-/two-shot peer region. Every rank must set the same.",
    Reject,
    parse::number::<65_536, 17_179_869_184>,
);
pub static NVLS: Var<String> = var(
    &["WEFT_NVLS"],
    Gpu,
    Means("no multicast: NVLS runs in its unicast form"),
    "1 opts in (weft-cuda's gate decides)",
    "Opts in to NVLink multicast (cuMulticastCreate). Never on shared GPU machines.",
    Reject,
    parse::text,
);
pub static NVLS_ENABLE: Var<bool> = var(
    &["NCCL_NVLS_ENABLE"],
    Gpu,
    Value("2"),
    "a whole number; 0: off",
    "0: no NVLS search, and no multicast whatever WEFT_NVLS says.",
    Ignore,
    parse::nonzero,
);
pub static NVLS_NCHANNELS: Var<u32> = var(
    &["NCCL_NVLS_NCHANNELS"],
    Gpu,
    Means("NCCL's per GPU: 16, 24 from compute capability 10.0"),
    "a number from 1 to 64",
    "Channels of the NVLS algorithms. Every rank must set the same.",
    Reject,
    parse::count::<1, 64>,
);
pub static NVLS_CHUNKSIZE: Var<u64> = var(
    &["NCCL_NVLS_CHUNKSIZE"],
    Gpu,
    Value("131072"),
    "a number from 16 to 4294967295 (bytes)",
    "The NVLS chunk. Every rank must set the same.",
    Reject,
    parse::number::<16, 4_294_967_295>,
);
pub static NET_RECV_COPY: Var<bool> = var(
    &["WEFT_NET_RECV_COPY"],
    Gpu,
    Value("0"),
    "0 or 1",
    "GPU data from other hosts without GPUDirect: 1 copies each received step into device memory with the copy engine and the kernel reads it there; 0 lets the kernel read the pinned host slot (NCCL's way). Each rank chooses for its own receives.",
    Reject,
    parse::switch,
);

// ---- kernels ----

pub static KERNEL_THREADS: Var<u32> = var(
    &["WEFT_KERNEL_THREADS"],
    Kernels,
    Value("512"),
    "a multiple of 32 from 64 to 1024",
    "Threads per block of every kernel module, for measurement. Every rank must set the same.",
    Ignore,
    |s| parse::count::<64, 1024>(s).and_then(|t| if t % 32 == 0 { Ok(t) } else { Err(None) }),
);
pub static KERNEL_UNROLL: Var<u32> = var(
    &["WEFT_KERNEL_UNROLL"],
    Kernels,
    Means("the kernels' own"),
    "a number from 1 to 16",
    "16-byte packs in flight per thread, for measurement.",
    Ignore,
    parse::count::<1, 16>,
);
pub static KERNEL_CACHE: Var<bool> = var(
    &["WEFT_KERNEL_CACHE"],
    Kernels,
    Value("1"),
    "0 or 1",
    "0: compile kernels with NVRTC every time, without the on-disk cache.",
    Ignore,
    parse::switch,
);
pub static CACHE_DIR: Var<PathBuf> = var(
    &["WEFT_CACHE_DIR"],
    Kernels,
    Means("$XDG_CACHE_HOME/weft/kernels, else $HOME/.cache/weft/kernels"),
    "a directory",
    "The kernel cache.",
    Reject,
    parse::path,
);
pub static KERNEL_BUNDLE: Var<PathBuf> = var(
    &["WEFT_KERNEL_BUNDLE"],
    Kernels,
    Means("the bundle built into the library, if any"),
    "a bundle file (`weft kernels --bundle`), or 0 for none",
    "Kernels compiled ahead of time, taken before the cache and NVRTC. Set at build time, it names the bundle to build in (scripts/build-kernel-bundle.sh).",
    Reject,
    parse::path,
);
pub static NVRTC: Var<PathBuf> = var(
    &["WEFT_NVRTC"],
    Kernels,
    Means("libnvrtc.so.N by its usual names"),
    "a path to libnvrtc.so.N",
    "The NVRTC library to load first.",
    Reject,
    parse::path,
);

// ---- debug ----

pub static DEBUG: Var<DebugLevel> = var(
    &["WEFT_DEBUG", "NCCL_DEBUG"],
    Debug,
    Means("warnings (libnccl: nothing)"),
    "VERSION, WARN, INFO, DEBUG, ABORT or TRACE",
    "How much weft logs; at INFO communicator init lists the settings that differ from their defaults.",
    Ignore,
    parse::debug_level,
);
pub static DEBUG_FILE: Var<String> = var(
    &["WEFT_DEBUG_FILE", "NCCL_DEBUG_FILE"],
    Debug,
    Means("stdout"),
    "a file name; %h becomes the host name, %p the process id",
    "Where libnccl writes its NCCL_DEBUG lines (NCCL's rule: the file is created anew; stdout if it cannot be).",
    Ignore,
    parse::text,
);
pub static STATUS: Var<bool> = var(
    &["WEFT_STATUS"],
    Debug,
    Value("1"),
    "0 or 1",
    "1: each process answers the job health query (weft status) on a port of the bootstrap interface; 0: no status server.",
    Ignore,
    parse::switch,
);
pub static DEBUG_SUBSYS: Var<String> = var(
    &["WEFT_DEBUG_SUBSYS", "NCCL_DEBUG_SUBSYS"],
    Debug,
    Means("INIT,BOOTSTRAP,ENV (NCCL's)"),
    "subsystem names, comma-separated (INIT, COLL, P2P, ..., ALL); `^` first excludes them",
    "Which INFO lines weft prints; COLL (and ALL) add a line per collective, send and receive, in NCCL's form, with what weft made of it.",
    Ignore,
    parse::text,
);

/// Every variable, in the order of the listing.
pub static TABLE: &[&dyn Entry] = &[
    &SOCKET_IFNAME,
    &SOCKET_FAMILY,
    &SOCKET_NTHREADS,
    &NSOCKS_PERTHREAD,
    &SOCKET_CONNECT_TIMEOUT,
    &SOCKET_SPIN_US,
    &SOCKET_TRACE,
    &IB_HCA,
    &IB_GID_INDEX,
    &IB_ADDR_FAMILY,
    &IB_QPS_PER_CONNECTION,
    &IB_TIMEOUT,
    &IB_RETRY_CNT,
    &IB_TC,
    &IB_SL,
    &IB_INLINE,
    &IB_CONNECT_TIMEOUT,
    &IB_FORCE_FLUSH,
    &NET_GDR_LEVEL,
    &DMABUF_ENABLE,
    &GDR_FLUSH_DISABLE,
    &MESH_IFNAME,
    &MESH_TRANSPORT,
    &MESH_RAILS,
    &MESH_GID_INDEX,
    &MESH_DEBUG,
    &NET_BACKEND,
    &NET,
    &NET_PLUGIN,
    &BOOTSTRAP_TIMEOUT,
    &BOOTSTRAP_PORT,
    &HOSTID,
    &TOPO_FILE,
    &TOPO_DUMP_FILE,
    &GRAPH_DUMP_FILE,
    &P2P_LEVEL,
    &NVB_DISABLE,
    &NET_GDR_C2C,
    &NET_GDR_READ,
    &PXN_DISABLE,
    &PXN_C2C,
    &NCHANNELS,
    &MIN_NCHANNELS,
    &MAX_NCHANNELS,
    &TRANSPORT,
    &TIMEOUT,
    &CONN_TIMEOUT,
    &WAIT_SPINS,
    &WAIT_YIELDS,
    &BUFFSIZE,
    &SHM_BUFFSIZE,
    &NET_BUFFSIZE,
    &LL_BUFFSIZE,
    &PROTO,
    &SHM_DIR,
    &SHM_DISABLE,
    &P2P_DISABLE,
    &P2P_READ_ENABLE,
    &P2P_DIRECT,
    &P2P_DIRECT_DISABLE,
    &P2P_LL_THRESHOLD,
    &ALGO,
    &MIN_SLICES,
    &DIRECT_WINDOW,
    &NVLS,
    &NVLS_ENABLE,
    &NVLS_NCHANNELS,
    &NVLS_CHUNKSIZE,
    &NET_RECV_COPY,
    &KERNEL_THREADS,
    &KERNEL_UNROLL,
    &KERNEL_CACHE,
    &CACHE_DIR,
    &KERNEL_BUNDLE,
    &NVRTC,
    &DEBUG,
    &DEBUG_SUBSYS,
    &DEBUG_FILE,
    &STATUS,
];

/// The entry that has `name` among its names.
pub fn find(name: &str) -> Option<&'static dyn Entry> {
    TABLE
        .iter()
        .copied()
        .find(|e| e.info().names.contains(&name))
}
