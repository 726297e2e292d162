//! The logger a loaded plugin gets at `init`: its messages go to the `log` crate, at the
//! level NCCL's logger would print them at, prefixed with the plugin's table name.
//!
//! NCCL's `ncclDebugLogger_t` is a C variadic function (`fmt, ...`). Stable Rust cannot
//! define one, so the callback declares the five fixed parameters and then six integer
//! parameters where the caller puts the first six integer or pointer arguments of the
//! `...`: on the C ABIs weft runs on (x86-64 System V, AArch64 AAPCS64 on Linux) a variadic
//! call passes them exactly where a non-variadic callee reads its next parameters (the
//! remaining argument registers, then the stack in order). [`format()`] then reads only as
//! many of them as the format string's conversions say were passed, as `printf` would.
//! Floating-point arguments travel in other registers: `%f` and its kin print as `?`, and
//! an argument past the sixth as `?` too.

use std::ffi::{CStr, c_char, c_int, c_ulong};

use crate::nccl_abi::{DebugLogger, log_level};

/// NCCL's `NCCL_LOG_VERSION` and `NCCL_LOG_ABORT`, which `log_level` does not name.
const LOG_VERSION: c_int = 1;
const LOG_ABORT: c_int = 4;

/// The callback: `ncclDebugLogger_t`'s fixed parameters, then the first six integer
/// arguments of its `...` (see the module comment).
#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn forward(
    level: c_int,
    _flags: c_ulong,
    file: *const c_char,
    line: c_int,
    fmt: *const c_char,
    a0: usize,
    a1: usize,
    a2: usize,
    a3: usize,
    a4: usize,
    a5: usize,
) {
    // Never unwind into the plugin: a panic while logging is dropped with the message.
    let _ = std::panic::catch_unwind(|| {
        let level = match level {
            log_level::WARN => log::Level::Warn,
            LOG_ABORT => log::Level::Error,
            log_level::INFO | LOG_VERSION => log::Level::Info,
            log_level::TRACE => log::Level::Trace,
            _ => return,
        };
        if level > log::max_level() || fmt.is_null() {
            return;
        }
        // SAFETY: the plugin passes NUL-terminated strings (or NULL, checked) alive for the
        // call, as NCCL's logger requires of it.
        let fmt = unsafe { CStr::from_ptr(fmt) };
        // SAFETY: the arguments are those of a printf-like call with this format, as the
        // logger's contract requires of the plugin.
        let text = unsafe { format(fmt.to_bytes(), &[a0, a1, a2, a3, a4, a5]) };
        let file = if file.is_null() {
            std::borrow::Cow::Borrowed("?")
        } else {
            // SAFETY: as above.
            unsafe { CStr::from_ptr(file) }.to_string_lossy()
        };
        log::log!(
            level,
            "NET/Plugin ({file}:{line}): {}",
            text.trim_end_matches('\n')
        );
    });
}

/// `printf`'s integer, string, character and pointer conversions over `args` (flags, width
/// and precision are read and ignored; length modifiers pick the width of the integer).
///
/// # Safety
/// `args` holds, in order, the integer and pointer arguments that `fmt` converts (a `%s`
/// one a NUL-terminated string or NULL), as far as there are six of them.
pub unsafe fn format(fmt: &[u8], args: &[usize]) -> String {
    let mut out = Vec::with_capacity(fmt.len());
    let mut next = args.iter().copied();
    let mut i = 0;
    while let Some(&c) = fmt.get(i) {
        i += 1;
        if c != b'%' {
            out.push(c);
            continue;
        }
        // Flags, width, precision.
        while fmt.get(i).is_some_and(|b| b"-+ #0123456789.*'".contains(b)) {
            i += 1;
        }
        // Length modifiers.
        let mut long = 0;
        while let Some(&m) = fmt.get(i) {
            match m {
                b'l' | b'j' | b'z' | b't' | b'q' | b'L' => long += 1,
                b'h' => {}
                _ => break,
            }
            i += 1;
        }
        let Some(&conv) = fmt.get(i) else { break };
        i += 1;
        let text = match conv {
            b'%' => "%".to_string(),
            b'd' | b'i' | b'u' | b'x' | b'X' | b'o' | b'c' | b'p' | b's' => match next.next() {
                None => "?".to_string(),
                Some(raw) => match conv {
                    // An int argument fills the low 32 bits of its slot.
                    b'd' | b'i' if long == 0 => (raw as u32 as i32).to_string(),
                    b'd' | b'i' => (raw as i64).to_string(),
                    b'u' if long == 0 => (raw as u32).to_string(),
                    b'u' => raw.to_string(),
                    b'x' if long == 0 => format!("{:x}", raw as u32),
                    b'x' => format!("{raw:x}"),
                    b'X' if long == 0 => format!("{:X}", raw as u32),
                    b'X' => format!("{raw:X}"),
                    b'o' => format!("{:o}", if long == 0 { raw & 0xffff_ffff } else { raw }),
                    b'c' => char::from(raw as u8).to_string(),
                    b'p' => format!("{raw:#x}"),
                    _ if raw == 0 => "(null)".to_string(),
                    // SAFETY: a `%s` argument is a NUL-terminated string (the contract).
                    _ => unsafe { CStr::from_ptr(raw as *const c_char) }
                        .to_string_lossy()
                        .into_owned(),
                },
            },
            // Floating point travels in vector registers, which this callback cannot see.
            b'f' | b'F' | b'e' | b'E' | b'g' | b'G' | b'a' | b'A' => "?".to_string(),
            other => format!("%{}", char::from(other)),
        };
        out.extend_from_slice(text.as_bytes());
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `forward`'s type.
type Forward = unsafe extern "C" fn(
    c_int,
    c_ulong,
    *const c_char,
    c_int,
    *const c_char,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
);

/// The logger to hand to a plugin's `init`.
pub fn debug_logger() -> DebugLogger {
    let fixed: Forward = forward;
    // SAFETY: see the module comment: on the ABIs weft supports, a variadic call passes the
    // fixed arguments where `forward` reads them and its first six integer arguments where
    // `forward` reads `a0..a5`, and `forward` uses only those the format converts.
    Some(unsafe {
        std::mem::transmute::<
            Forward,
            unsafe extern "C" fn(c_int, c_ulong, *const c_char, c_int, *const c_char, ...),
        >(fixed)
    })
}

#[cfg(test)]
mod tests {
    use super::format;

    #[test]
    fn printf_conversions() {
        let s = c"eth0";
        let args = [
            s.as_ptr() as usize,
            (-3i32) as u32 as usize,
            0x1234,
            usize::MAX,
            0,
            b'x' as usize,
        ];
        // SAFETY: the arguments match the conversions.
        let text = unsafe {
            format(
                b"NET/X : Using %s, %d devices, id %#lx, %lu, ptr %p %c 100%% %.2f %y",
                &args,
            )
        };
        assert_eq!(
            text,
            format!(
                "NET/X : Using eth0, -3 devices, id 1234, {}, ptr 0x0 x 100% ? %y",
                usize::MAX
            )
        );
        // SAFETY: a NULL string is printed as (null); a missing argument as `?`.
        assert_eq!(unsafe { format(b"%s %s", &[0]) }, "(null) ?");
        // SAFETY: no conversions.
        assert_eq!(unsafe { format(b"plain %", &[]) }, "plain ");
    }
}
