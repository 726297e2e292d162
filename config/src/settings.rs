//! [`Settings`]: every variable of the [table](crate::table), read once, typed and checked,
//! in one group per part of weft. Code below takes the group it needs as an argument.

use std::path::PathBuf;
use std::sync::Once;
use std::time::Duration;

use weft_core::algo::GpuAlgo;
use weft_core::topo::model::PathType;
use weft_core::tune::ProtocolEnable;

use crate::choice::{AddressFamily, DebugLevel, MeshTransport, NetBackend, TransportChoice};
use crate::error::{BadValue, ConfigError};
use crate::lookup::{self, Lookup};
use crate::table::{self as t, Group, OnBad, Var, VarInfo, WhenUnset};

/// Where a set variable's value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub var: &'static VarInfo,
    /// Which of its names was set.
    pub name: &'static str,
    /// The value, blanks trimmed.
    pub value: String,
    /// Whether it differs from the default (always, for a variable without a default value).
    pub differs: bool,
}

/// Reads the table's variables through a lookup, keeping where each came from and every
/// value refused.
struct Reader<'a> {
    lookup: Lookup<'a>,
    origins: Vec<Origin>,
    bad: Vec<BadValue>,
}

impl Reader<'_> {
    /// The variable's name and value, and its parse, when it is set; a refused value is kept
    /// in `bad` and reads as unset.
    fn set<T>(&mut self, var: &'static Var<T>) -> Option<(&'static str, String, T)> {
        let (name, raw) = lookup::first_set(self.lookup, var.info.names)?;
        let text = raw.trim().to_string();
        match (var.parse)(&text) {
            Ok(v) => Some((name, text, v)),
            Err(detail) => {
                self.bad.push(BadValue {
                    name,
                    value: text,
                    allowed: var.info.allowed,
                    detail,
                    ignored: var.info.on_bad == OnBad::Ignore,
                });
                None
            }
        }
    }

    /// A variable with a default value.
    fn value<T: PartialEq + Default>(&mut self, var: &'static Var<T>) -> T {
        let default = match var.info.unset {
            WhenUnset::Value(text) => (var.parse)(text).ok(),
            WhenUnset::Means(_) => None,
        };
        let default = default.unwrap_or_else(|| {
            // Ruled out by the table's tests; kept an error rather than a panic.
            self.bad.push(BadValue {
                name: var.info.name(),
                value: String::new(),
                allowed: var.info.allowed,
                detail: Some("weft's table has no valid default for it".to_string()),
                ignored: false,
            });
            T::default()
        });
        match self.set(var) {
            Some((name, value, v)) => {
                self.origins.push(Origin {
                    var: &var.info,
                    name,
                    value,
                    differs: v != default,
                });
                v
            }
            None => default,
        }
    }

    /// A variable without a default value (`None` when unset).
    fn optional<T>(&mut self, var: &'static Var<T>) -> Option<T> {
        let (name, value, v) = self.set(var)?;
        self.origins.push(Origin {
            var: &var.info,
            name,
            value,
            differs: true,
        });
        Some(v)
    }
}

/// The socket backend (and every other user of sockets: bootstrap, verbs handshakes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketSettings {
    /// `NCCL_SOCKET_IFNAME` syntax; `None`: NCCL's default order.
    pub ifname: Option<String>,
    pub family: Option<AddressFamily>,
    pub threads: u8,
    pub sockets_per_thread: u8,
    pub connect_timeout: Duration,
    /// `None`: decided by the number of usable CPUs.
    pub spin: Option<Duration>,
    pub trace: Option<PathBuf>,
}

/// The verbs backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IbSettings {
    /// `NCCL_IB_HCA` syntax; `None`: every device.
    pub hca: Option<String>,
    pub gid_index: Option<u8>,
    pub addr_family: AddressFamily,
    pub qps_per_connection: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub traffic_class: u8,
    pub service_level: u8,
    pub max_inline: u32,
    pub connect_timeout: Duration,
    pub force_flush: bool,
}

/// GPUDirect RDMA, as the verbs backend sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuDirectSettings {
    /// `None`: NCCL's default (the topology decides).
    pub level: Option<PathType>,
    pub dmabuf: bool,
    pub flush_disable: bool,
}

/// The mesh backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MeshSettings {
    pub ifname: Option<String>,
    pub transport: MeshTransport,
    pub max_rails: u8,
    pub gid_index: Option<u8>,
    pub debug: bool,
}

/// Sockets, the NET backends and the net plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetSettings {
    pub socket: SocketSettings,
    pub ib: IbSettings,
    pub gdr: GpuDirectSettings,
    pub mesh: MeshSettings,
    /// The net plugin's backend.
    pub backend: NetBackend,
    /// `NCCL_NET`.
    pub nccl_net: Option<String>,
    /// `NCCL_NET_PLUGIN`, as set (weft-net's `external` module resolves it).
    pub nccl_net_plugin: Option<String>,
}

/// The bootstrap (its interface is [`SocketSettings::ifname`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootstrapSettings {
    pub timeout: Duration,
    pub port: u16,
    pub hostid: Option<String>,
}

/// The topology, its paths, and the channel count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopologySettings {
    pub topo_file: Option<PathBuf>,
    pub topo_dump_file: Option<PathBuf>,
    pub graph_dump_file: Option<PathBuf>,
    pub p2p_level: Option<PathType>,
    pub nvb_disable: bool,
    pub gdr_c2c: bool,
    pub gdr_read: Option<bool>,
    pub pxn_disable: bool,
    pub pxn_c2c: bool,
    /// `WEFT_NCHANNELS`.
    pub nchannels: Option<u32>,
    /// As set, before NCCL's clamping.
    pub min_nchannels: Option<i64>,
    pub max_nchannels: Option<i64>,
}

impl TopologySettings {
    /// Whether the channel count was set (`WEFT_NCHANNELS` or a MIN/MAX bound).
    pub fn channel_count_set(&self) -> bool {
        self.nchannels.is_some() || self.min_nchannels.is_some() || self.max_nchannels.is_some()
    }
}

/// Connections: the transports, their FIFOs and deadlines, the protocols.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransportSettings {
    pub transport: TransportChoice,
    /// `WEFT_TIMEOUT`: a communicator's deadline (bootstrap included).
    pub timeout: Duration,
    /// `WEFT_CONN_TIMEOUT`: a transport's own, outside a communicator.
    pub conn_timeout: Duration,
    pub wait_spins: Option<u32>,
    pub wait_yields: Option<u32>,
    /// Bytes of the 8 FIFO steps.
    pub buffsize: Option<usize>,
    pub shm_buffsize: Option<usize>,
    pub net_buffsize: Option<usize>,
    /// Bytes of the 8 LL steps.
    pub ll_buffsize: Option<usize>,
    pub protocols: ProtocolEnable,
    pub shm_dir: PathBuf,
    pub shm_disable: bool,
    pub p2p_disable: bool,
    pub p2p_read: Option<bool>,
    pub p2p_direct: bool,
    pub p2p_direct_disable: bool,
    pub p2p_ll_threshold: Option<usize>,
}

impl TransportSettings {
    /// Whether GPU P2P may write straight into a peer's buffers (`WEFT_P2P_DIRECT` and
    /// `NCCL_P2P_DIRECT_DISABLE` both allow it).
    pub fn p2p_direct_writes(&self) -> bool {
        self.p2p_direct && !self.p2p_direct_disable
    }
}

/// The GPU communicator's algorithms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuSettings {
    pub algo: Option<GpuAlgo>,
    pub min_slices: Option<u32>,
    pub direct_window: u64,
    /// `WEFT_NVLS` as set: weft-cuda's opt-in gate alone decides what it means.
    pub nvls: Option<String>,
    /// `NCCL_NVLS_ENABLE` is not 0.
    pub nvls_enable: bool,
    pub nvls_nchannels: Option<u32>,
    pub nvls_chunksize: u64,
    /// `WEFT_NET_RECV_COPY`: received NET steps go to device memory by the copy engine.
    pub net_recv_copy: bool,
}

/// Compiling the kernels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelSettings {
    pub threads: u32,
    pub unroll: Option<u32>,
    pub cache: bool,
    pub cache_dir: Option<PathBuf>,
    /// `WEFT_KERNEL_BUNDLE` at run time: a bundle file, or `0` for none.
    pub bundle: Option<PathBuf>,
    pub nvrtc: Option<PathBuf>,
}

/// Logging.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DebugSettings {
    pub level: Option<DebugLevel>,
    /// `NCCL_DEBUG_SUBSYS` as given (libnccl reads the names it knows).
    pub subsys: Option<String>,
    /// `NCCL_DEBUG_FILE` as given (`%h` and `%p` not yet replaced).
    pub file: Option<String>,
    /// `WEFT_STATUS`: whether this process answers the job health query.
    pub status: bool,
}

/// Each group's `Default`: its part of [`Settings::default`] (every variable unset), so
/// that the table stays the one place defaults are written.
macro_rules! default_from_table {
    ($($group:ty => $($field:ident).+;)*) => {
        $(impl Default for $group {
            fn default() -> Self {
                Settings::default().$($field).+
            }
        })*
    };
}

default_from_table! {
    NetSettings => net;
    SocketSettings => net.socket;
    IbSettings => net.ib;
    GpuDirectSettings => net.gdr;
    MeshSettings => net.mesh;
    BootstrapSettings => bootstrap;
    TopologySettings => topology;
    TransportSettings => transport;
    GpuSettings => gpu;
    KernelSettings => kernels;
    DebugSettings => debug;
}

/// Every setting weft reads from the environment (see the [table](crate::table)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub net: NetSettings,
    pub bootstrap: BootstrapSettings,
    pub topology: TopologySettings,
    pub transport: TransportSettings,
    pub gpu: GpuSettings,
    pub kernels: KernelSettings,
    pub debug: DebugSettings,
    origins: Vec<Origin>,
    bad: Vec<BadValue>,
}

impl Default for Settings {
    /// Every variable unset.
    fn default() -> Self {
        Settings::from_lookup_or_defaults(&|_| None)
    }
}

impl Settings {
    /// The process environment. A value a variable refuses is an error naming the variable,
    /// the value and what is allowed (every such value, not only the first); the first read
    /// of the process environment logs the values ignored.
    pub fn from_env() -> Result<Settings, ConfigError> {
        let s = Settings::from_lookup_or_defaults(&lookup::process);
        s.warn_once(false);
        s.check()?;
        Ok(s)
    }

    /// The error [`Self::from_lookup`] returns for these settings, if any: every value
    /// refused rather than ignored.
    pub fn check(&self) -> Result<(), ConfigError> {
        self.check_groups(&Group::ALL)
    }

    /// [`Self::check`] for the variables of `groups` only: for code that runs inside another
    /// program (the net plugin inside NCCL) and must not fail on what it does not use.
    pub fn check_groups(&self, groups: &[Group]) -> Result<(), ConfigError> {
        let rejected: Vec<BadValue> = self
            .bad
            .iter()
            .filter(|b| !b.ignored)
            .filter(|b| t::find(b.name).is_none_or(|e| groups.contains(&e.info().group)))
            .cloned()
            .collect();
        if rejected.is_empty() {
            Ok(())
        } else {
            Err(ConfigError { bad: rejected })
        }
    }

    /// Logs the values refused, at the first read of the process environment: the ignored
    /// ones, and with `rejected_too` those a strict reader would have returned as errors.
    fn warn_once(&self, rejected_too: bool) {
        static WARNED: Once = Once::new();
        WARNED.call_once(|| {
            for b in self.bad.iter().filter(|b| b.ignored || rejected_too) {
                log::warn!("{b}");
            }
        });
    }

    /// As [`Self::from_env`], through `lookup` (tests pass their variables here).
    pub fn from_lookup(lookup: Lookup<'_>) -> Result<Settings, ConfigError> {
        let s = Settings::from_lookup_or_defaults(lookup);
        s.check()?;
        Ok(s)
    }

    /// The process environment, for callers that cannot fail: a refused value is replaced
    /// by its default and kept in [`Self::bad`]; the first read of the process environment
    /// logs the values it refused at WARN (whoever reads it strictly reports them as errors).
    pub fn from_env_or_defaults() -> Settings {
        let s = Settings::from_lookup_or_defaults(&lookup::process);
        s.warn_once(true);
        s
    }

    /// As [`Self::from_env_or_defaults`], through `lookup`, without logging.
    pub fn from_lookup_or_defaults(lookup: Lookup<'_>) -> Settings {
        let mut r = Reader {
            lookup,
            origins: Vec::new(),
            bad: Vec::new(),
        };
        let net = NetSettings {
            socket: SocketSettings {
                ifname: r.optional(&t::SOCKET_IFNAME),
                family: r.optional(&t::SOCKET_FAMILY),
                threads: r.value(&t::SOCKET_NTHREADS),
                sockets_per_thread: r.value(&t::NSOCKS_PERTHREAD),
                connect_timeout: r.value(&t::SOCKET_CONNECT_TIMEOUT),
                spin: r.optional(&t::SOCKET_SPIN_US),
                trace: r.optional(&t::SOCKET_TRACE),
            },
            ib: IbSettings {
                hca: r.optional(&t::IB_HCA),
                gid_index: r.optional(&t::IB_GID_INDEX),
                addr_family: r.value(&t::IB_ADDR_FAMILY),
                qps_per_connection: r.value(&t::IB_QPS_PER_CONNECTION),
                timeout: r.value(&t::IB_TIMEOUT),
                retry_cnt: r.value(&t::IB_RETRY_CNT),
                traffic_class: r.value(&t::IB_TC),
                service_level: r.value(&t::IB_SL),
                max_inline: r.value(&t::IB_INLINE),
                connect_timeout: r.value(&t::IB_CONNECT_TIMEOUT),
                force_flush: r.value(&t::IB_FORCE_FLUSH),
            },
            gdr: GpuDirectSettings {
                level: r.optional(&t::NET_GDR_LEVEL),
                dmabuf: r.value(&t::DMABUF_ENABLE),
                flush_disable: r.value(&t::GDR_FLUSH_DISABLE),
            },
            mesh: MeshSettings {
                ifname: r.optional(&t::MESH_IFNAME),
                transport: r.value(&t::MESH_TRANSPORT),
                max_rails: r.value(&t::MESH_RAILS),
                gid_index: r.optional(&t::MESH_GID_INDEX),
                debug: r.value(&t::MESH_DEBUG),
            },
            backend: r.value(&t::NET_BACKEND),
            nccl_net: r.optional(&t::NET),
            nccl_net_plugin: r.optional(&t::NET_PLUGIN),
        };
        let bootstrap = BootstrapSettings {
            timeout: r.value(&t::BOOTSTRAP_TIMEOUT),
            port: r.value(&t::BOOTSTRAP_PORT),
            hostid: r.optional(&t::HOSTID),
        };
        let topology = TopologySettings {
            topo_file: r.optional(&t::TOPO_FILE),
            topo_dump_file: r.optional(&t::TOPO_DUMP_FILE),
            graph_dump_file: r.optional(&t::GRAPH_DUMP_FILE),
            p2p_level: r.optional(&t::P2P_LEVEL),
            nvb_disable: r.value(&t::NVB_DISABLE),
            gdr_c2c: r.value(&t::NET_GDR_C2C),
            gdr_read: r.optional(&t::NET_GDR_READ),
            pxn_disable: r.value(&t::PXN_DISABLE),
            pxn_c2c: r.value(&t::PXN_C2C),
            nchannels: r.optional(&t::NCHANNELS),
            min_nchannels: r.optional(&t::MIN_NCHANNELS),
            max_nchannels: r.optional(&t::MAX_NCHANNELS),
        };
        let transport = TransportSettings {
            transport: r.value(&t::TRANSPORT),
            timeout: r.value(&t::TIMEOUT),
            conn_timeout: r.value(&t::CONN_TIMEOUT),
            wait_spins: r.optional(&t::WAIT_SPINS),
            wait_yields: r.optional(&t::WAIT_YIELDS),
            buffsize: r.optional(&t::BUFFSIZE),
            shm_buffsize: r.optional(&t::SHM_BUFFSIZE),
            net_buffsize: r.optional(&t::NET_BUFFSIZE),
            ll_buffsize: r.optional(&t::LL_BUFFSIZE),
            protocols: r.value(&t::PROTO),
            shm_dir: r.value(&t::SHM_DIR),
            shm_disable: r.value(&t::SHM_DISABLE),
            p2p_disable: r.value(&t::P2P_DISABLE),
            p2p_read: r.optional(&t::P2P_READ_ENABLE),
            p2p_direct: r.value(&t::P2P_DIRECT),
            p2p_direct_disable: r.value(&t::P2P_DIRECT_DISABLE),
            p2p_ll_threshold: r.optional(&t::P2P_LL_THRESHOLD),
        };
        let gpu = GpuSettings {
            algo: r.optional(&t::ALGO),
            min_slices: r.optional(&t::MIN_SLICES),
            direct_window: r.value(&t::DIRECT_WINDOW),
            nvls: r.optional(&t::NVLS),
            nvls_enable: r.value(&t::NVLS_ENABLE),
            nvls_nchannels: r.optional(&t::NVLS_NCHANNELS),
            nvls_chunksize: r.value(&t::NVLS_CHUNKSIZE),
            net_recv_copy: r.value(&t::NET_RECV_COPY),
        };
        let kernels = KernelSettings {
            threads: r.value(&t::KERNEL_THREADS),
            unroll: r.optional(&t::KERNEL_UNROLL),
            cache: r.value(&t::KERNEL_CACHE),
            cache_dir: r.optional(&t::CACHE_DIR),
            bundle: r.optional(&t::KERNEL_BUNDLE),
            nvrtc: r.optional(&t::NVRTC),
        };
        let debug = DebugSettings {
            level: r.optional(&t::DEBUG),
            subsys: r.optional(&t::DEBUG_SUBSYS),
            file: r.optional(&t::DEBUG_FILE),
            status: r.value(&t::STATUS),
        };
        Settings {
            net,
            bootstrap,
            topology,
            transport,
            gpu,
            kernels,
            debug,
            origins: r.origins,
            bad: r.bad,
        }
    }

    /// Every variable that was set (and parsed), in table order.
    pub fn origins(&self) -> &[Origin] {
        &self.origins
    }

    /// Where `var`'s value came from, if it was set.
    pub fn origin(&self, var: &VarInfo) -> Option<&Origin> {
        self.origins.iter().find(|o| std::ptr::eq(o.var, var))
    }

    /// The variables set to something other than their default, NCCL_DEBUG=INFO's list.
    pub fn changed(&self) -> impl Iterator<Item = &Origin> {
        self.origins.iter().filter(|o| o.differs)
    }

    /// Every value refused: ignored ones (their variables kept their defaults), and, from
    /// the `_or_defaults` readers, rejected ones.
    pub fn bad(&self) -> &[BadValue] {
        &self.bad
    }

    /// The refused value of `var`, if it had one.
    pub fn bad_value_of(&self, var: &VarInfo) -> Option<&BadValue> {
        self.bad.iter().find(|b| var.names.contains(&b.name))
    }

    /// Logs, at INFO, each variable that differs from its default as NCCL does
    /// (`NCCL_SOCKET_IFNAME set by environment to eth0`); only the first call in a process
    /// logs (communicator init calls it). Ignored values were logged when the process
    /// environment was read.
    pub fn log_changed_once(&self) {
        static LOGGED: Once = Once::new();
        LOGGED.call_once(|| {
            for o in self.changed() {
                log::info!("{} set by environment to {}", o.name, o.value);
            }
        });
    }
}
