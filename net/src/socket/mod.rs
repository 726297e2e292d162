//! `SocketNet`: the NET backend over TCP sockets (NCCL's `net_socket.cc` counterpart).
//!
//! Devices are the interfaces chosen by [`interface`] (NCCL_SOCKET_IFNAME rules). Each
//! connection is one control socket plus several data sockets served by helper threads
//! (`data_threads`); the control socket carries the matching protocol (`comm`) and small
//! messages, large messages are split across the data sockets. Connect and accept are
//! nonblocking state machines (`handshake`). Everything that waits has a deadline or an
//! abort path, and a peer that goes away turns into an error from `test`.
//!
//! Configured by [`SocketConfig`], built from weft-config's socket settings
//! (`NCCL_SOCKET_IFNAME`, `NCCL_SOCKET_FAMILY`, `NCCL_SOCKET_NTHREADS`,
//! `NCCL_NSOCKS_PERTHREAD`, `WEFT_SOCKET_CONNECT_TIMEOUT`, `WEFT_SOCKET_SPIN_US`,
//! `WEFT_SOCKET_TRACE`: docs/environment.md has their defaults and values).

mod comm;
mod data_threads;
mod handshake;
pub mod interface;
pub(crate) mod sys;
mod trace;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use weft_config::SocketSettings;
use weft_core::wire::socket_handle::{MAX_DATA_SOCKETS, MAX_THREADS, SocketHandleRepr};

use self::comm::Conn;
pub use self::handshake::{SocketConnecting, SocketListenComm};
use self::interface::{Family, Interface};
use super::{
    CommRef, Completion, NET_MAX_RECVS, Net, NetError, NetErrorKind, NetHandle, NetProperties,
    PtrKind, PtrSupport, RecvBuffer,
};

/// How the socket backend is set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketConfig {
    /// `NCCL_SOCKET_IFNAME` syntax; `None` applies NCCL's default order.
    pub ifname: Option<String>,
    /// Restrict to one address family.
    pub family: Option<Family>,
    /// Helper threads per connection.
    pub threads: u8,
    /// Data sockets per helper thread.
    pub sockets_per_thread: u8,
    /// How long a connect (TCP connects plus handshake) may take.
    pub connect_timeout: Duration,
    /// How long a helper thread keeps looking for work (yielding the CPU between looks)
    /// before it sleeps; waking a sleeping thread costs tens of microseconds per message.
    pub spin: Duration,
    /// Where each connection end writes its per-message timestamps on close
    /// (`WEFT_SOCKET_TRACE`; see `scripts/socket_trace.py`).
    pub trace: Option<PathBuf>,
}

/// What each end of a connection decides for itself (not carried in the handle).
#[derive(Debug, Clone, Default)]
pub(super) struct LocalSettings {
    pub spin: Duration,
    pub trace: Option<PathBuf>,
}

impl Default for SocketConfig {
    /// weft-config's defaults, on one CPU (no spin).
    fn default() -> Self {
        SocketConfig::of(&SocketSettings::default(), 1)
    }
}

/// From this many usable CPUs on, helper threads spin by default.
pub const SPIN_MIN_CORES: usize = 16;
/// How long helper threads spin by default on such machines.
pub const DEFAULT_SPIN: Duration = Duration::from_micros(50);

/// The spin used when `WEFT_SOCKET_SPIN_US` is not set: [`DEFAULT_SPIN`] where the process may
/// use at least [`SPIN_MIN_CORES`] CPUs, else none. Under NCCL's proxy a spinning thread
/// picks up each message without a wake-up: on a 64-core host a 2-rank all-reduce went from
/// 6.4-7.3 to 9.6-11.4 GB/s (docs/benchmarks.md). Where threads outnumber cores, spinning
/// costs more than it saves (see `data_threads`), hence the threshold.
pub fn default_spin(cores: usize) -> Duration {
    if cores >= SPIN_MIN_CORES {
        DEFAULT_SPIN
    } else {
        Duration::ZERO
    }
}

impl SocketConfig {
    /// The process environment's socket settings (weft-config). A malformed value is an
    /// error that names the variable.
    pub fn from_env() -> Result<SocketConfig, NetError> {
        SocketConfig::from_settings(&crate::settings_from_env()?.socket)
    }

    /// `settings`, on this machine (the number of usable CPUs decides the default spin);
    /// an error if threads x sockets per thread is more than a connection takes.
    pub fn from_settings(settings: &SocketSettings) -> Result<SocketConfig, NetError> {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        SocketConfig::from_settings_on(settings, cores)
    }

    /// As [`Self::from_settings`], on a machine where this process may run on `cores` CPUs.
    pub fn from_settings_on(
        settings: &SocketSettings,
        cores: usize,
    ) -> Result<SocketConfig, NetError> {
        let c = SocketConfig::of(settings, cores);
        c.data_sockets()?;
        Ok(c)
    }

    fn of(s: &SocketSettings, cores: usize) -> SocketConfig {
        SocketConfig {
            ifname: s.ifname.clone(),
            family: s.family,
            threads: s.threads,
            sockets_per_thread: s.sockets_per_thread,
            connect_timeout: s.connect_timeout,
            spin: s.spin.unwrap_or_else(|| default_spin(cores)),
            trace: s.trace.clone(),
        }
    }

    /// Data sockets per connection (threads x sockets per thread), checked against NCCL's
    /// limit of 64.
    pub fn data_sockets(&self) -> Result<u8, NetError> {
        let n = u32::from(self.threads) * u32::from(self.sockets_per_thread);
        if self.threads == 0
            || self.threads > MAX_THREADS
            || n == 0
            || n > u32::from(MAX_DATA_SOCKETS)
        {
            return Err(NetError::new(
                NetErrorKind::InvalidArgument,
                format!(
                    "{} threads x {} sockets per thread: need 1..={MAX_THREADS} threads and at \
                     most {MAX_DATA_SOCKETS} sockets in all",
                    self.threads, self.sockets_per_thread
                ),
            )
            .hint("adjust NCCL_SOCKET_NTHREADS / NCCL_NSOCKS_PERTHREAD"));
        }
        Ok(n as u8)
    }
}

/// The socket NET backend.
#[derive(Debug)]
pub struct SocketNet {
    config: SocketConfig,
    devices: Vec<Interface>,
}

impl SocketNet {
    /// Chooses interfaces per the environment.
    pub fn from_env() -> Result<SocketNet, NetError> {
        SocketNet::new(SocketConfig::from_env()?)
    }

    /// Chooses interfaces per `config`; an error (listing what exists) if none matches.
    pub fn new(config: SocketConfig) -> Result<SocketNet, NetError> {
        config.data_sockets()?;
        let available = interface::system_interfaces(config.family)?;
        let devices = interface::choose_interfaces(&available, config.ifname.as_deref());
        if devices.is_empty() {
            return Err(interface::no_interface_error(
                &available,
                config.ifname.as_deref(),
            ));
        }
        for (i, d) in devices.iter().enumerate() {
            log::info!("NET/Socket : Using [{i}]{}:{}", d.name, d.addr.ip());
        }
        Ok(SocketNet { config, devices })
    }

    /// A socket backend with no device of its own, for the mesh backend: it listens and
    /// connects on addresses the mesh chose (`listen_on`, `connect_from`), and its data path
    /// serves the comms that makes.
    pub(crate) fn without_devices(config: SocketConfig) -> Result<SocketNet, NetError> {
        config.data_sockets()?;
        Ok(SocketNet {
            config,
            devices: Vec::new(),
        })
    }

    /// Listens on `addr` (port 0: the kernel picks); a connection must repeat `nonce`.
    pub(crate) fn listen_on(
        &self,
        addr: SocketAddr,
        nonce: u64,
    ) -> Result<SocketListenComm, NetError> {
        SocketListenComm::bind(
            addr,
            self.config.data_sockets()?,
            self.config.threads,
            self.local(),
            Some(nonce),
        )
    }

    /// Starts a connect to the listener `handle` describes, from the local address `from`.
    pub(crate) fn connect_from(
        &self,
        handle: SocketHandleRepr,
        from: Option<std::net::IpAddr>,
    ) -> Result<SocketConnecting, NetError> {
        SocketConnecting::start(handle, self.config.connect_timeout, self.local(), from)
    }

    /// The configuration in use.
    pub fn config(&self) -> &SocketConfig {
        &self.config
    }

    /// The chosen interfaces, in device order.
    pub fn interfaces(&self) -> &[Interface] {
        &self.devices
    }

    fn local(&self) -> LocalSettings {
        LocalSettings {
            spin: self.config.spin,
            trace: self.config.trace.clone(),
        }
    }

    fn device(&self, dev: usize) -> Result<&Interface, NetError> {
        self.devices.get(dev).ok_or_else(|| {
            NetError::new(
                NetErrorKind::InvalidArgument,
                format!(
                    "socket device {dev} does not exist ({} devices)",
                    self.devices.len()
                ),
            )
        })
    }
}

fn read_sys(name: &str, file: &str) -> Option<String> {
    std::fs::read_to_string(format!("/sys/class/net/{name}/{file}"))
        .ok()
        .map(|s| s.trim().to_string())
}

/// The sending end of a socket connection.
#[derive(Debug)]
pub struct SocketSendComm {
    conn: Arc<Conn>,
}

impl SocketSendComm {
    fn new(conn: Arc<Conn>) -> Self {
        SocketSendComm { conn }
    }
    /// The listener's address.
    pub fn peer(&self) -> SocketAddr {
        self.conn.peer()
    }
}

impl Drop for SocketSendComm {
    fn drop(&mut self) {
        self.conn.close();
    }
}

/// The receiving end of a socket connection.
#[derive(Debug)]
pub struct SocketRecvComm {
    conn: Arc<Conn>,
}

impl SocketRecvComm {
    fn new(conn: Arc<Conn>) -> Self {
        SocketRecvComm { conn }
    }
    /// The connector's address.
    pub fn peer(&self) -> SocketAddr {
        self.conn.peer()
    }
}

impl Drop for SocketRecvComm {
    fn drop(&mut self) {
        self.conn.close();
    }
}

/// A socket memory registration: host memory needs none, so this only records the range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketMemHandle {
    /// Start of the registered range.
    pub addr: usize,
    /// Length of the registered range.
    pub size: usize,
}

/// An in-flight socket send or receive. Dropping one before `test` reported it done leaves
/// its slot (one of 32) busy and its buffer in use until the comm is closed.
#[derive(Debug)]
pub struct SocketRequest {
    conn: Arc<Conn>,
    slot: usize,
    generation: u32,
}

impl SocketRequest {
    /// Closes the comm this request belongs to: its data threads are stopped and joined, so no
    /// thread touches its buffers afterwards (the mesh backend's answer to a failure on another
    /// rail of the same connection).
    pub(crate) fn close_comm(&self) {
        self.conn.close();
    }
}

impl Net for SocketNet {
    type ListenComm = SocketListenComm;
    type SendComm = SocketSendComm;
    type RecvComm = SocketRecvComm;
    type Connecting = SocketConnecting;
    type MemHandle = SocketMemHandle;
    type Request = SocketRequest;

    fn name(&self) -> &str {
        "Socket"
    }

    fn devices(&self) -> usize {
        self.devices.len()
    }

    fn properties(&self, dev: usize) -> Result<NetProperties, NetError> {
        let d = self.device(dev)?;
        let pci_path = std::fs::canonicalize(format!("/sys/class/net/{}/device", d.name))
            .ok()
            .map(|p| p.to_string_lossy().into_owned());
        // NCCL's default when the kernel reports no speed (virtual NICs, lo): 10 Gb/s.
        let speed_mbps = read_sys(&d.name, "speed")
            .and_then(|s| s.parse::<i64>().ok())
            .filter(|&s| s > 0)
            .and_then(|s| u32::try_from(s).ok())
            .unwrap_or(10_000);
        Ok(NetProperties {
            name: d.name.clone(),
            pci_path,
            guid: dev as u64,
            ptr_support: PtrSupport::HOST,
            reg_is_global: true,
            speed_mbps,
            port: 0,
            latency_us: 0.0,
            max_comms: 65_536,
            max_recvs: NET_MAX_RECVS as u32,
        })
    }

    fn listen(&self, dev: usize) -> Result<(NetHandle, SocketListenComm), NetError> {
        let d = self.device(dev)?;
        let listen = SocketListenComm::bind(
            d.addr,
            self.config.data_sockets()?,
            self.config.threads,
            self.local(),
            None,
        )?;
        let mut handle = NetHandle::default();
        listen.handle().emit(&mut handle.0).map_err(|e| {
            NetError::new(NetErrorKind::InvalidHandle(e), "encode the listen handle").cause(e)
        })?;
        Ok((handle, listen))
    }

    fn connect(
        &self,
        dev: usize,
        handle: &NetHandle,
        state: &mut Option<SocketConnecting>,
    ) -> Result<Option<SocketSendComm>, NetError> {
        self.device(dev)?;
        if state.is_none() {
            let repr = SocketHandleRepr::parse_bytes(&handle.0).map_err(|e| {
                NetError::new(
                    NetErrorKind::InvalidHandle(e),
                    "connect: the listen handle is invalid",
                )
                .cause(e)
                .hint("the handle must come unchanged from the peer's listen (same weft build)")
            })?;
            *state = Some(SocketConnecting::start(
                repr,
                self.config.connect_timeout,
                self.local(),
                None,
            )?);
        }
        let Some(connecting) = state.as_mut() else {
            return Ok(None);
        };
        match connecting.poll() {
            Ok(Some(comm)) => {
                *state = None;
                Ok(Some(comm))
            }
            Ok(None) => Ok(None),
            Err(e) => {
                *state = None;
                Err(e)
            }
        }
    }

    fn accept(&self, listen: &mut SocketListenComm) -> Result<Option<SocketRecvComm>, NetError> {
        listen.poll_accept()
    }

    unsafe fn reg_mr(
        &self,
        _comm: CommRef<'_, SocketSendComm, SocketRecvComm>,
        data: *mut u8,
        size: usize,
        kind: PtrKind,
    ) -> Result<SocketMemHandle, NetError> {
        if kind != PtrKind::Host {
            return Err(NetError::new(
                NetErrorKind::Unsupported,
                "register CUDA memory with the socket backend",
            )
            .hint(
                "sockets move host memory only (ptr_support = HOST); stage through host buffers",
            ));
        }
        Ok(SocketMemHandle {
            addr: data as usize,
            size,
        })
    }

    fn dereg_mr(&self, _mr: SocketMemHandle) -> Result<(), NetError> {
        Ok(())
    }

    unsafe fn isend(
        &self,
        comm: &mut SocketSendComm,
        data: *const u8,
        size: usize,
        tag: u32,
        _mr: &SocketMemHandle,
    ) -> Result<Option<SocketRequest>, NetError> {
        if data.is_null() && size > 0 {
            return Err(NetError::new(
                NetErrorKind::InvalidArgument,
                format!("isend of {size} bytes from a null pointer"),
            ));
        }
        Ok(comm
            .conn
            .post_send(data as usize, size, tag)?
            .map(|(slot, generation)| SocketRequest {
                conn: Arc::clone(&comm.conn),
                slot,
                generation,
            }))
    }

    unsafe fn isend_batch(
        &self,
        comm: &mut SocketSendComm,
        sends: &[(*const u8, usize, u32)],
        _mr: &SocketMemHandle,
    ) -> Result<Vec<SocketRequest>, NetError> {
        if let Some(&(_, size, _)) = sends.iter().find(|(d, size, _)| d.is_null() && *size > 0) {
            return Err(NetError::new(
                NetErrorKind::InvalidArgument,
                format!("isend of {size} bytes from a null pointer"),
            ));
        }
        let raw: Vec<(usize, usize, u32)> = sends
            .iter()
            .map(|&(data, size, tag)| (data as usize, size, tag))
            .collect();
        Ok(comm
            .conn
            .post_sends(&raw)?
            .into_iter()
            .map(|(slot, generation)| SocketRequest {
                conn: Arc::clone(&comm.conn),
                slot,
                generation,
            })
            .collect())
    }

    unsafe fn irecv(
        &self,
        comm: &mut SocketRecvComm,
        bufs: &[RecvBuffer<'_, SocketMemHandle>],
    ) -> Result<Option<SocketRequest>, NetError> {
        if let Some(b) = bufs.iter().find(|b| b.data.is_null() && b.size > 0) {
            return Err(NetError::new(
                NetErrorKind::InvalidArgument,
                format!("irecv of {} bytes into a null pointer", b.size),
            ));
        }
        // post_recv rejects 0 or more than NET_MAX_RECVS buffers.
        let raw: Vec<(usize, usize, u32)> = bufs
            .iter()
            .map(|b| (b.data as usize, b.size, b.tag))
            .collect();
        Ok(comm
            .conn
            .post_recv(&raw)?
            .map(|(slot, generation)| SocketRequest {
                conn: Arc::clone(&comm.conn),
                slot,
                generation,
            }))
    }

    unsafe fn iflush(
        &self,
        _comm: &mut SocketRecvComm,
        _bufs: &[RecvBuffer<'_, SocketMemHandle>],
    ) -> Result<Option<SocketRequest>, NetError> {
        // Host memory written by recv(2) is visible once the request completed.
        Ok(None)
    }

    fn test(&self, request: &mut SocketRequest) -> Result<Option<Completion>, NetError> {
        request.conn.test(request.slot, request.generation)
    }

    fn close_send(&self, comm: SocketSendComm) -> Result<(), NetError> {
        drop(comm);
        Ok(())
    }

    fn close_recv(&self, comm: SocketRecvComm) -> Result<(), NetError> {
        drop(comm);
        Ok(())
    }

    fn close_listen(&self, comm: SocketListenComm) -> Result<(), NetError> {
        drop(comm);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_config::Settings;

    fn settings(vars: &[(&str, &str)]) -> Result<SocketSettings, NetError> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let lookup = move |n: &str| vars.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
        Ok(Settings::from_lookup(&lookup)?.net.socket)
    }

    fn config(vars: &[(&str, &str)]) -> Result<SocketConfig, NetError> {
        SocketConfig::from_settings(&settings(vars)?)
    }

    #[test]
    fn defaults_and_nccl_names() {
        let c = config(&[]).unwrap();
        assert_eq!(c, SocketConfig::default());
        assert_eq!((c.threads, c.sockets_per_thread), (4, 1));
        let c = config(&[
            ("NCCL_SOCKET_IFNAME", "^docker"),
            ("NCCL_SOCKET_FAMILY", "AF_INET6"),
            ("NCCL_SOCKET_NTHREADS", "2"),
            ("NCCL_NSOCKS_PERTHREAD", "3"),
        ])
        .unwrap();
        assert_eq!(c.ifname.as_deref(), Some("^docker"));
        assert_eq!(c.family, Some(Family::V6));
        assert_eq!(c.data_sockets().unwrap(), 6);
    }

    #[test]
    fn weft_names_win_and_bad_values_name_the_variable() {
        let c = config(&[
            ("WEFT_SOCKET_IFNAME", "=lo"),
            ("NCCL_SOCKET_IFNAME", "eth"),
            ("WEFT_SOCKET_NTHREADS", "8"),
            ("NCCL_SOCKET_NTHREADS", "1"),
            ("WEFT_SOCKET_CONNECT_TIMEOUT", "7"),
        ])
        .unwrap();
        assert_eq!(c.ifname.as_deref(), Some("=lo"));
        assert_eq!(c.threads, 8);
        assert_eq!(c.connect_timeout, Duration::from_secs(7));
        let e = config(&[("NCCL_SOCKET_NTHREADS", "17")]).unwrap_err();
        assert!(e.to_string().contains("NCCL_SOCKET_NTHREADS=\"17\""), "{e}");
        let e = config(&[("NCCL_SOCKET_FAMILY", "AF_UNIX")]).unwrap_err();
        assert!(e.to_string().contains("AF_INET or AF_INET6"), "{e}");
        let e = config(&[
            ("NCCL_SOCKET_NTHREADS", "16"),
            ("NCCL_NSOCKS_PERTHREAD", "5"),
        ])
        .unwrap_err();
        assert!(e.to_string().contains("at most 64"), "{e}");
    }

    #[test]
    fn spin_defaults_by_core_count_and_is_read_in_microseconds() {
        let none = settings(&[]).unwrap();
        assert_eq!(
            SocketConfig::from_settings_on(&none, 2).unwrap().spin,
            Duration::ZERO
        );
        assert_eq!(
            SocketConfig::from_settings_on(&none, 15).unwrap().spin,
            Duration::ZERO
        );
        assert_eq!(
            SocketConfig::from_settings_on(&none, 16).unwrap().spin,
            DEFAULT_SPIN
        );
        assert_eq!(
            SocketConfig::from_settings_on(&none, 64).unwrap().spin,
            DEFAULT_SPIN
        );
        let zero = settings(&[("WEFT_SOCKET_SPIN_US", "0")]).unwrap();
        assert_eq!(
            SocketConfig::from_settings_on(&zero, 64).unwrap().spin,
            Duration::ZERO
        );
        let c = config(&[("WEFT_SOCKET_SPIN_US", "75")]).unwrap();
        assert_eq!(c.spin, Duration::from_micros(75));
        let e = config(&[("WEFT_SOCKET_SPIN_US", "100001")]).unwrap_err();
        assert!(
            e.to_string().contains("WEFT_SOCKET_SPIN_US=\"100001\""),
            "{e}"
        );
        let e = config(&[("WEFT_SOCKET_SPIN_US", "-3")]).unwrap_err();
        assert!(e.to_string().contains("WEFT_SOCKET_SPIN_US"), "{e}");
    }
}
