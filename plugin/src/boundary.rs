//! The plugin's side of the panic boundary: every C entry point runs inside
//! [`boundary!`](crate::boundary!), and NCCL's error codes.
//!
//! A panic must never unwind into NCCL (that is undefined behaviour and, in practice, an
//! abort of the training job with no message). [`boundary!`](crate::boundary!) runs the body
//! inside [`weft_ffi::status_call`]; [`NetPlugin`] logs errors through NCCL's logger with the
//! entry point's name and gives the `ncclResult_t` for them, `ncclInternalError` for a panic.

use weft_ffi::Surface;
use weft_net::{NetError, NetErrorKind};

use crate::abi::{
    NCCL_INTERNAL_ERROR, NCCL_INVALID_USAGE, NCCL_REMOTE_ERROR, NCCL_SUCCESS, NCCL_SYSTEM_ERROR,
    NcclResult,
};

/// Runs an entry point's body (an expression of type `Result<(), NetError>`) inside the panic
/// boundary and returns the `ncclResult_t` for it.
#[macro_export]
macro_rules! boundary {
    ($entry:literal, $body:expr) => {
        $crate::boundary::run(
            $entry,
            || -> ::std::result::Result<(), ::weft_net::NetError> { $body },
        )
    };
}

/// The NCCL code for an error, following NCCL's plugin guide: system errors for the network
/// and the OS, remote errors when the peer went away, invalid usage for what the user must
/// fix (mismatched sizes, foreign handles, configuration), internal errors when NCCL called
/// the plugin wrongly.
pub fn code(err: &NetError) -> NcclResult {
    match err.kind() {
        NetErrorKind::Io(_) => NCCL_SYSTEM_ERROR,
        NetErrorKind::PeerClosed | NetErrorKind::Timeout => NCCL_REMOTE_ERROR,
        NetErrorKind::Truncated { .. }
        | NetErrorKind::TagMismatch { .. }
        | NetErrorKind::InvalidHandle(_)
        | NetErrorKind::Protocol => NCCL_INVALID_USAGE,
        NetErrorKind::InvalidArgument | NetErrorKind::Unsupported | NetErrorKind::Closed => {
            NCCL_INTERNAL_ERROR
        }
        _ => NCCL_INTERNAL_ERROR,
    }
}

/// The net plugin as a [`Surface`]: `ncclResult_t` codes by [`code`]; a failure is logged
/// through NCCL's logger (the plugin API has no last-error text).
#[derive(Debug)]
pub struct NetPlugin;

impl Surface for NetPlugin {
    type Code = NcclResult;
    type Error = NetError;
    const SUCCESS: NcclResult = NCCL_SUCCESS;
    const PANICKED: NcclResult = NCCL_INTERNAL_ERROR;

    fn failed(entry: &str, err: NetError) -> NcclResult {
        log::warn!("NET/weft : {entry} failed: {err}");
        code(&err)
    }

    fn panicked(entry: &str, message: &str) {
        log::error!(
            "NET/weft : {entry}: internal error: panicked ({message}); the operation failed and \
             NCCL gets ncclInternalError. Please report this with the NCCL_DEBUG=INFO log"
        );
    }
}

/// What [`boundary!`](crate::boundary!) expands to.
pub fn run(entry: &str, body: impl FnOnce() -> Result<(), NetError>) -> NcclResult {
    weft_ffi::status_call::<NetPlugin>(entry, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn success_error_and_panic() {
        assert_eq!(run("ok", || Ok(())), NCCL_SUCCESS);
        let e = || Err(NetError::new(NetErrorKind::PeerClosed, "recv"));
        assert_eq!(run("peer", e), NCCL_REMOTE_ERROR);
        assert_eq!(
            run("panics", || panic!("boom {}", 7)),
            NCCL_INTERNAL_ERROR,
            "a panic becomes ncclInternalError"
        );
        assert_eq!(
            crate::boundary!("macro", {
                let v: Vec<u8> = Vec::new();
                // An out-of-bounds index: the panic must not escape.
                if v[usize::from(v.is_empty())] == 0 {
                    return Ok(());
                }
                Ok(())
            }),
            NCCL_INTERNAL_ERROR
        );
    }

    #[test]
    fn codes_follow_the_plugin_guide() {
        let c = |k| code(&NetError::new(k, "x"));
        assert_eq!(
            c(NetErrorKind::Io(std::io::ErrorKind::ConnectionRefused)),
            NCCL_SYSTEM_ERROR
        );
        assert_eq!(c(NetErrorKind::Timeout), NCCL_REMOTE_ERROR);
        assert_eq!(
            c(NetErrorKind::Truncated {
                send_size: 2,
                recv_size: 1
            }),
            NCCL_INVALID_USAGE
        );
        assert_eq!(c(NetErrorKind::TagMismatch { tag: 3 }), NCCL_INVALID_USAGE);
        assert_eq!(c(NetErrorKind::InvalidArgument), NCCL_INTERNAL_ERROR);
        assert_eq!(c(NetErrorKind::Unsupported), NCCL_INTERNAL_ERROR);
    }
}
