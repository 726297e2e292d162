//! Checks every declared verbs struct (size, alignment, each field's offset) and every
//! constant against the system's `<infiniband/verbs.h>`: writes a C program that prints
//! them, compiles it with `cc`, runs it, and compares with Rust's `size_of` / `offset_of!`.
//!
//! Needs rdma-core's headers (`apt-get install libibverbs-dev`); without them the test
//! fails and says so, rather than passing without checking anything.

use std::mem::{align_of, offset_of, size_of};
use std::path::PathBuf;
use std::process::Command;

use weft_sys::verbs::types::*;

/// One C expression and the value Rust expects it to print.
struct Check {
    c_expr: String,
    rust: i128,
}

macro_rules! layout {
    ($checks:expr, $c_type:literal, $ty:ty, [$($($field:ident).+ $(as $c_field:literal)?),* $(,)?]) => {{
        $checks.push(Check { c_expr: format!("sizeof({})", $c_type), rust: size_of::<$ty>() as i128 });
        $checks.push(Check { c_expr: format!("_Alignof({})", $c_type), rust: align_of::<$ty>() as i128 });
        $(
            let rust_path = stringify!($($field).+).replace(' ', "");
            let c_path: &str = [$($c_field,)? rust_path.as_str()][0];
            $checks.push(Check {
                c_expr: format!("offsetof({}, {})", $c_type, c_path),
                rust: offset_of!($ty, $($field).+) as i128,
            });
        )*
    }};
}

macro_rules! enum_values {
    ($checks:expr, $ty:ident, [$($name:ident),* $(,)?]) => {$(
        $checks.push(Check { c_expr: stringify!($name).to_string(), rust: $ty::$name.0 as i128 });
    )*};
}

macro_rules! constants {
    ($checks:expr, [$($name:ident),* $(,)?]) => {$(
        $checks.push(Check { c_expr: stringify!($name).to_string(), rust: $name as i128 });
    )*};
}

fn checks() -> Vec<Check> {
    let mut checks = Vec::new();
    layout!(
        checks,
        "union ibv_gid",
        ibv_gid,
        [raw, global.subnet_prefix, global.interface_id]
    );
    layout!(
        checks,
        "struct ibv_device",
        ibv_device,
        [
            node_type,
            transport_type,
            name,
            dev_name,
            dev_path,
            ibdev_path,
        ]
    );
    layout!(
        checks,
        "struct ibv_context_ops",
        ibv_context_ops,
        [poll_cq, req_notify_cq, post_srq_recv, post_send, post_recv,]
    );
    layout!(
        checks,
        "struct ibv_context",
        ibv_context,
        [
            device,
            ops,
            ops.poll_cq,
            ops.post_send,
            ops.post_recv,
            cmd_fd,
            async_fd,
            num_comp_vectors,
            mutex,
            abi_compat,
        ]
    );
    layout!(
        checks,
        "struct ibv_device_attr",
        ibv_device_attr,
        [
            fw_ver,
            node_guid,
            sys_image_guid,
            max_mr_size,
            page_size_cap,
            vendor_id,
            vendor_part_id,
            hw_ver,
            max_qp,
            max_qp_wr,
            device_cap_flags,
            max_sge,
            max_sge_rd,
            max_cq,
            max_cqe,
            max_mr,
            max_pd,
            max_qp_rd_atom,
            max_ee_rd_atom,
            max_res_rd_atom,
            max_qp_init_rd_atom,
            max_ee_init_rd_atom,
            atomic_cap,
            max_ee,
            max_rdd,
            max_mw,
            max_raw_ipv6_qp,
            max_raw_ethy_qp,
            max_mcast_grp,
            max_mcast_qp_attach,
            max_total_mcast_qp_attach,
            max_ah,
            max_fmr,
            max_map_per_fmr,
            max_srq,
            max_srq_wr,
            max_srq_sge,
            max_pkeys,
            local_ca_ack_delay,
            phys_port_cnt,
        ]
    );
    layout!(
        checks,
        "struct ibv_port_attr",
        ibv_port_attr,
        [
            state,
            max_mtu,
            active_mtu,
            gid_tbl_len,
            port_cap_flags,
            max_msg_sz,
            bad_pkey_cntr,
            qkey_viol_cntr,
            pkey_tbl_len,
            lid,
            sm_lid,
            lmc,
            max_vl_num,
            sm_sl,
            subnet_timeout,
            init_type_reply,
            active_width,
            active_speed,
            phys_state,
            link_layer,
            flags,
            port_cap_flags2,
        ]
    );
    layout!(checks, "struct ibv_pd", ibv_pd, [context, handle]);
    layout!(
        checks,
        "struct ibv_mr",
        ibv_mr,
        [context, pd, addr, length, handle, lkey, rkey]
    );
    layout!(
        checks,
        "struct ibv_comp_channel",
        ibv_comp_channel,
        [context, fd, refcnt]
    );
    layout!(
        checks,
        "struct ibv_cq",
        ibv_cq,
        [
            context,
            channel,
            cq_context,
            handle,
            cqe,
            mutex,
            cond,
            comp_events_completed,
            async_events_completed,
        ]
    );
    layout!(
        checks,
        "struct ibv_qp",
        ibv_qp,
        [
            context,
            qp_context,
            pd,
            send_cq,
            recv_cq,
            srq,
            handle,
            qp_num,
            state,
            qp_type,
            mutex,
            cond,
            events_completed,
        ]
    );
    layout!(
        checks,
        "struct ibv_qp_cap",
        ibv_qp_cap,
        [
            max_send_wr,
            max_recv_wr,
            max_send_sge,
            max_recv_sge,
            max_inline_data,
        ]
    );
    layout!(
        checks,
        "struct ibv_qp_init_attr",
        ibv_qp_init_attr,
        [qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all,]
    );
    layout!(
        checks,
        "struct ibv_global_route",
        ibv_global_route,
        [dgid, flow_label, sgid_index, hop_limit, traffic_class,]
    );
    layout!(
        checks,
        "struct ibv_ah_attr",
        ibv_ah_attr,
        [
            grh,
            dlid,
            sl,
            src_path_bits,
            static_rate,
            is_global,
            port_num,
        ]
    );
    layout!(
        checks,
        "struct ibv_qp_attr",
        ibv_qp_attr,
        [
            qp_state,
            cur_qp_state,
            path_mtu,
            path_mig_state,
            qkey,
            rq_psn,
            sq_psn,
            dest_qp_num,
            qp_access_flags,
            cap,
            ah_attr,
            ah_attr.grh.sgid_index,
            ah_attr.is_global,
            ah_attr.port_num,
            alt_ah_attr,
            pkey_index,
            alt_pkey_index,
            en_sqd_async_notify,
            sq_draining,
            max_rd_atomic,
            max_dest_rd_atomic,
            min_rnr_timer,
            port_num,
            timeout,
            retry_cnt,
            rnr_retry,
            alt_port_num,
            alt_timeout,
            rate_limit,
        ]
    );
    layout!(checks, "struct ibv_sge", ibv_sge, [addr, length, lkey]);
    layout!(
        checks,
        "struct ibv_mw_bind_info",
        ibv_mw_bind_info,
        [mr, addr, length, mw_access_flags,]
    );
    layout!(checks, "struct ibv_send_wr", ibv_send_wr, [
        wr_id, next, sg_list, num_sge, opcode, send_flags,
        imm_data, imm_data as "invalidate_rkey",
        wr.rdma.remote_addr, wr.rdma.rkey,
        wr.atomic.remote_addr, wr.atomic.compare_add, wr.atomic.swap, wr.atomic.rkey,
        wr.ud.ah, wr.ud.remote_qpn, wr.ud.remote_qkey,
        qp_type.remote_srqn as "qp_type.xrc.remote_srqn",
        bind_mw_or_tso.bind_mw.mw as "bind_mw.mw",
        bind_mw_or_tso.bind_mw.rkey as "bind_mw.rkey",
        bind_mw_or_tso.bind_mw.bind_info.mr as "bind_mw.bind_info.mr",
        bind_mw_or_tso.bind_mw.bind_info.mw_access_flags as "bind_mw.bind_info.mw_access_flags",
        bind_mw_or_tso.tso.hdr as "tso.hdr",
        bind_mw_or_tso.tso.hdr_sz as "tso.hdr_sz",
        bind_mw_or_tso.tso.mss as "tso.mss",
    ]);
    layout!(
        checks,
        "struct ibv_recv_wr",
        ibv_recv_wr,
        [wr_id, next, sg_list, num_sge]
    );
    layout!(checks, "struct ibv_wc", ibv_wc, [
        wr_id, status, opcode, vendor_err, byte_len, imm_data,
        imm_data as "invalidated_rkey", qp_num, src_qp, wc_flags, pkey_index, slid, sl,
        dlid_path_bits,
    ]);
    layout!(checks, "struct ibv_async_event", ibv_async_event, [
        element, element.qp as "element.qp", element.port_num as "element.port_num",
        event_type,
    ]);
    layout!(
        checks,
        "struct ibv_gid_entry",
        ibv_gid_entry,
        [gid, gid_index, port_num, gid_type, ndev_ifindex,]
    );

    enum_values!(
        checks,
        ibv_node_type,
        [
            IBV_NODE_UNKNOWN,
            IBV_NODE_CA,
            IBV_NODE_SWITCH,
            IBV_NODE_ROUTER,
            IBV_NODE_RNIC,
        ]
    );
    enum_values!(
        checks,
        ibv_transport_type,
        [IBV_TRANSPORT_UNKNOWN, IBV_TRANSPORT_IB, IBV_TRANSPORT_IWARP,]
    );
    enum_values!(
        checks,
        ibv_mtu,
        [
            IBV_MTU_256,
            IBV_MTU_512,
            IBV_MTU_1024,
            IBV_MTU_2048,
            IBV_MTU_4096
        ]
    );
    enum_values!(
        checks,
        ibv_port_state,
        [
            IBV_PORT_NOP,
            IBV_PORT_DOWN,
            IBV_PORT_INIT,
            IBV_PORT_ARMED,
            IBV_PORT_ACTIVE,
            IBV_PORT_ACTIVE_DEFER,
        ]
    );
    enum_values!(
        checks,
        ibv_qp_type,
        [IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD, IBV_QPT_RAW_PACKET]
    );
    enum_values!(
        checks,
        ibv_qp_state,
        [
            IBV_QPS_RESET,
            IBV_QPS_INIT,
            IBV_QPS_RTR,
            IBV_QPS_RTS,
            IBV_QPS_SQD,
            IBV_QPS_SQE,
            IBV_QPS_ERR,
            IBV_QPS_UNKNOWN,
        ]
    );
    enum_values!(
        checks,
        ibv_mig_state,
        [IBV_MIG_MIGRATED, IBV_MIG_REARM, IBV_MIG_ARMED]
    );
    enum_values!(
        checks,
        ibv_atomic_cap,
        [IBV_ATOMIC_NONE, IBV_ATOMIC_HCA, IBV_ATOMIC_GLOB]
    );
    enum_values!(
        checks,
        ibv_wr_opcode,
        [
            IBV_WR_RDMA_WRITE,
            IBV_WR_RDMA_WRITE_WITH_IMM,
            IBV_WR_SEND,
            IBV_WR_SEND_WITH_IMM,
            IBV_WR_RDMA_READ,
            IBV_WR_ATOMIC_CMP_AND_SWP,
            IBV_WR_ATOMIC_FETCH_AND_ADD,
            IBV_WR_LOCAL_INV,
            IBV_WR_BIND_MW,
            IBV_WR_SEND_WITH_INV,
        ]
    );
    enum_values!(
        checks,
        ibv_wc_opcode,
        [
            IBV_WC_SEND,
            IBV_WC_RDMA_WRITE,
            IBV_WC_RDMA_READ,
            IBV_WC_COMP_SWAP,
            IBV_WC_FETCH_ADD,
            IBV_WC_BIND_MW,
            IBV_WC_LOCAL_INV,
            IBV_WC_RECV,
            IBV_WC_RECV_RDMA_WITH_IMM,
        ]
    );
    enum_values!(
        checks,
        ibv_wc_status,
        [
            IBV_WC_SUCCESS,
            IBV_WC_LOC_LEN_ERR,
            IBV_WC_LOC_QP_OP_ERR,
            IBV_WC_LOC_EEC_OP_ERR,
            IBV_WC_LOC_PROT_ERR,
            IBV_WC_WR_FLUSH_ERR,
            IBV_WC_MW_BIND_ERR,
            IBV_WC_BAD_RESP_ERR,
            IBV_WC_LOC_ACCESS_ERR,
            IBV_WC_REM_INV_REQ_ERR,
            IBV_WC_REM_ACCESS_ERR,
            IBV_WC_REM_OP_ERR,
            IBV_WC_RETRY_EXC_ERR,
            IBV_WC_RNR_RETRY_EXC_ERR,
            IBV_WC_LOC_RDD_VIOL_ERR,
            IBV_WC_REM_INV_RD_REQ_ERR,
            IBV_WC_REM_ABORT_ERR,
            IBV_WC_INV_EECN_ERR,
            IBV_WC_INV_EEC_STATE_ERR,
            IBV_WC_FATAL_ERR,
            IBV_WC_RESP_TIMEOUT_ERR,
            IBV_WC_GENERAL_ERR,
            IBV_WC_TM_ERR,
            IBV_WC_TM_RNDV_INCOMPLETE,
        ]
    );
    enum_values!(
        checks,
        ibv_event_type,
        [
            IBV_EVENT_CQ_ERR,
            IBV_EVENT_QP_FATAL,
            IBV_EVENT_QP_REQ_ERR,
            IBV_EVENT_QP_ACCESS_ERR,
            IBV_EVENT_COMM_EST,
            IBV_EVENT_PATH_MIG_ERR,
            IBV_EVENT_DEVICE_FATAL,
            IBV_EVENT_PORT_ACTIVE,
            IBV_EVENT_PORT_ERR,
            IBV_EVENT_GID_CHANGE,
        ]
    );
    constants!(
        checks,
        [
            IBV_LINK_LAYER_UNSPECIFIED,
            IBV_LINK_LAYER_INFINIBAND,
            IBV_LINK_LAYER_ETHERNET,
            IBV_ACCESS_LOCAL_WRITE,
            IBV_ACCESS_REMOTE_WRITE,
            IBV_ACCESS_REMOTE_READ,
            IBV_ACCESS_REMOTE_ATOMIC,
            IBV_ACCESS_RELAXED_ORDERING,
            IBV_SEND_FENCE,
            IBV_SEND_SIGNALED,
            IBV_SEND_SOLICITED,
            IBV_SEND_INLINE,
            IBV_WC_WITH_IMM,
            IBV_QP_STATE,
            IBV_QP_CUR_STATE,
            IBV_QP_ACCESS_FLAGS,
            IBV_QP_PKEY_INDEX,
            IBV_QP_PORT,
            IBV_QP_QKEY,
            IBV_QP_AV,
            IBV_QP_PATH_MTU,
            IBV_QP_TIMEOUT,
            IBV_QP_RETRY_CNT,
            IBV_QP_RNR_RETRY,
            IBV_QP_RQ_PSN,
            IBV_QP_MAX_QP_RD_ATOMIC,
            IBV_QP_MIN_RNR_TIMER,
            IBV_QP_SQ_PSN,
            IBV_QP_MAX_DEST_RD_ATOMIC,
            IBV_QP_CAP,
            IBV_QP_DEST_QPN,
            IBV_SYSFS_NAME_MAX,
            IBV_SYSFS_PATH_MAX,
            IBV_GID_TYPE_IB,
            IBV_GID_TYPE_ROCE_V1,
            IBV_GID_TYPE_ROCE_V2,
        ]
    );
    checks
}

fn c_program(checks: &[Check]) -> String {
    let mut source = String::from(
        "#include <stddef.h>\n#include <stdio.h>\n#include <infiniband/verbs.h>\n\nint main(void) {\n",
    );
    for check in checks {
        source.push_str(&format!(
            "    printf(\"%lld\\n\", (long long)({}));\n",
            check.c_expr
        ));
    }
    source.push_str("    return 0;\n}\n");
    source
}

#[test]
fn verbs_structs_and_constants_match_the_system_header() {
    let checks = checks();
    let dir: PathBuf =
        std::env::temp_dir().join(format!("weft-sys-verbs-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let c_file = dir.join("layout.c");
    let program = dir.join("layout");
    std::fs::write(&c_file, c_program(&checks)).unwrap();

    let compiler = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let compiled = Command::new(&compiler)
        .arg("-std=gnu11")
        .arg("-o")
        .arg(&program)
        .arg(&c_file)
        .output()
        .unwrap_or_else(|err| panic!("cannot run the C compiler `{compiler}`: {err}"));
    let stderr = String::from_utf8_lossy(&compiled.stderr);
    assert!(
        !stderr.contains("infiniband/verbs.h"),
        "rdma-core's <infiniband/verbs.h> is not installed, so the verbs layout cannot be \
         checked: install it (Debian/Ubuntu: apt-get install -y libibverbs-dev; RHEL: dnf \
         install rdma-core-devel).\n{stderr}"
    );
    assert!(
        compiled.status.success(),
        "{} failed to compile:\n{stderr}",
        c_file.display()
    );

    let ran = Command::new(&program).output().unwrap();
    assert!(ran.status.success(), "{} failed", program.display());
    let stdout = String::from_utf8(ran.stdout).unwrap();
    let values: Vec<i128> = stdout.lines().map(|line| line.parse().unwrap()).collect();
    assert_eq!(
        values.len(),
        checks.len(),
        "the C program printed a value per check"
    );

    let mismatches: Vec<String> = checks
        .iter()
        .zip(&values)
        .filter(|(check, c_value)| check.rust != **c_value)
        .map(|(check, c_value)| {
            format!(
                "{}: C says {c_value}, Rust has {}",
                check.c_expr, check.rust
            )
        })
        .collect();
    assert!(
        mismatches.is_empty(),
        "{} of {} checks differ from the system's verbs.h:\n{}",
        mismatches.len(),
        checks.len(),
        mismatches.join("\n")
    );
    assert!(checks.len() > 300, "only {} checks", checks.len());
    std::fs::remove_dir_all(&dir).ok();
}

/// The optional registration calls of `Verbs` (sys/src/verbs/mod.rs) as C function types,
/// spelled from the Rust declarations (`c_int` = `int`, `usize` = `size_t`, `u64` =
/// `uint64_t`, `c_uint` = `unsigned int`): a wrong argument in the table would pass the
/// wrong registers at run time, so the header must agree with each, or this fails to compile.
const REGISTRATION_SIGNATURES: &[(&str, &str)] = &[
    (
        "ibv_reg_dmabuf_mr",
        "struct ibv_mr *(*)(struct ibv_pd *, uint64_t, size_t, uint64_t, int, int)",
    ),
    (
        "ibv_reg_mr_iova2",
        "struct ibv_mr *(*)(struct ibv_pd *, void *, size_t, uint64_t, unsigned int)",
    ),
];

#[test]
fn registration_calls_match_the_system_header() {
    let mut source = String::from("#include <stdint.h>\n#include <infiniband/verbs.h>\n\n");
    for (name, c_type) in REGISTRATION_SIGNATURES {
        source.push_str(&format!(
            "_Static_assert(__builtin_types_compatible_p(__typeof__(&{name}), {c_type}), \
             \"{name} differs from weft-sys's declaration\");\n"
        ));
    }
    source.push_str("int main(void) { return 0; }\n");
    let dir: PathBuf =
        std::env::temp_dir().join(format!("weft-sys-verbs-signatures-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let c_file = dir.join("signatures.c");
    std::fs::write(&c_file, &source).unwrap();
    let compiler = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let compiled = Command::new(&compiler)
        .arg("-std=gnu11")
        .arg("-fsyntax-only")
        .arg(&c_file)
        .output()
        .unwrap_or_else(|err| panic!("cannot run the C compiler `{compiler}`: {err}"));
    let stderr = String::from_utf8_lossy(&compiled.stderr);
    assert!(
        compiled.status.success(),
        "{} does not compile against the system's verbs.h (a declaration in weft-sys's \
         table differs, or libibverbs-dev is missing or older than rdma-core 34):\n{stderr}",
        c_file.display()
    );
    std::fs::remove_dir_all(&dir).ok();
}
