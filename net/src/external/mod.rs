//! [`ExternalNet`]: a [`Net`] over an NCCL net plugin that weft loads itself, as NCCL does
//! with `NCCL_NET_PLUGIN`, so that weft's communicator runs on fabrics that only have a
//! vendor plugin (and on weft's own `libnccl-net-weft.so`, which is how it is tested).
//!
//! - [`library`]: which files `NCCL_NET_PLUGIN` names, opening them, probing the table
//!   (`ncclNetPlugin_v11` down to `_v8`, the versions NCCL 2.28 loads that weft declares).
//! - [`table`]: one call shape over the four table versions.
//! - [`logger`]: the plugin's log messages into the `log` crate.
//!
//! [`open_requested`] chooses as NCCL 2.28's `ncclNetInit` does: the plugins of
//! `NCCL_NET_PLUGIN` in order (unset: `libnccl-net.so`), the first that loads, initialises
//! and has a device wins, unless `NCCL_NET` names another network, matched by name without
//! regard to case. A plugin that fails to load is skipped with NCCL's message; one that the
//! user asked for by `NCCL_NET` is an error that names every file tried and the loader's
//! answer.
//!
//! What is not supported: device (GPU-initiated) networking (`netDeviceType` other than
//! host), virtual NICs (`makeVDevice`), DMA-BUF registration, `setNetAttr` hints, the
//! CollNet and GIN tables, and floating-point arguments in the plugin's log messages (see
//! [`logger`]). Nothing here unwinds into the plugin or blocks beyond what the plugin does.

pub mod library;
pub mod logger;
pub mod table;

use std::ffi::{CStr, c_char, c_int, c_void};
use std::ptr::{NonNull, null_mut};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::nccl_abi::{
    CommConfig, NCCL_PTR_CUDA, NCCL_PTR_HOST, NCCL_REMOTE_ERROR, NCCL_SYSTEM_ERROR, NcclResult,
    result_name,
};
use crate::{
    CommRef, Completion, NET_MAX_RECVS, Net, NetError, NetErrorKind, NetHandle, NetProperties,
    PtrKind, PtrSupport, RecvBuffer,
};

use library::{LoadError, PluginLibrary, PluginRequest};
use table::{AbiVersion, CommKind, Table};

/// `NCCL_NET_TRAFFIC_CLASS_UNDEF`: no traffic class asked for.
const TRAFFIC_CLASS_UNDEF: c_int = -1;

/// A loaded, initialised plugin: its table, its context (v11) and its device count.
#[derive(Debug)]
pub struct ExternalNet {
    path: String,
    name: String,
    table: Table,
    /// What v11's `init` returned (NULL before v11), passed to listen and connect.
    context: *mut c_void,
    devices: usize,
}

// SAFETY: NCCL calls a plugin from several threads at once (connections are set up on the
// caller's thread while its proxy threads progress others), so the plugin ABI requires the
// functions to be callable from any thread; the context is an opaque value for them.
unsafe impl Send for ExternalNet {}
// SAFETY: as above: every method only passes the context and comms back to the plugin.
unsafe impl Sync for ExternalNet {}

/// A listen comm of the plugin.
#[derive(Debug)]
pub struct ExternalListenComm(NonNull<c_void>);
/// A send comm of the plugin.
#[derive(Debug)]
pub struct ExternalSendComm(NonNull<c_void>);
/// A receive comm of the plugin.
#[derive(Debug)]
pub struct ExternalRecvComm(NonNull<c_void>);

/// A connect in progress: the peer's handle, which the plugin may rewrite between calls
/// (NCCL's own plugins keep their connect stage in it), so every call passes this copy.
#[derive(Debug)]
pub struct ExternalConnecting {
    handle: Box<NetHandle>,
}

/// A registration: the plugin's handle (NULL is valid: some plugins need none for host
/// memory) and the comm it was made on, which `deregMr` takes.
#[derive(Debug)]
pub struct ExternalMemHandle {
    comm: *mut c_void,
    mhandle: *mut c_void,
}

/// A request in flight.
#[derive(Debug)]
pub struct ExternalRequest {
    request: NonNull<c_void>,
    /// How many sizes `test` reports (1 for a send, n for a grouped receive).
    buffers: usize,
    done: bool,
}

// SAFETY: plugin objects are opaque pointers that NCCL creates on one thread and
// progresses on another (its proxy thread), which the plugin ABI therefore allows; weft
// only hands them back to the plugin. The same holds for the four below.
unsafe impl Send for ExternalListenComm {}
// SAFETY: see above.
unsafe impl Send for ExternalSendComm {}
// SAFETY: see above.
unsafe impl Send for ExternalRecvComm {}
// SAFETY: see above.
unsafe impl Send for ExternalRequest {}
// SAFETY: see above; a registration is only read (passed to isend/irecv from any thread).
unsafe impl Send for ExternalMemHandle {}
// SAFETY: see above.
unsafe impl Sync for ExternalMemHandle {}

/// A fresh id per `init`, for v11's `commId` (NCCL passes its communicator's hash).
fn comm_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    u64::from(std::process::id()) << 32 | NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Text of a C string the plugin owns (NULL is `None`).
///
/// # Safety
/// `s` is NULL or a NUL-terminated string alive for the call.
unsafe fn c_text(s: *const c_char) -> Option<String> {
    if s.is_null() {
        return None;
    }
    // SAFETY: the contract.
    Some(unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned())
}

impl ExternalNet {
    /// Initialises a loaded plugin (`init`, then `devices`), as NCCL does for each
    /// communicator. A plugin without devices is an error, as in NCCL.
    pub fn init(library: PluginLibrary) -> Result<ExternalNet, NetError> {
        let PluginLibrary { path, table } = library;
        // SAFETY: the table was checked; its name is NULL or a string in the plugin's
        // read-only data, which is never unloaded.
        let name = unsafe { c_text(table.name()) }.ok_or_else(|| {
            NetError::new(
                NetErrorKind::InvalidArgument,
                format!("NET plugin {path}: its table has no name"),
            )
        })?;
        let mut context = null_mut();
        let mut config = CommConfig {
            traffic_class: TRAFFIC_CLASS_UNDEF,
        };
        // SAFETY: the logger is a plain function, callable from any thread for good.
        let code =
            unsafe { table.init(&mut context, comm_id(), &mut config, logger::debug_logger()) };
        let mut net = ExternalNet {
            path,
            name,
            table,
            context,
            devices: 0,
        };
        net.check("init", code)?;
        let mut ndev: c_int = 0;
        let code = net.table.devices(&mut ndev);
        net.check("devices", code)?;
        net.devices = match usize::try_from(ndev) {
            Ok(n) if n > 0 => n,
            _ => {
                return Err(NetError::new(
                    NetErrorKind::Unsupported,
                    format!(
                        "NET plugin {} ({}): devices returned {ndev} devices",
                        net.name, net.path
                    ),
                )
                .hint("the plugin found no NIC it can drive here; its log says why"));
            }
        };
        log::info!(
            "NET/Plugin: Initialized NET plugin {} (ncclNet v{}, {}): {} device(s)",
            net.name,
            net.table.version().number(),
            net.path,
            net.devices
        );
        Ok(net)
    }

    /// Where the plugin was loaded from.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The table version in use (8..=11).
    pub fn abi_version(&self) -> u32 {
        self.table.version().number()
    }

    /// `Ok` for `ncclSuccess`, else an error naming the plugin, the function and the code.
    fn check(&self, function: &str, code: NcclResult) -> Result<(), NetError> {
        if code == 0 {
            Ok(())
        } else {
            Err(self.failed(function, code))
        }
    }

    /// The error for a failing `code` of `function`.
    fn failed(&self, function: &str, code: NcclResult) -> NetError {
        let kind = match code {
            NCCL_SYSTEM_ERROR => NetErrorKind::Io(std::io::ErrorKind::Other),
            NCCL_REMOTE_ERROR => NetErrorKind::PeerClosed,
            4 | 5 => NetErrorKind::InvalidArgument,
            other => NetErrorKind::Plugin(other),
        };
        NetError::new(
            kind,
            format!(
                "NET plugin {} ({}): {function} returned {} ({code})",
                self.name,
                self.path,
                result_name(code)
            ),
        )
        .hint("the plugin's own messages (WEFT_DEBUG=INFO) say why")
    }

    fn null(&self, function: &str, what: &str) -> NetError {
        NetError::new(
            NetErrorKind::Plugin(0),
            format!(
                "NET plugin {} ({}): {function} returned ncclSuccess without a {what}",
                self.name, self.path
            ),
        )
    }

    fn dev(&self, dev: usize) -> Result<c_int, NetError> {
        match c_int::try_from(dev) {
            Ok(d) if dev < self.devices => Ok(d),
            _ => Err(NetError::new(
                NetErrorKind::InvalidArgument,
                format!(
                    "NET plugin {}: device {dev} out of range (it has {})",
                    self.name, self.devices
                ),
            )),
        }
    }

    fn too_large(&self, size: usize) -> NetError {
        NetError::new(
            NetErrorKind::InvalidArgument,
            format!(
                "NET plugin {} ({}): {size} bytes exceed the int size of ncclNet_v8",
                self.name, self.path
            ),
        )
    }

    fn close(&self, kind: CommKind, comm: NonNull<c_void>) -> Result<(), NetError> {
        // SAFETY: the comm is a live one of this kind (the types say which), consumed here.
        let code = unsafe { self.table.close(kind, comm.as_ptr()) };
        self.check(kind.close_name(), code)
    }
}

impl Drop for ExternalNet {
    fn drop(&mut self) {
        // SAFETY: the context is this net's, from its init, finalised only here.
        let code = unsafe { self.table.finalize(self.context) };
        if let Err(e) = self.check("finalize", code) {
            log::warn!("{e}");
        }
    }
}

impl Net for ExternalNet {
    type ListenComm = ExternalListenComm;
    type SendComm = ExternalSendComm;
    type RecvComm = ExternalRecvComm;
    type Connecting = ExternalConnecting;
    type MemHandle = ExternalMemHandle;
    type Request = ExternalRequest;

    fn name(&self) -> &str {
        &self.name
    }

    fn devices(&self) -> usize {
        self.devices
    }

    fn properties(&self, dev: usize) -> Result<NetProperties, NetError> {
        let d = self.dev(dev)?;
        let p = self
            .table
            .properties(d)
            .map_err(|code| self.failed("getProperties", code))?;
        let mut ptr_support = PtrSupport::default();
        for (bit, kind) in [
            (NCCL_PTR_HOST, PtrSupport::HOST),
            (NCCL_PTR_CUDA, PtrSupport::CUDA),
        ] {
            if p.ptr_support & bit != 0 {
                ptr_support = ptr_support | kind;
            }
        }
        Ok(NetProperties {
            // SAFETY: the plugin's strings, valid until its next getProperties call at least.
            name: unsafe { c_text(p.name) }.unwrap_or_else(|| format!("{}[{dev}]", self.name)),
            // SAFETY: as above.
            pci_path: unsafe { c_text(p.pci_path) },
            guid: p.guid,
            ptr_support,
            reg_is_global: p.reg_is_global != 0,
            speed_mbps: u32::try_from(p.speed).unwrap_or(0),
            port: u32::try_from(p.port).unwrap_or(0),
            latency_us: p.latency,
            max_comms: u32::try_from(p.max_comms).unwrap_or(0),
            max_recvs: u32::try_from(p.max_recvs)
                .unwrap_or(1)
                .clamp(1, NET_MAX_RECVS as u32),
        })
    }

    fn listen(&self, dev: usize) -> Result<(NetHandle, ExternalListenComm), NetError> {
        let d = self.dev(dev)?;
        let mut handle = NetHandle::default();
        let mut comm = null_mut();
        // SAFETY: the handle holds NCCL_NET_HANDLE_MAXSIZE bytes; the context is ours.
        let code = unsafe {
            self.table
                .listen(self.context, d, handle.0.as_mut_ptr().cast(), &mut comm)
        };
        self.check("listen", code)?;
        let comm = NonNull::new(comm).ok_or_else(|| self.null("listen", "listen comm"))?;
        Ok((handle, ExternalListenComm(comm)))
    }

    fn connect(
        &self,
        dev: usize,
        handle: &NetHandle,
        state: &mut Option<ExternalConnecting>,
    ) -> Result<Option<ExternalSendComm>, NetError> {
        let d = self.dev(dev)?;
        let connecting = state.get_or_insert_with(|| ExternalConnecting {
            handle: Box::new(*handle),
        });
        let mut config = CommConfig {
            traffic_class: TRAFFIC_CLASS_UNDEF,
        };
        let mut comm = null_mut();
        // SAFETY: the handle buffer is this connect's own copy, the same on every call and
        // NCCL_NET_HANDLE_MAXSIZE bytes long; the context is ours.
        let code = unsafe {
            self.table.connect(
                self.context,
                d,
                &mut config,
                connecting.handle.0.as_mut_ptr().cast(),
                &mut comm,
            )
        };
        if let Err(e) = self.check("connect", code) {
            *state = None;
            return Err(e);
        }
        Ok(NonNull::new(comm).map(|c| {
            *state = None;
            ExternalSendComm(c)
        }))
    }

    fn accept(
        &self,
        listen: &mut ExternalListenComm,
    ) -> Result<Option<ExternalRecvComm>, NetError> {
        let mut comm = null_mut();
        // SAFETY: the listen comm is live (not closed: closing consumes it).
        let code = unsafe { self.table.accept(listen.0.as_ptr(), &mut comm) };
        self.check("accept", code)?;
        Ok(NonNull::new(comm).map(ExternalRecvComm))
    }

    unsafe fn reg_mr(
        &self,
        comm: CommRef<'_, ExternalSendComm, ExternalRecvComm>,
        data: *mut u8,
        size: usize,
        kind: PtrKind,
    ) -> Result<ExternalMemHandle, NetError> {
        let comm = match comm {
            CommRef::Send(c) => c.0.as_ptr(),
            CommRef::Recv(c) => c.0.as_ptr(),
        };
        let ptr_type = match kind {
            PtrKind::Host => NCCL_PTR_HOST,
            PtrKind::Cuda => NCCL_PTR_CUDA,
        };
        let mut mhandle = null_mut();
        // SAFETY: the caller's contract (memory of `kind`, valid until deregistered) is the
        // plugin's; the comm is live.
        let code = unsafe {
            self.table
                .reg_mr(comm, data.cast(), size, ptr_type, &mut mhandle)
        };
        self.check("regMr", code)?;
        Ok(ExternalMemHandle { comm, mhandle })
    }

    fn dereg_mr(&self, mr: ExternalMemHandle) -> Result<(), NetError> {
        // SAFETY: the handle came from regMr on that comm (the trait's contract: no request
        // still uses it, and its comm is not closed before its registrations).
        let code = unsafe { self.table.dereg_mr(mr.comm, mr.mhandle) };
        self.check("deregMr", code)
    }

    unsafe fn isend(
        &self,
        comm: &mut ExternalSendComm,
        data: *const u8,
        size: usize,
        tag: u32,
        mr: &ExternalMemHandle,
    ) -> Result<Option<ExternalRequest>, NetError> {
        if self.table.version() == AbiVersion::V8 && c_int::try_from(size).is_err() {
            return Err(self.too_large(size));
        }
        let mut request = null_mut();
        // SAFETY: the caller's contract for the buffer is the plugin's; the comm is live.
        let code = unsafe {
            self.table.isend(
                comm.0.as_ptr(),
                data.cast_mut().cast(),
                size,
                c_int::from_ne_bytes(tag.to_ne_bytes()),
                mr.mhandle,
                &mut request,
            )
        };
        self.check("isend", code)?;
        Ok(NonNull::new(request).map(|request| ExternalRequest {
            request,
            buffers: 1,
            done: false,
        }))
    }

    unsafe fn irecv(
        &self,
        comm: &mut ExternalRecvComm,
        bufs: &[RecvBuffer<'_, ExternalMemHandle>],
    ) -> Result<Option<ExternalRequest>, NetError> {
        if bufs.is_empty() || bufs.len() > NET_MAX_RECVS {
            return Err(NetError::new(
                NetErrorKind::InvalidArgument,
                format!(
                    "NET plugin {}: irecv of {} buffers (1 to {NET_MAX_RECVS})",
                    self.name,
                    bufs.len()
                ),
            ));
        }
        if self.table.version() == AbiVersion::V8 {
            if let Some(b) = bufs.iter().find(|b| c_int::try_from(b.size).is_err()) {
                return Err(self.too_large(b.size));
            }
        }
        let mut data: Vec<*mut c_void> = bufs.iter().map(|b| b.data.cast()).collect();
        let mut sizes: Vec<usize> = bufs.iter().map(|b| b.size).collect();
        let mut tags: Vec<c_int> = bufs
            .iter()
            .map(|b| c_int::from_ne_bytes(b.tag.to_ne_bytes()))
            .collect();
        let mut mhandles: Vec<*mut c_void> = bufs.iter().map(|b| b.mr.mhandle).collect();
        let mut request = null_mut();
        // SAFETY: the caller's contract for the buffers is the plugin's; the comm is live;
        // the arrays have one entry per buffer.
        let code = unsafe {
            self.table.irecv(
                comm.0.as_ptr(),
                &mut data,
                &mut sizes,
                &mut tags,
                &mut mhandles,
                &mut request,
            )
        };
        self.check("irecv", code)?;
        Ok(NonNull::new(request).map(|request| ExternalRequest {
            request,
            buffers: bufs.len(),
            done: false,
        }))
    }

    unsafe fn iflush(
        &self,
        comm: &mut ExternalRecvComm,
        bufs: &[RecvBuffer<'_, ExternalMemHandle>],
    ) -> Result<Option<ExternalRequest>, NetError> {
        let mut data: Vec<*mut c_void> = bufs.iter().map(|b| b.data.cast()).collect();
        let sizes: Result<Vec<c_int>, _> = bufs.iter().map(|b| c_int::try_from(b.size)).collect();
        let mut sizes = sizes
            .map_err(|_| self.too_large(bufs.iter().map(|b| b.size).max().unwrap_or_default()))?;
        let mut mhandles: Vec<*mut c_void> = bufs.iter().map(|b| b.mr.mhandle).collect();
        let mut request = null_mut();
        // SAFETY: as for irecv: the caller's contract, a live comm, one entry per buffer.
        let code = unsafe {
            self.table.iflush(
                comm.0.as_ptr(),
                &mut data,
                &mut sizes,
                &mut mhandles,
                &mut request,
            )
        };
        self.check("iflush", code)?;
        Ok(NonNull::new(request).map(|request| ExternalRequest {
            request,
            buffers: bufs.len(),
            done: false,
        }))
    }

    fn test(&self, request: &mut ExternalRequest) -> Result<Option<Completion>, NetError> {
        if request.done {
            return Err(NetError::new(
                NetErrorKind::InvalidArgument,
                format!(
                    "NET plugin {}: a request tested again after it completed",
                    self.name
                ),
            ));
        }
        let mut done: c_int = 0;
        let mut sizes: [c_int; NET_MAX_RECVS] = [0; NET_MAX_RECVS];
        // SAFETY: the request is in flight (not reported done: checked above).
        let code = unsafe {
            self.table
                .test(request.request.as_ptr(), &mut done, &mut sizes)
        };
        if let Err(e) = self.check("test", code) {
            // NCCL treats a failed test as the end of the request.
            request.done = true;
            return Err(e);
        }
        if done == 0 {
            return Ok(None);
        }
        request.done = true;
        let mut moved = [0usize; NET_MAX_RECVS];
        for (dst, &s) in moved.iter_mut().zip(&sizes).take(request.buffers) {
            *dst = usize::try_from(s).map_err(|_| {
                NetError::new(
                    NetErrorKind::Plugin(0),
                    format!(
                        "NET plugin {}: test reported a negative size ({s})",
                        self.name
                    ),
                )
            })?;
        }
        Ok(Some(Completion::new(
            moved.get(..request.buffers).unwrap_or(&moved),
        )))
    }

    fn close_send(&self, comm: ExternalSendComm) -> Result<(), NetError> {
        self.close(CommKind::Send, comm.0)
    }

    fn close_recv(&self, comm: ExternalRecvComm) -> Result<(), NetError> {
        self.close(CommKind::Recv, comm.0)
    }

    fn close_listen(&self, comm: ExternalListenComm) -> Result<(), NetError> {
        self.close(CommKind::Listen, comm.0)
    }
}

/// What became of one entry of `NCCL_NET_PLUGIN`.
#[derive(Debug)]
enum Skipped {
    Load(LoadError),
    Init(NetError),
    /// Loaded and named `name`, which is not what `NCCL_NET` asks for.
    OtherName {
        name: String,
        path: String,
    },
}

impl std::fmt::Display for Skipped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Skipped::Load(e) => write!(f, "{e}"),
            Skipped::Init(e) => write!(f, "{e}"),
            Skipped::OtherName { name, path } => write!(f, "{path} is the network {name}"),
        }
    }
}

/// The external net `NCCL_NET_PLUGIN` (`plugin_setting`) and `NCCL_NET` (`nccl_net`) choose,
/// as NCCL 2.28 does; `Ok(None)` means weft's own networks serve (`own_names`: their names,
/// which `NCCL_NET` may select instead of a plugin).
///
/// Each entry is tried in order; one that fails to load or initialise is skipped, logged in
/// NCCL's words (at WARN when the user set `NCCL_NET_PLUGIN`, at INFO for NCCL's default
/// `libnccl-net.so`, which is usually absent). An error only when `NCCL_NET` asks for a
/// network that is neither a plugin that initialised nor one of weft's own while
/// `NCCL_NET_PLUGIN` is set: the user wanted that plugin, and the error says why each entry
/// failed (the file tried and the loader's answer).
pub fn open_requested(
    plugin_setting: Option<&str>,
    nccl_net: Option<&str>,
    own_names: &[&str],
) -> Result<Option<ExternalNet>, NetError> {
    let request = PluginRequest::from_setting(plugin_setting);
    let wanted = nccl_net.map(str::trim).filter(|n| !n.is_empty());
    if let Some(name) = wanted.filter(|w| own_names.iter().any(|o| o.eq_ignore_ascii_case(w))) {
        log::info!("NET/Plugin: NCCL_NET={name} is weft's own network; no plugin loaded");
        return Ok(None);
    }
    let mut skipped = Vec::new();
    for entry in &request.entries {
        let outcome = library::open(entry).map_err(Skipped::Load).and_then(|lib| {
            log::info!(
                "NET/Plugin: Successfully loaded external network plugin {}",
                lib.path
            );
            // SAFETY: the table was checked; its name is NULL or a static string.
            let name = unsafe { c_text(lib.table.name()) }.unwrap_or_default();
            match wanted {
                Some(w) if !w.eq_ignore_ascii_case(&name) => Err(Skipped::OtherName {
                    name,
                    path: lib.path,
                }),
                _ => ExternalNet::init(lib).map_err(Skipped::Init),
            }
        });
        match outcome {
            Ok(net) => return Ok(Some(net)),
            Err(why) => {
                let quiet = !request.explicit || matches!(why, Skipped::OtherName { .. });
                if quiet {
                    log::info!("{why}");
                } else if wanted.is_none() {
                    log::warn!("{why}; trying the next network (weft's own come last)");
                } else {
                    log::warn!("{why}");
                }
                skipped.push(why);
            }
        }
    }
    match wanted {
        Some(name) if request.explicit => {
            let mut why = String::new();
            for s in &skipped {
                why.push_str("; ");
                why.push_str(&s.to_string());
            }
            Err(NetError::new(
                NetErrorKind::InvalidArgument,
                format!(
                    "Failed to initialize any NET plugin: NCCL_NET={name} is none of weft's \
                     networks ({}) and no plugin of NCCL_NET_PLUGIN={} by that name \
                     initialised{why}",
                    own_names.join(", "),
                    plugin_setting.unwrap_or("")
                ),
            )
            .hint(
                "give NCCL_NET_PLUGIN the plugin's full path (or put its folder on \
                 LD_LIBRARY_PATH), or unset NCCL_NET",
            ))
        }
        _ => Ok(None),
    }
}
