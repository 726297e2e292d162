//! Versions, data types, reduction operators and the layouts of `core::abi` for C callers.

use std::ffi::{CStr, c_char};

use weft_core::abi::{
    ABI_VERSION, ChannelPeer, CollWork, ConnInfo, DataType, DevChannel, DevComm, KernelArgs, RedOp,
    RingInfo, TreeInfo,
};
use weft_ffi::{arg_cstr, arg_mut, arg_ref};

use super::boundary::boundary;
use super::status::{CallError, weft_status};

pub use weft_kernels::abi::*;

const VERSION: &CStr =
    match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
        Ok(v) => v,
        Err(_) => c"unknown",
    };

/// Sizes (and the offset of each struct's last field) of the structs in `weft.h` that
/// kernels share, as this library was compiled: a caller compares them with `sizeof` and
/// `offsetof` from its header to detect a header from another weft build.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct weft_abi_layout {
    /// `WEFT_ABI_VERSION` of the library.
    pub abi_version: u32,
    pub conn_info_size: usize,
    pub conn_info_steps_offset: usize,
    pub coll_work_size: usize,
    pub coll_work_direct_offset: usize,
    pub kernel_args_size: usize,
    pub ring_info_size: usize,
    pub tree_info_size: usize,
    pub channel_peer_size: usize,
    pub dev_channel_size: usize,
    pub dev_channel_npeers_offset: usize,
    pub dev_comm_size: usize,
    pub dev_comm_channels_offset: usize,
}

impl weft_abi_layout {
    fn of_this_build() -> Self {
        use std::mem::{offset_of, size_of};
        weft_abi_layout {
            abi_version: ABI_VERSION,
            conn_info_size: size_of::<ConnInfo>(),
            conn_info_steps_offset: offset_of!(ConnInfo, steps),
            coll_work_size: size_of::<CollWork>(),
            coll_work_direct_offset: offset_of!(CollWork, direct),
            kernel_args_size: size_of::<KernelArgs>(),
            ring_info_size: size_of::<RingInfo>(),
            tree_info_size: size_of::<TreeInfo>(),
            channel_peer_size: size_of::<ChannelPeer>(),
            dev_channel_size: size_of::<DevChannel>(),
            dev_channel_npeers_offset: offset_of!(DevChannel, npeers),
            dev_comm_size: size_of::<DevComm>(),
            dev_comm_channels_offset: offset_of!(DevComm, channels),
        }
    }
}

fn data_type(dtype: u32) -> Result<DataType, CallError> {
    DataType::try_from(dtype).map_err(|_| {
        CallError::bad_arg(
            "dtype",
            dtype,
            "a weft_data_type from 0 (int8) to 11 (f8e5m2), NCCL's ncclDataType_t numbers",
        )
    })
}

fn red_op(op: u32) -> Result<RedOp, CallError> {
    RedOp::try_from(op).map_err(|_| {
        CallError::bad_arg(
            "op",
            op,
            "a weft_red_op from 0 (sum) to 4 (avg), NCCL's ncclRedOp_t numbers",
        )
    })
}

/// Static NUL-terminated copy of a name (names are ASCII literals without NUL).
fn c_name(name: &'static str) -> &'static CStr {
    // Every name is one of the literals below; the match keeps them NUL-terminated
    // without allocating (a pointer that C keeps must never dangle).
    match name {
        "int8" => c"int8",
        "uint8" => c"uint8",
        "int32" => c"int32",
        "uint32" => c"uint32",
        "int64" => c"int64",
        "uint64" => c"uint64",
        "half" => c"half",
        "float" => c"float",
        "double" => c"double",
        "bfloat16" => c"bfloat16",
        "f8e4m3" => c"f8e4m3",
        "f8e5m2" => c"f8e5m2",
        "sum" => c"sum",
        "prod" => c"prod",
        "max" => c"max",
        "min" => c"min",
        "avg" => c"avg",
        _ => c"?",
    }
}

/// Version of the weft library, such as "0.1.0". Static, never NULL.
#[unsafe(no_mangle)]
pub extern "C" fn weft_version() -> *const c_char {
    boundary!("weft_version", default: c"unknown".as_ptr(), { VERSION.as_ptr() })
}

/// `WEFT_ABI_VERSION` of the library; compare with the header's to detect a mismatch.
#[unsafe(no_mangle)]
pub extern "C" fn weft_abi_version() -> u32 {
    boundary!("weft_abi_version", default: 0, { ABI_VERSION })
}

/// Fills `*out` with the library's struct sizes and key offsets.
///
/// # Safety
/// `out` is NULL or points to a writable `weft_abi_layout`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_abi_layout_get(out: *mut weft_abi_layout) -> weft_status {
    boundary!("weft_abi_layout_get", {
        let out = arg_mut!(out, "out");
        *out = weft_abi_layout::of_this_build();
        Ok(())
    })
}

/// Bytes per element of `dtype` (a `weft_data_type` / `ncclDataType_t` number).
/// `WEFT_ERR_BAD_FIELD` for an unknown number, `WEFT_ERR_NULL_ARG` for a NULL `size`.
///
/// # Safety
/// `size` is NULL or points to a writable `size_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_dtype_size(dtype: u32, size: *mut usize) -> weft_status {
    boundary!("weft_dtype_size", {
        let size = arg_mut!(size, "size");
        *size = data_type(dtype)?.size_of_elem();
        Ok(())
    })
}

/// Name of `dtype` as nccl-tests prints it ("int8" ... "bfloat16", "f8e4m3", "f8e5m2");
/// `*name` is static.
///
/// # Safety
/// `name` is NULL or points to a writable `const char*`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_dtype_name(dtype: u32, name: *mut *const c_char) -> weft_status {
    boundary!("weft_dtype_name", {
        let name = arg_mut!(name, "name");
        *name = c_name(data_type(dtype)?.name()).as_ptr();
        Ok(())
    })
}

/// The `weft_data_type` number whose nccl-tests name is `name` ("float", "bfloat16"...).
///
/// # Safety
/// `name` is NULL or a NUL-terminated string; `dtype` is NULL or points to a writable
/// `uint32_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_dtype_from_name(name: *const c_char, dtype: *mut u32) -> weft_status {
    boundary!("weft_dtype_from_name", {
        let name = arg_cstr!(name, "name");
        let dtype = arg_mut!(dtype, "dtype");
        let found = DataType::from_name(name).ok_or_else(|| {
            CallError::bad_arg(
                "name",
                format!("{name:?}"),
                "one of int8 uint8 int32 uint32 int64 uint64 half float double bfloat16 f8e4m3 \
                 f8e5m2",
            )
        })?;
        *dtype = found as u32;
        Ok(())
    })
}

/// Name of `op` as nccl-tests prints it ("sum" "prod" "max" "min" "avg"); `*name` is static.
///
/// # Safety
/// `name` is NULL or points to a writable `const char*`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_redop_name(op: u32, name: *mut *const c_char) -> weft_status {
    boundary!("weft_redop_name", {
        let name = arg_mut!(name, "name");
        *name = c_name(red_op(op)?.name()).as_ptr();
        Ok(())
    })
}

/// The `weft_red_op` number whose nccl-tests name is `name`.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string; `op` is NULL or points to a writable
/// `uint32_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_redop_from_name(name: *const c_char, op: *mut u32) -> weft_status {
    boundary!("weft_redop_from_name", {
        let name = arg_cstr!(name, "name");
        let op = arg_mut!(op, "op");
        let found = RedOp::from_name(name).ok_or_else(|| {
            CallError::bad_arg("name", format!("{name:?}"), "one of sum prod max min avg")
        })?;
        *op = found as u32;
        Ok(())
    })
}

/// Checks a work item as a kernel would before trusting it: known collective, data type,
/// operator, algorithm and protocol numbers; a channel range inside `WEFT_MAX_CHANNELS`; a
/// root below `nranks` for Broadcast and Reduce; a chunk that is a non-zero multiple of the
/// element size; chunk steps a multiple of slice steps; `direct` 0, or 1 for all-reduce,
/// all-gather and broadcast; a byte count that
/// fits 64 bits. `WEFT_ERR_BAD_FIELD` names the first field at fault.
///
/// # Safety
/// `work` is NULL or points to a readable `weft_coll_work`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_coll_work_validate(
    work: *const CollWork,
    nranks: u32,
) -> weft_status {
    boundary!("weft_coll_work_validate", {
        let work = arg_ref!(work, "work");
        work.validate(nranks)?;
        Ok(())
    })
}

/// Checks a connection description: only known `WEFT_CONN_*` flags, `WEFT_STEPS` slots,
/// non-zero head and tail addresses, and SIMPLE slots that fit the SIMPLE buffer.
/// `WEFT_ERR_BAD_FIELD` names the first field at fault.
///
/// # Safety
/// `conn` is NULL or points to a readable `weft_conn_info`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_conn_info_validate(conn: *const ConnInfo) -> weft_status {
    boundary!("weft_conn_info_validate", {
        let conn = arg_ref!(conn, "conn");
        conn.validate()?;
        Ok(())
    })
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn every_name_has_a_static_c_copy() {
        for dt in DataType::ALL {
            assert_eq!(c_name(dt.name()).to_str().unwrap(), dt.name());
        }
        for op in RedOp::ALL {
            assert_eq!(c_name(op.name()).to_str().unwrap(), op.name());
        }
    }

    #[test]
    fn dtype_size_and_names_through_the_c_functions() {
        for dt in DataType::ALL {
            let mut size = 0usize;
            let mut name: *const c_char = std::ptr::null();
            // SAFETY: the out-pointer is a &mut to a local, so aligned and writable for the call.
            let status = unsafe { weft_dtype_size(*dt as u32, &mut size) };
            assert_eq!(status, weft_status::WEFT_OK);
            // SAFETY: the out-pointer is a &mut to a local, so aligned and writable for the call.
            let status = unsafe { weft_dtype_name(*dt as u32, &mut name) };
            assert_eq!(status, weft_status::WEFT_OK);
            assert_eq!(size, dt.size_of_elem());
            // SAFETY: weft_dtype_name returned OK, so `name` is a static C string.
            let name = unsafe { CStr::from_ptr(name) };
            let mut back = u32::MAX;
            // SAFETY: `name` is NUL-terminated, `back` is writable.
            let status = unsafe { weft_dtype_from_name(name.as_ptr(), &mut back) };
            assert_eq!(status, weft_status::WEFT_OK);
            assert_eq!(back, *dt as u32);
        }
        let mut size = 0usize;
        // SAFETY: the out-pointer is a &mut to a local, so aligned and writable for the call.
        let status = unsafe { weft_dtype_size(12, &mut size) };
        assert_eq!(status, weft_status::WEFT_ERR_BAD_FIELD);
    }

    #[test]
    fn layout_matches_core() {
        let mut l = weft_abi_layout::default();
        // SAFETY: the out-pointer is a &mut to a local, so aligned and writable for the call.
        assert_eq!(unsafe { weft_abi_layout_get(&mut l) }, weft_status::WEFT_OK);
        assert_eq!(l.abi_version, ABI_VERSION);
        assert_eq!(l.conn_info_size, 104);
        assert_eq!(l.coll_work_size, 88);
        assert_eq!(l.dev_channel_size, 64);
        assert_eq!(VERSION.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
    }
}
