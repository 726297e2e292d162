//! `ncclMemAlloc` / `ncclMemFree`, buffer registrations, and user reduction operators.

use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::{Mutex, MutexGuard};

use weft_cuda::{Context, Device, DeviceBuffer};

use super::{NcclComm, non_null};
use crate::boundary::run;
use crate::comm;
use crate::debug;
use crate::redop::{self, PreMulSum};
use crate::result::{ApiError, NcclResult};
use crate::types::{NUM_OPS, data_type};

/// Buffers from `ncclMemAlloc`, by device address; freed by `ncclMemFree`.
static ALLOCATIONS: Mutex<Option<HashMap<u64, DeviceBuffer>>> = Mutex::new(None);
/// Live registration handles (boxed (address, bytes), by handle address).
static REGISTRATIONS: Mutex<Option<HashMap<usize, Registration>>> = Mutex::new(None);
/// A registered (address, bytes), boxed so that its address is the handle.
type Registration = Box<(u64, usize)>;

fn locked<T>(m: &'static Mutex<Option<T>>) -> MutexGuard<'static, Option<T>> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Device memory on the current GPU (`cuMemAlloc`: peer access covers it, so every weft
/// algorithm can use it).
///
/// # Safety
///
/// `ptr` must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclMemAlloc(ptr: *mut *mut c_void, size: usize) -> NcclResult {
    run("ncclMemAlloc", || {
        non_null(ptr, "ptr")?;
        if size == 0 {
            return Err(ApiError::invalid_argument("size 0"));
        }
        let dev = comm::current_device()?;
        let ctx = Context::primary(Device::get(dev)?)?;
        let buf = DeviceBuffer::alloc(&ctx, size)?;
        let addr = buf.ptr();
        locked(&ALLOCATIONS)
            .get_or_insert_with(HashMap::new)
            .insert(addr, buf);
        // SAFETY: checked non-null; writable by the caller's promise.
        unsafe { ptr.write(addr as *mut c_void) };
        Ok(())
    })
}

/// Frees what `ncclMemAlloc` returned; NULL is nothing to free.
#[unsafe(no_mangle)]
pub extern "C" fn ncclMemFree(ptr: *mut c_void) -> NcclResult {
    run("ncclMemFree", || {
        if ptr.is_null() {
            return Ok(());
        }
        let buf = locked(&ALLOCATIONS)
            .as_mut()
            .and_then(|m| m.remove(&(ptr as u64)));
        match buf {
            Some(b) => {
                drop(b);
                Ok(())
            }
            None => Err(ApiError::invalid_argument(format!(
                "{ptr:p} was not returned by ncclMemAlloc (or was freed already)"
            ))),
        }
    })
}

/// Accepted: weft's collectives take any device buffer as is, so a registration is a
/// handle that changes nothing (said at INFO). It is checked and must be deregistered.
///
/// # Safety
///
/// `handle` must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommRegister(
    comm: NcclComm,
    buff: *mut c_void,
    size: usize,
    handle: *mut *mut c_void,
) -> NcclResult {
    run("ncclCommRegister", || {
        non_null(handle, "handle")?;
        non_null(buff, "buff")?;
        let c = comm::lookup(comm as usize)?;
        let reg = Box::new((buff as u64, size));
        let key = &*reg as *const (u64, usize) as usize;
        locked(&REGISTRATIONS)
            .get_or_insert_with(HashMap::new)
            .insert(key, reg);
        debug::info(
            c.device,
            &format!(
                "ncclCommRegister {buff:p} ({size} bytes): weft uses buffers as they are; \
                 the registration changes nothing"
            ),
        );
        // SAFETY: checked non-null; writable by the caller's promise.
        unsafe { handle.write(key as *mut c_void) };
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclCommDeregister(comm: NcclComm, handle: *mut c_void) -> NcclResult {
    run("ncclCommDeregister", || {
        comm::lookup(comm as usize)?;
        let removed = locked(&REGISTRATIONS)
            .as_mut()
            .and_then(|m| m.remove(&(handle as usize)));
        match removed {
            Some(_) => Ok(()),
            None => Err(ApiError::invalid_argument(format!(
                "handle {handle:p} is not a live ncclCommRegister handle"
            ))),
        }
    })
}

/// Not supported: weft has no symmetric-memory kernels.
///
/// # Safety
///
/// No pointer is read.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommWindowRegister(
    _comm: NcclComm,
    _buff: *mut c_void,
    _size: usize,
    _win: *mut *mut c_void,
    _win_flags: c_int,
) -> NcclResult {
    run("ncclCommWindowRegister", || {
        Err(ApiError::unsupported(
            "ncclCommWindowRegister (symmetric memory windows)",
        ))
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclCommWindowDeregister(_comm: NcclComm, _win: *mut c_void) -> NcclResult {
    run("ncclCommWindowDeregister", || {
        Err(ApiError::unsupported(
            "ncclCommWindowDeregister (symmetric memory windows)",
        ))
    })
}

/// NCCL's `PreMulSum` operator for `datatype` on `comm`: each rank's input multiplied by
/// its scalar (ranks may pass different ones), then summed. `residence`
/// `ncclScalarHostImmediate` (1) reads the host value now; `ncclScalarDevice` (0) keeps the
/// device address, which every call using the operator reads when its kernel runs
/// (stream-ordered). The new value (>= ncclNumOps) is valid on `comm` only, with
/// `datatype` only, until `ncclRedOpDestroy`.
///
/// # Safety
///
/// `op` must be null or writable; for `ncclScalarHostImmediate`, `scalar` must be null or
/// readable for one element of `datatype`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclRedOpCreatePreMulSum(
    op: *mut c_int,
    scalar: *mut c_void,
    datatype: c_int,
    residence: c_int,
    comm: NcclComm,
) -> NcclResult {
    run("ncclRedOpCreatePreMulSum", || {
        non_null(op, "op")?;
        let dtype = data_type(datatype)?;
        let c = comm::lookup(comm as usize)?;
        // SAFETY: readable for one element when host-resident, by the caller's promise
        // (null is refused inside).
        let scalar = unsafe { redop::scalar_from_c(scalar.cast::<u8>(), dtype, residence) }?;
        let value = c.user_ops().create(PreMulSum { dtype, scalar })?;
        debug::info(
            c.device,
            &format!("ncclRedOpCreatePreMulSum: op {value} for {dtype}, scalar {scalar:?}"),
        );
        // SAFETY: checked non-null; writable by the caller's promise.
        unsafe { op.write(value) };
        Ok(())
    })
}

/// Frees an operator from `ncclRedOpCreatePreMulSum` on `comm`. Calls already issued
/// with it are unaffected (they carry its scalar, or its scalar's address, with them).
#[unsafe(no_mangle)]
pub extern "C" fn ncclRedOpDestroy(op: c_int, comm: NcclComm) -> NcclResult {
    run("ncclRedOpDestroy", || {
        if (0..NUM_OPS).contains(&op) {
            return Err(ApiError::invalid_argument(format!(
                "op {op} is a built-in operator, not one from ncclRedOpCreatePreMulSum"
            )));
        }
        let c = comm::lookup(comm as usize)?;
        c.user_ops().destroy(op)
    })
}
