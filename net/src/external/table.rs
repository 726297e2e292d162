//! One call shape over the four function tables NCCL 2.28 loads (`ncclNet_v8_t` ..
//! `ncclNet_v11_t`): each method takes the newest version's arguments and passes each table
//! what its version declares (an `int` size where v8 has one, no context before v11, no
//! profiler handles before v10), so [`super::ExternalNet`] is written once.
//!
//! A table is checked before it is used: every function the Rust declaration says is
//! non-null is read as a plain pointer first, so a plugin that leaves one NULL is refused
//! with the entry's name instead of becoming a null `fn` (undefined behaviour in Rust).

use std::ffi::{c_char, c_int, c_void};
use std::ptr::{NonNull, null_mut};

use crate::nccl_abi::{
    CommConfig, DebugLogger, NCCL_INVALID_USAGE, NcclResult, NetDeviceHandle, v8, v9, v10, v11,
};

/// An ABI version weft loads, newest first: the order NCCL 2.28 probes them in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AbiVersion {
    V11,
    V10,
    V9,
    V8,
}

impl AbiVersion {
    /// Newest first, as NCCL probes (`ncclNetPlugin_v11` .. `_v8`).
    pub const PROBE_ORDER: [AbiVersion; 4] = [
        AbiVersion::V11,
        AbiVersion::V10,
        AbiVersion::V9,
        AbiVersion::V8,
    ];

    /// The version number (8..=11).
    pub fn number(self) -> u32 {
        match self {
            AbiVersion::V11 => 11,
            AbiVersion::V10 => 10,
            AbiVersion::V9 => 9,
            AbiVersion::V8 => 8,
        }
    }

    /// The symbol a plugin exports its table of this version as.
    pub fn symbol(self) -> &'static str {
        match self {
            AbiVersion::V11 => "ncclNetPlugin_v11",
            AbiVersion::V10 => "ncclNetPlugin_v10",
            AbiVersion::V9 => "ncclNetPlugin_v9",
            AbiVersion::V8 => "ncclNetPlugin_v8",
        }
    }

    /// The table's size in pointers (name and functions).
    fn words(self) -> usize {
        match self {
            AbiVersion::V11 => size_of::<v11::Net>() / size_of::<usize>(),
            AbiVersion::V10 => size_of::<v10::Net>() / size_of::<usize>(),
            AbiVersion::V9 => size_of::<v9::Net>() / size_of::<usize>(),
            AbiVersion::V8 => size_of::<v8::Net>() / size_of::<usize>(),
        }
    }

    /// The entries that may be NULL, by index in the table (regMrDmaBuf, getDeviceMr,
    /// irecvConsumed, makeVDevice, setNetAttr); every other one must be set.
    fn optional(index: usize) -> bool {
        matches!(index, 8 | 17 | 18 | 19 | 21)
    }

    /// The C names of the entries, by index, for errors.
    const ENTRIES: [&'static str; 22] = [
        "name",
        "init",
        "devices",
        "getProperties",
        "listen",
        "connect",
        "accept",
        "regMr",
        "regMrDmaBuf",
        "deregMr",
        "isend",
        "irecv",
        "iflush",
        "test",
        "closeSend",
        "closeRecv",
        "closeListen",
        "getDeviceMr",
        "irecvConsumed",
        "makeVDevice",
        "finalize",
        "setNetAttr",
    ];
}

// The tables share their first 19 entries' positions; the optional indices above rely on it.
const _: () = {
    use std::mem::offset_of;
    assert!(offset_of!(v8::Net, reg_mr_dma_buf) == 8 * 8);
    assert!(offset_of!(v8::Net, get_device_mr) == 17 * 8);
    assert!(offset_of!(v9::Net, make_v_device) == 19 * 8);
    assert!(offset_of!(v10::Net, make_v_device) == 19 * 8);
    assert!(offset_of!(v11::Net, finalize) == 20 * 8);
    assert!(offset_of!(v11::Net, set_net_attr) == 21 * 8);
};

/// A plugin's function table of one version, checked.
#[derive(Debug, Clone, Copy)]
pub enum Table {
    V11(&'static v11::Net),
    V10(&'static v10::Net),
    V9(&'static v9::Net),
    V8(&'static v8::Net),
}

/// What `getProperties` said, in the fields every version has.
#[derive(Debug)]
pub struct RawProperties {
    pub name: *mut c_char,
    pub pci_path: *mut c_char,
    pub guid: u64,
    pub ptr_support: c_int,
    pub reg_is_global: c_int,
    pub speed: c_int,
    pub port: c_int,
    pub latency: f32,
    pub max_comms: c_int,
    pub max_recvs: c_int,
}

/// `ncclInvalidUsage` for a size that a v8 table's `int` cannot carry; the caller names it.
pub const SIZE_TOO_LARGE: NcclResult = NCCL_INVALID_USAGE;

impl Table {
    /// Checks the table of `version` at `symbol` (the address `dlsym` gave) and borrows it
    /// for good. `Err` names the first required entry that is NULL.
    ///
    /// # Safety
    /// `symbol` must point at a readable object of at least the table's size that stays
    /// mapped for the rest of the process (the library is never closed), and that is the
    /// plugin's table of `version`: every non-NULL entry a function of the declared
    /// prototype, `name` NULL or a NUL-terminated string.
    pub unsafe fn check(
        version: AbiVersion,
        symbol: NonNull<c_void>,
    ) -> Result<Table, &'static str> {
        let words = symbol.cast::<*const c_void>();
        for index in 0..version.words() {
            // SAFETY: index is within the table's size (contract).
            let at = unsafe { words.add(index) };
            // SAFETY: entries are pointer-sized and the table is pointer-aligned, being a C
            // struct of pointers.
            let entry = unsafe { at.read() };
            if entry.is_null() && !AbiVersion::optional(index) {
                return Err(AbiVersion::ENTRIES
                    .get(index)
                    .copied()
                    .unwrap_or("an entry"));
            }
        }
        // SAFETY (each arm): every entry that the Rust struct declares as a non-null `fn` was
        // just found non-NULL, the rest are `Option`s or raw pointers; the contract gives the
        // layout, the prototypes and the 'static lifetime.
        Ok(match version {
            // SAFETY: as above.
            AbiVersion::V11 => Table::V11(unsafe { symbol.cast::<v11::Net>().as_ref() }),
            // SAFETY: as above.
            AbiVersion::V10 => Table::V10(unsafe { symbol.cast::<v10::Net>().as_ref() }),
            // SAFETY: as above.
            AbiVersion::V9 => Table::V9(unsafe { symbol.cast::<v9::Net>().as_ref() }),
            // SAFETY: as above.
            AbiVersion::V8 => Table::V8(unsafe { symbol.cast::<v8::Net>().as_ref() }),
        })
    }

    /// The table's version.
    pub fn version(self) -> AbiVersion {
        match self {
            Table::V11(_) => AbiVersion::V11,
            Table::V10(_) => AbiVersion::V10,
            Table::V9(_) => AbiVersion::V9,
            Table::V8(_) => AbiVersion::V8,
        }
    }

    /// The `name` entry (matched against `NCCL_NET`).
    pub fn name(self) -> *const c_char {
        match self {
            Table::V11(t) => t.name,
            Table::V10(t) => t.name,
            Table::V9(t) => t.name,
            Table::V8(t) => t.name,
        }
    }

    /// `init`; v11 also gets a communicator id and config and returns its context in `ctx`.
    ///
    /// # Safety
    /// `logger` must be callable from any thread for as long as the plugin lives.
    pub unsafe fn init(
        self,
        ctx: &mut *mut c_void,
        comm_id: u64,
        config: &mut CommConfig,
        logger: DebugLogger,
    ) -> NcclResult {
        // SAFETY (each arm): the table was checked; the logger's contract is the caller's, no
        // profiler callback is passed, `ctx` and `config` are valid for the call.
        match self {
            // SAFETY: as above.
            Table::V11(t) => unsafe { (t.init)(ctx, comm_id, config, logger, None) },
            // SAFETY: as above.
            Table::V10(t) => unsafe { (t.init)(logger, None) },
            // SAFETY: as above.
            Table::V9(t) => unsafe { (t.init)(logger) },
            // SAFETY: as above.
            Table::V8(t) => unsafe { (t.init)(logger) },
        }
    }

    /// `finalize(ctx)` (v11; earlier versions have none).
    ///
    /// # Safety
    /// `ctx` is what this table's `init` returned, not finalised yet.
    pub unsafe fn finalize(self, ctx: *mut c_void) -> NcclResult {
        match self {
            // SAFETY: the contract.
            // SAFETY: as above.
            Table::V11(t) => unsafe { (t.finalize)(ctx) },
            Table::V10(_) | Table::V9(_) | Table::V8(_) => 0,
        }
    }

    /// `devices(ndev*)`.
    pub fn devices(self, ndev: &mut c_int) -> NcclResult {
        // SAFETY (each arm): the out-pointer is valid for the call.
        match self {
            // SAFETY: as above.
            Table::V11(t) => unsafe { (t.devices)(ndev) },
            // SAFETY: as above.
            Table::V10(t) => unsafe { (t.devices)(ndev) },
            // SAFETY: as above.
            Table::V9(t) => unsafe { (t.devices)(ndev) },
            // SAFETY: as above.
            Table::V8(t) => unsafe { (t.devices)(ndev) },
        }
    }

    /// `getProperties(dev, props*)`, normalised.
    pub fn properties(self, dev: c_int) -> Result<RawProperties, NcclResult> {
        macro_rules! read {
            ($t:expr, $props:ty) => {{
                // SAFETY: every field of the C struct is an integer, a float or a raw pointer
                // (or an array of integers), for which all-zero bytes are a valid value.
                let mut p: $props = unsafe { std::mem::zeroed() };
                // SAFETY: the out-pointer is valid for writes of the version's struct.
                let code = unsafe { ($t.get_properties)(dev, &mut p) };
                if code != 0 {
                    return Err(code);
                }
                RawProperties {
                    name: p.name,
                    pci_path: p.pci_path,
                    guid: p.guid,
                    ptr_support: p.ptr_support,
                    reg_is_global: p.reg_is_global,
                    speed: p.speed,
                    port: p.port,
                    latency: p.latency,
                    max_comms: p.max_comms,
                    max_recvs: p.max_recvs,
                }
            }};
        }
        Ok(match self {
            Table::V11(t) => read!(t, v11::Properties),
            Table::V10(t) => read!(t, v9::Properties),
            Table::V9(t) => read!(t, v9::Properties),
            Table::V8(t) => read!(t, v8::Properties),
        })
    }

    /// `listen(ctx, dev, handle, listenComm*)`.
    ///
    /// # Safety
    /// `handle` is valid for writes of `NCCL_NET_HANDLE_MAXSIZE` bytes; `ctx` is this
    /// table's context (v11).
    pub unsafe fn listen(
        self,
        ctx: *mut c_void,
        dev: c_int,
        handle: *mut c_void,
        comm: &mut *mut c_void,
    ) -> NcclResult {
        // SAFETY (each arm): the contract; `comm` is valid for the call.
        match self {
            // SAFETY: as above.
            Table::V11(t) => unsafe { (t.listen)(ctx, dev, handle, comm) },
            // SAFETY: as above.
            Table::V10(t) => unsafe { (t.listen)(dev, handle, comm) },
            // SAFETY: as above.
            Table::V9(t) => unsafe { (t.listen)(dev, handle, comm) },
            // SAFETY: as above.
            Table::V8(t) => unsafe { (t.listen)(dev, handle, comm) },
        }
    }

    /// `connect(ctx, dev, [config,] handle, sendComm*, sendDevComm*)`.
    ///
    /// # Safety
    /// `handle` is the peer's listen handle, valid for reads and writes of
    /// `NCCL_NET_HANDLE_MAXSIZE` bytes and the same buffer on every call of one connect
    /// (plugins keep their connect stage in it); `ctx` as for `listen`.
    pub unsafe fn connect(
        self,
        ctx: *mut c_void,
        dev: c_int,
        config: &mut CommConfig,
        handle: *mut c_void,
        comm: &mut *mut c_void,
    ) -> NcclResult {
        let mut device: *mut NetDeviceHandle = null_mut();
        // SAFETY (each arm): the contract; the out-pointers are valid for the call.
        match self {
            // SAFETY: as above.
            Table::V11(t) => unsafe { (t.connect)(ctx, dev, handle, comm, &mut device) },
            // SAFETY: as above.
            Table::V10(t) => unsafe { (t.connect)(dev, config, handle, comm, &mut device) },
            // SAFETY: as above.
            Table::V9(t) => unsafe { (t.connect)(dev, handle, comm, &mut device) },
            // SAFETY: as above.
            Table::V8(t) => unsafe { (t.connect)(dev, handle, comm, &mut device) },
        }
    }

    /// `accept(listenComm, recvComm*, recvDevComm*)`.
    ///
    /// # Safety
    /// `listen` is a live listen comm of this plugin.
    pub unsafe fn accept(self, listen: *mut c_void, comm: &mut *mut c_void) -> NcclResult {
        let mut device: *mut NetDeviceHandle = null_mut();
        // SAFETY (each arm): the contract; the out-pointers are valid for the call.
        match self {
            // SAFETY: as above.
            Table::V11(t) => unsafe { (t.accept)(listen, comm, &mut device) },
            // SAFETY: as above.
            Table::V10(t) => unsafe { (t.accept)(listen, comm, &mut device) },
            // SAFETY: as above.
            Table::V9(t) => unsafe { (t.accept)(listen, comm, &mut device) },
            // SAFETY: as above.
            Table::V8(t) => unsafe { (t.accept)(listen, comm, &mut device) },
        }
    }

    /// `regMr(comm, data, size, type, mhandle*)`.
    ///
    /// # Safety
    /// `comm` is a live send or receive comm of this plugin; `data..data+size` is memory of
    /// kind `ptr_type` that stays allocated until `deregMr`.
    pub unsafe fn reg_mr(
        self,
        comm: *mut c_void,
        data: *mut c_void,
        size: usize,
        ptr_type: c_int,
        mhandle: &mut *mut c_void,
    ) -> NcclResult {
        // SAFETY (each arm): the contract.
        match self {
            // SAFETY: as above.
            Table::V11(t) => unsafe { (t.reg_mr)(comm, data, size, ptr_type, mhandle) },
            // SAFETY: as above.
            Table::V10(t) => unsafe { (t.reg_mr)(comm, data, size, ptr_type, mhandle) },
            // SAFETY: as above.
            Table::V9(t) => unsafe { (t.reg_mr)(comm, data, size, ptr_type, mhandle) },
            // SAFETY: as above.
            Table::V8(t) => unsafe { (t.reg_mr)(comm, data, size, ptr_type, mhandle) },
        }
    }

    /// `deregMr(comm, mhandle)`.
    ///
    /// # Safety
    /// `mhandle` came from `regMr` on `comm`, which is still open; no request uses it.
    pub unsafe fn dereg_mr(self, comm: *mut c_void, mhandle: *mut c_void) -> NcclResult {
        // SAFETY (each arm): the contract.
        match self {
            // SAFETY: as above.
            Table::V11(t) => unsafe { (t.dereg_mr)(comm, mhandle) },
            // SAFETY: as above.
            Table::V10(t) => unsafe { (t.dereg_mr)(comm, mhandle) },
            // SAFETY: as above.
            Table::V9(t) => unsafe { (t.dereg_mr)(comm, mhandle) },
            // SAFETY: as above.
            Table::V8(t) => unsafe { (t.dereg_mr)(comm, mhandle) },
        }
    }

    /// `isend(sendComm, data, size, tag, mhandle, [phandle,] request*)`; a size a v8
    /// table's `int` cannot carry is [`SIZE_TOO_LARGE`] without a call.
    ///
    /// # Safety
    /// As the plugin ABI requires: `comm` live, `data..data+size` readable, registered in
    /// `mhandle`, and unmodified until `test` says the request is done.
    pub unsafe fn isend(
        self,
        comm: *mut c_void,
        data: *mut c_void,
        size: usize,
        tag: c_int,
        mhandle: *mut c_void,
        request: &mut *mut c_void,
    ) -> NcclResult {
        let ph = null_mut();
        // SAFETY (each arm): the contract; no profiler handle.
        match self {
            // SAFETY: as above.
            Table::V11(t) => unsafe { (t.isend)(comm, data, size, tag, mhandle, ph, request) },
            // SAFETY: as above.
            Table::V10(t) => unsafe { (t.isend)(comm, data, size, tag, mhandle, ph, request) },
            // SAFETY: as above.
            Table::V9(t) => unsafe { (t.isend)(comm, data, size, tag, mhandle, request) },
            Table::V8(t) => match c_int::try_from(size) {
                // SAFETY: as above.
                Ok(size) => unsafe { (t.isend)(comm, data, size, tag, mhandle, request) },
                Err(_) => SIZE_TOO_LARGE,
            },
        }
    }

    /// `irecv(recvComm, n, data[], sizes[], tags[], mhandles[], [phandles[],] request*)`
    /// over equal-length slices; sizes a v8 table's `int` cannot carry are
    /// [`SIZE_TOO_LARGE`] without a call.
    ///
    /// # Safety
    /// As the plugin ABI requires: `comm` live, each buffer writable, registered in its
    /// `mhandle`, and untouched by anyone else until `test` says the request is done.
    pub unsafe fn irecv(
        self,
        comm: *mut c_void,
        data: &mut [*mut c_void],
        sizes: &mut [usize],
        tags: &mut [c_int],
        mhandles: &mut [*mut c_void],
        request: &mut *mut c_void,
    ) -> NcclResult {
        let Ok(n) = c_int::try_from(data.len()) else {
            return SIZE_TOO_LARGE;
        };
        let mut phandles = vec![null_mut::<c_void>(); data.len()];
        let (d, s, tg, m) = (
            data.as_mut_ptr(),
            sizes.as_mut_ptr(),
            tags.as_mut_ptr(),
            mhandles.as_mut_ptr(),
        );
        let ph = phandles.as_mut_ptr();
        // SAFETY (each arm): the contract; every array has `n` entries.
        match self {
            // SAFETY: as above.
            Table::V11(t) => unsafe { (t.irecv)(comm, n, d, s, tg, m, ph, request) },
            // SAFETY: as above.
            Table::V10(t) => unsafe { (t.irecv)(comm, n, d, s, tg, m, ph, request) },
            // SAFETY: as above.
            Table::V9(t) => unsafe { (t.irecv)(comm, n, d, s, tg, m, request) },
            Table::V8(t) => {
                let sizes: Result<Vec<c_int>, _> =
                    sizes.iter().map(|&s| c_int::try_from(s)).collect();
                let Ok(mut sizes) = sizes else {
                    return SIZE_TOO_LARGE;
                };
                // SAFETY: as above, with `int` sizes.
                unsafe { (t.irecv)(comm, n, d, sizes.as_mut_ptr(), tg, m, request) }
            }
        }
    }

    /// `iflush(recvComm, n, data[], int sizes[], mhandles[], request*)`.
    ///
    /// # Safety
    /// As for `irecv`.
    pub unsafe fn iflush(
        self,
        comm: *mut c_void,
        data: &mut [*mut c_void],
        sizes: &mut [c_int],
        mhandles: &mut [*mut c_void],
        request: &mut *mut c_void,
    ) -> NcclResult {
        let Ok(n) = c_int::try_from(data.len()) else {
            return SIZE_TOO_LARGE;
        };
        let (d, s, m) = (data.as_mut_ptr(), sizes.as_mut_ptr(), mhandles.as_mut_ptr());
        // SAFETY (each arm): the contract; every array has `n` entries.
        match self {
            // SAFETY: as above.
            Table::V11(t) => unsafe { (t.iflush)(comm, n, d, s, m, request) },
            // SAFETY: as above.
            Table::V10(t) => unsafe { (t.iflush)(comm, n, d, s, m, request) },
            // SAFETY: as above.
            Table::V9(t) => unsafe { (t.iflush)(comm, n, d, s, m, request) },
            // SAFETY: as above.
            Table::V8(t) => unsafe { (t.iflush)(comm, n, d, s, m, request) },
        }
    }

    /// `test(request, done*, sizes*)`; `sizes` holds one entry per buffer of the request.
    ///
    /// # Safety
    /// `request` is in flight (not yet reported done).
    pub unsafe fn test(
        self,
        request: *mut c_void,
        done: &mut c_int,
        sizes: &mut [c_int; crate::NET_MAX_RECVS],
    ) -> NcclResult {
        let s = sizes.as_mut_ptr();
        // SAFETY (each arm): the contract; `sizes` has room for the most buffers a request
        // may carry.
        match self {
            // SAFETY: as above.
            Table::V11(t) => unsafe { (t.test)(request, done, s) },
            // SAFETY: as above.
            Table::V10(t) => unsafe { (t.test)(request, done, s) },
            // SAFETY: as above.
            Table::V9(t) => unsafe { (t.test)(request, done, s) },
            // SAFETY: as above.
            Table::V8(t) => unsafe { (t.test)(request, done, s) },
        }
    }

    /// `closeSend`, `closeRecv` or `closeListen`.
    ///
    /// # Safety
    /// `comm` is a live comm of that kind; it is not used again.
    pub unsafe fn close(self, kind: CommKind, comm: *mut c_void) -> NcclResult {
        macro_rules! close {
            ($t:expr) => {
                match kind {
                    // SAFETY: the contract.
                    CommKind::Send => unsafe { ($t.close_send)(comm) },
                    // SAFETY: the contract.
                    CommKind::Recv => unsafe { ($t.close_recv)(comm) },
                    // SAFETY: the contract.
                    CommKind::Listen => unsafe { ($t.close_listen)(comm) },
                }
            };
        }
        match self {
            Table::V11(t) => close!(t),
            Table::V10(t) => close!(t),
            Table::V9(t) => close!(t),
            Table::V8(t) => close!(t),
        }
    }
}

/// Which `close*` entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommKind {
    Send,
    Recv,
    Listen,
}

impl CommKind {
    /// The entry's C name.
    pub fn close_name(self) -> &'static str {
        match self {
            CommKind::Send => "closeSend",
            CommKind::Recv => "closeRecv",
            CommKind::Listen => "closeListen",
        }
    }
}
