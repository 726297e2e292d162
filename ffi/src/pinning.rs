//! Keeping a library of ours mapped for the life of the process.
//!
//! A library whose helper threads may still run its code after the program lets it go
//! (NCCL `dlclose`s a net plugin with its last communicator; a program may `dlclose`
//! libnccl) must not be unmapped under them: that crashes the process. Pinning adds a
//! loader reference that is never dropped (`RTLD_NODELETE`).

use std::ffi::c_void;

/// Pins the library that holds the address `inside` (of any function or static of it);
/// `Err` says why it could not (the library may then be unloaded early). Call it once,
/// before the first helper thread starts.
pub fn keep_loaded(inside: usize) -> Result<(), &'static str> {
    // SAFETY: Dl_info is plain data; all-zero is a valid value for an out-parameter.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only looks the address up in the loader's tables (it never reads
    // through it) and writes `info`, which is valid.
    let found = unsafe { libc::dladdr(inside as *const c_void, &mut info) };
    if found == 0 || info.dli_fname.is_null() {
        return Err("cannot find this library's path");
    }
    // SAFETY: dli_fname is the loader's NUL-terminated path of an object that is loaded;
    // RTLD_NOLOAD only adds a reference to it, RTLD_NODELETE keeps it mapped for good.
    let handle = unsafe {
        libc::dlopen(
            info.dli_fname,
            libc::RTLD_NOW | libc::RTLD_NOLOAD | libc::RTLD_NODELETE,
        )
    };
    if handle.is_null() {
        return Err("dlopen with RTLD_NODELETE failed");
    }
    Ok(())
}
