//! libibverbs (rdma-core), resolved at run time.
//!
//! [`Verbs`] holds the exported control-path calls. The data path (`ibv_post_send`,
//! `ibv_post_recv`, `ibv_poll_cq`, `ibv_req_notify_cq`) is `static inline` in rdma-core's
//! `verbs.h`: it calls the provider through `ibv_context->ops`, and so do the functions of
//! the same names here.
//!
//! libibverbs exports old `IBVERBS_1.0` versions of many symbols next to the current
//! `IBVERBS_1.1` ones; `dlsym` returns the default version, which is the one a C program
//! built against today's header binds to.

pub mod status;
pub mod types;

use core::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::OnceLock;

use crate::library::{LibraryInfo, LoadError, OpenedLibrary, fn_table};
use types::*;

/// Names tried by [`Verbs::load`].
pub const LIBIBVERBS_CANDIDATES: &[&str] = &["libibverbs.so.1", "libibverbs.so"];

const LIBIBVERBS: LibraryInfo = LibraryInfo {
    name: "libibverbs.so.1",
    absent_reason: "rdma-core's libibverbs is not installed",
    hint: "Install it (Debian/Ubuntu: apt-get install libibverbs1 ibverbs-providers; RHEL: \
           dnf install libibverbs) to use RDMA NICs; without it only the socket transport \
           is available.",
    requires: "libibverbs with IBVERBS_1.1 (rdma-core 13+)",
    what_is_old: "libibverbs too old",
};

fn_table! {
    /// libibverbs' exported calls, each as declared in `<infiniband/verbs.h>`.
    pub struct Verbs {
        required {
            ibv_fork_init = "ibv_fork_init": fn() -> c_int;
            ibv_get_device_list = "ibv_get_device_list": fn(*mut c_int) -> *mut *mut ibv_device;
            ibv_free_device_list = "ibv_free_device_list": fn(*mut *mut ibv_device);
            ibv_get_device_name = "ibv_get_device_name": fn(*mut ibv_device) -> *const c_char;
            /// Big-endian.
            ibv_get_device_guid = "ibv_get_device_guid": fn(*mut ibv_device) -> u64;
            ibv_open_device = "ibv_open_device": fn(*mut ibv_device) -> *mut ibv_context;
            ibv_close_device = "ibv_close_device": fn(*mut ibv_context) -> c_int;
            ibv_query_device = "ibv_query_device":
                fn(*mut ibv_context, *mut ibv_device_attr) -> c_int;
            /// The exported (compat) entry point: fills `ibv_port_attr` up to
            /// `link_layer`; pass a [`ibv_port_attr::zeroed`] one.
            ibv_query_port = "ibv_query_port":
                fn(*mut ibv_context, u8, *mut ibv_port_attr) -> c_int;
            ibv_query_gid = "ibv_query_gid": fn(*mut ibv_context, u8, c_int, *mut ibv_gid) -> c_int;
            ibv_alloc_pd = "ibv_alloc_pd": fn(*mut ibv_context) -> *mut ibv_pd;
            ibv_dealloc_pd = "ibv_dealloc_pd": fn(*mut ibv_pd) -> c_int;
            /// Protection domain, address, length, `IBV_ACCESS_*` bits. For
            /// `IBV_ACCESS_RELAXED_ORDERING` use `ibv_reg_mr_iova2` instead.
            ibv_reg_mr = "ibv_reg_mr": fn(*mut ibv_pd, *mut c_void, usize, c_int) -> *mut ibv_mr;
            ibv_dereg_mr = "ibv_dereg_mr": fn(*mut ibv_mr) -> c_int;
            ibv_create_comp_channel = "ibv_create_comp_channel":
                fn(*mut ibv_context) -> *mut ibv_comp_channel;
            ibv_destroy_comp_channel = "ibv_destroy_comp_channel":
                fn(*mut ibv_comp_channel) -> c_int;
            /// Context, minimum entries, user context, channel (or null), vector.
            ibv_create_cq = "ibv_create_cq":
                fn(*mut ibv_context, c_int, *mut c_void, *mut ibv_comp_channel, c_int)
                    -> *mut ibv_cq;
            ibv_destroy_cq = "ibv_destroy_cq": fn(*mut ibv_cq) -> c_int;
            ibv_create_qp = "ibv_create_qp": fn(*mut ibv_pd, *mut ibv_qp_init_attr) -> *mut ibv_qp;
            /// QP, attributes, `IBV_QP_*` mask of the attributes to apply.
            ibv_modify_qp = "ibv_modify_qp": fn(*mut ibv_qp, *mut ibv_qp_attr, c_int) -> c_int;
            ibv_query_qp = "ibv_query_qp":
                fn(*mut ibv_qp, *mut ibv_qp_attr, c_int, *mut ibv_qp_init_attr) -> c_int;
            ibv_destroy_qp = "ibv_destroy_qp": fn(*mut ibv_qp) -> c_int;
            /// Blocks until an event arrives unless `async_fd` was made non-blocking.
            ibv_get_async_event = "ibv_get_async_event":
                fn(*mut ibv_context, *mut ibv_async_event) -> c_int;
            ibv_ack_async_event = "ibv_ack_async_event": fn(*mut ibv_async_event);
            ibv_wc_status_str = "ibv_wc_status_str": fn(ibv_wc_status) -> *const c_char;
            ibv_event_type_str = "ibv_event_type_str": fn(ibv_event_type) -> *const c_char;
        }
        optional {
            /// Like `ibv_reg_mr` with an explicit I/O virtual address and `unsigned`
            /// access bits, so that optional bits such as relaxed ordering are accepted.
            ibv_reg_mr_iova2 = "ibv_reg_mr_iova2" since "IBVERBS_1.8":
                fn(*mut ibv_pd, *mut c_void, usize, u64, c_uint) -> *mut ibv_mr;
            /// Registers a dma-buf (e.g. GPU memory exported by CUDA): protection domain,
            /// offset, length, iova, fd, access bits.
            ibv_reg_dmabuf_mr = "ibv_reg_dmabuf_mr" since "IBVERBS_1.12, rdma-core 34+":
                fn(*mut ibv_pd, u64, usize, u64, c_int, c_int) -> *mut ibv_mr;
            /// Context, port, GID index, entry, flags (0), `size_of::<ibv_gid_entry>()`.
            _ibv_query_gid_ex = "_ibv_query_gid_ex" since "IBVERBS_1.11":
                fn(*mut ibv_context, u32, u32, *mut ibv_gid_entry, u32, usize) -> c_int;
        }
    }
}

impl Verbs {
    /// Loads libibverbs from [`LIBIBVERBS_CANDIDATES`].
    pub fn load() -> Result<Self, LoadError> {
        Self::load_from(LIBIBVERBS_CANDIDATES)
    }

    /// Loads libibverbs from the first of `candidates` (names or paths) that `dlopen`
    /// accepts.
    pub fn load_from<S: AsRef<str>>(candidates: &[S]) -> Result<Self, LoadError> {
        let library = OpenedLibrary::open_first(candidates, LIBIBVERBS)?;
        Self::resolve(library, LIBIBVERBS)
    }

    /// The process-wide table, loaded on first use; a failure is remembered.
    pub fn shared() -> Result<&'static Self, LoadError> {
        static SHARED: OnceLock<Result<Verbs, LoadError>> = OnceLock::new();
        SHARED
            .get_or_init(Self::load)
            .as_ref()
            .map_err(Clone::clone)
    }
}

/// `ibv_post_send`: posts a chain of send work requests through the provider. Returns 0,
/// or an errno value with `*bad_wr` set to the first request not posted; `EOPNOTSUPP` if
/// the provider has no `post_send`.
///
/// # Safety
/// `qp` must be a live QP from `ibv_create_qp` (so that its `context` is live), `wr` a
/// valid chain whose SGEs name registered memory that stays registered and untouched until
/// the matching completion, and `bad_wr` writable.
pub unsafe fn ibv_post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    // SAFETY: the caller guarantees `qp` points to a live QP.
    let context = unsafe { (*qp).context };
    // SAFETY: a live QP's context is a live `ibv_context`.
    let post_send = unsafe { (*context).ops.post_send };
    match post_send {
        // SAFETY: the provider's entry point, called with the arguments the caller vouched
        // for, exactly as rdma-core's inline `ibv_post_send` does.
        Some(post_send) => unsafe { post_send(qp, wr, bad_wr) },
        None => libc::EOPNOTSUPP,
    }
}

/// `ibv_post_recv`: posts a chain of receive work requests through the provider. Returns
/// 0, or an errno value with `*bad_wr` set; `EOPNOTSUPP` if the provider has none.
///
/// # Safety
/// As for [`ibv_post_send`]: a live QP, a valid chain over registered memory that stays
/// registered until completion, a writable `bad_wr`.
pub unsafe fn ibv_post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: the caller guarantees `qp` points to a live QP.
    let context = unsafe { (*qp).context };
    // SAFETY: a live QP's context is a live `ibv_context`.
    let post_recv = unsafe { (*context).ops.post_recv };
    match post_recv {
        // SAFETY: the provider's entry point with caller-vouched arguments.
        Some(post_recv) => unsafe { post_recv(qp, wr, bad_wr) },
        None => libc::EOPNOTSUPP,
    }
}

/// `ibv_poll_cq`: fetches up to `num_entries` completions into `wc`. Returns how many (0
/// when the queue is empty) or a negative value on failure; `-EOPNOTSUPP` if the provider
/// has no `poll_cq`.
///
/// # Safety
/// `cq` must be a live CQ from `ibv_create_cq` and `wc` must have room for `num_entries`
/// completions.
pub unsafe fn ibv_poll_cq(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int {
    // SAFETY: the caller guarantees `cq` points to a live CQ.
    let context = unsafe { (*cq).context };
    // SAFETY: a live CQ's context is a live `ibv_context`.
    let poll_cq = unsafe { (*context).ops.poll_cq };
    match poll_cq {
        // SAFETY: the provider's entry point with caller-vouched arguments.
        Some(poll_cq) => unsafe { poll_cq(cq, num_entries, wc) },
        None => -libc::EOPNOTSUPP,
    }
}

/// `ibv_req_notify_cq`: arms the CQ's completion channel for the next completion (only
/// solicited ones when `solicited_only` is non-zero). Returns 0 or an errno value.
///
/// # Safety
/// `cq` must be a live CQ created with a completion channel.
pub unsafe fn ibv_req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    // SAFETY: the caller guarantees `cq` points to a live CQ.
    let context = unsafe { (*cq).context };
    // SAFETY: a live CQ's context is a live `ibv_context`.
    let req_notify_cq = unsafe { (*context).ops.req_notify_cq };
    match req_notify_cq {
        // SAFETY: the provider's entry point with caller-vouched arguments.
        Some(req_notify_cq) => unsafe { req_notify_cq(cq, solicited_only) },
        None => libc::EOPNOTSUPP,
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use std::cell::Cell;

    // Fake providers: record what the inline helpers passed through `ops`.
    thread_local! {
        static POSTED: Cell<(u64, i32)> = const { Cell::new((0, 0)) };
    }

    unsafe extern "C" fn fake_post_send(
        qp: *mut ibv_qp,
        wr: *mut ibv_send_wr,
        bad_wr: *mut *mut ibv_send_wr,
    ) -> c_int {
        // SAFETY: the test passes a live fake QP.
        let qp = unsafe { &*qp };
        // SAFETY: the test passes a live one-element chain.
        let wr = unsafe { &*wr };
        let (qp_num, wr_id, num_sge) = (qp.qp_num, wr.wr_id, wr.num_sge);
        POSTED.with(|cell| cell.set((wr_id ^ u64::from(qp_num), num_sge)));
        // SAFETY: the test passes a writable `bad_wr`.
        unsafe { *bad_wr = core::ptr::null_mut() };
        0
    }

    unsafe extern "C" fn fake_post_recv(
        _qp: *mut ibv_qp,
        wr: *mut ibv_recv_wr,
        _bad_wr: *mut *mut ibv_recv_wr,
    ) -> c_int {
        // SAFETY: the test passes a live receive request.
        let wr_id = unsafe { (*wr).wr_id };
        POSTED.with(|cell| cell.set((wr_id, -1)));
        libc::ENOMEM
    }

    /// Fills `n` completions with wr_id = base + i and a status cycling through errors.
    unsafe extern "C" fn fake_poll_cq(
        cq: *mut ibv_cq,
        num_entries: c_int,
        wc: *mut ibv_wc,
    ) -> c_int {
        // SAFETY: the test passes a live fake CQ.
        let base = u64::from(unsafe { (*cq).handle });
        let n = num_entries.min(5);
        // SAFETY: the caller gave room for `num_entries` >= n entries.
        let out = unsafe { core::slice::from_raw_parts_mut(wc, n as usize) };
        for (i, slot) in out.iter_mut().enumerate() {
            let mut entry = ibv_wc::zeroed();
            entry.wr_id = base + i as u64;
            entry.status = ibv_wc_status(i as u32 * 3);
            *slot = entry;
        }
        n
    }

    struct XorShift(u64);
    impl XorShift {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    #[test]
    fn post_send_goes_through_the_context_ops() {
        let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
        let mut context = ibv_context::zeroed();
        context.ops.post_send = Some(fake_post_send);
        let mut qp = ibv_qp::zeroed();
        qp.context = &mut context;
        for _ in 0..37 {
            qp.qp_num = rng.next() as u32 & 0xff_ffff;
            let mut sge = ibv_sge {
                addr: rng.next(),
                length: 4099,
                lkey: 7,
            };
            let mut wr = ibv_send_wr::zeroed();
            wr.wr_id = rng.next();
            wr.sg_list = &mut sge;
            wr.num_sge = 1;
            wr.opcode = ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM;
            let mut bad: *mut ibv_send_wr = &mut wr;
            // SAFETY: a fake QP whose context's post_send is the fake above.
            let rc = unsafe { ibv_post_send(&mut qp, &mut wr, &mut bad) };
            assert_eq!(rc, 0);
            assert!(bad.is_null());
            assert_eq!(POSTED.with(Cell::get), (wr.wr_id ^ u64::from(qp.qp_num), 1));
        }
    }

    #[test]
    fn post_recv_returns_the_provider_errno() {
        let mut context = ibv_context::zeroed();
        context.ops.post_recv = Some(fake_post_recv);
        let mut qp = ibv_qp::zeroed();
        qp.context = &mut context;
        let mut wr = ibv_recv_wr::zeroed();
        wr.wr_id = 0x1234_5678_9abc;
        let mut bad = core::ptr::null_mut();
        // SAFETY: a fake QP whose context's post_recv is the fake above.
        let rc = unsafe { ibv_post_recv(&mut qp, &mut wr, &mut bad) };
        assert_eq!(rc, libc::ENOMEM);
        assert_eq!(POSTED.with(Cell::get), (0x1234_5678_9abc, -1));
    }

    #[test]
    fn poll_cq_returns_every_completion_the_provider_wrote() {
        let mut context = ibv_context::zeroed();
        context.ops.poll_cq = Some(fake_poll_cq);
        let mut cq = ibv_cq::zeroed();
        cq.context = &mut context;
        cq.handle = 1000;
        let mut wcs = [ibv_wc::zeroed(); 7];
        // SAFETY: a fake CQ; `wcs` has room for 7 entries.
        let n = unsafe { ibv_poll_cq(&mut cq, 7, wcs.as_mut_ptr()) };
        assert_eq!(n, 5);
        for (i, wc) in wcs.iter().enumerate() {
            if i < 5 {
                assert_eq!(wc.wr_id, 1000 + i as u64);
                assert_eq!(wc.status, ibv_wc_status(i as u32 * 3));
            } else {
                assert_eq!(*wc, ibv_wc::zeroed());
            }
        }
    }

    #[test]
    fn a_provider_without_the_op_gives_eopnotsupp_not_a_crash() {
        let mut context = ibv_context::zeroed();
        let mut qp = ibv_qp::zeroed();
        qp.context = &mut context;
        let mut cq = ibv_cq::zeroed();
        cq.context = &mut context;
        let mut send = ibv_send_wr::zeroed();
        let mut recv = ibv_recv_wr::zeroed();
        let mut wc = ibv_wc::zeroed();
        // SAFETY: fake objects with an all-null ops table.
        unsafe {
            assert_eq!(
                ibv_post_send(&mut qp, &mut send, &mut core::ptr::null_mut()),
                libc::EOPNOTSUPP
            );
        }
        // SAFETY: as above.
        unsafe {
            assert_eq!(
                ibv_post_recv(&mut qp, &mut recv, &mut core::ptr::null_mut()),
                libc::EOPNOTSUPP
            );
        }
        // SAFETY: as above.
        unsafe { assert_eq!(ibv_poll_cq(&mut cq, 1, &mut wc), -libc::EOPNOTSUPP) };
        // SAFETY: as above.
        unsafe { assert_eq!(ibv_req_notify_cq(&mut cq, 0), libc::EOPNOTSUPP) };
    }
}
