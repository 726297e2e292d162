//! weft's `log` records, printed by NCCL's own logger (`ncclDebugLogger_t` from `init`), so
//! they appear in NCCL's format and obey `NCCL_DEBUG` / `NCCL_DEBUG_SUBSYS` like NCCL's own
//! messages. Warnings go out under `NCCL_ALL`, information under `NCCL_INIT|NCCL_NET` (what
//! NCCL's socket transport uses, so `NCCL_DEBUG=INFO` shows them with the default subsystems),
//! debug and trace under `NCCL_NET`.

use std::ffi::{CString, c_int, c_ulong};
use std::sync::{Mutex, PoisonError};

use weft_config::{DebugLevel, DebugSettings};

use crate::abi::{DebugLogger, log_level, log_subsys};

static SINK: Mutex<DebugLogger> = Mutex::new(None);

#[derive(Debug)]
struct NcclLogger;

static LOGGER: NcclLogger = NcclLogger;

fn c_text(s: &str) -> CString {
    // Interior NULs would cut the message; show them instead.
    CString::new(s.replace('\0', "\\0")).unwrap_or_default()
}

impl log::Log for NcclLogger {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &log::Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let Some(sink) = *SINK.lock().unwrap_or_else(PoisonError::into_inner) else {
            return;
        };
        let (level, flags): (c_int, c_ulong) = match record.level() {
            log::Level::Error | log::Level::Warn => (log_level::WARN, log_subsys::ALL),
            log::Level::Info => (log_level::INFO, log_subsys::INIT | log_subsys::NET),
            log::Level::Debug | log::Level::Trace => (log_level::TRACE, log_subsys::NET),
        };
        let file = c_text(record.file().unwrap_or("weft"));
        let line = record
            .line()
            .and_then(|l| c_int::try_from(l).ok())
            .unwrap_or(0);
        let text = c_text(&record.args().to_string());
        // SAFETY: NCCL's logger is printf-like; "%s" consumes exactly the one C string
        // passed, and every pointer is a NUL-terminated string alive for the call.
        unsafe {
            sink(
                level,
                flags,
                file.as_ptr(),
                line,
                c"%s".as_ptr(),
                text.as_ptr(),
            )
        };
    }

    fn flush(&self) {}
}

/// The most verbose level worth formatting, from `WEFT_DEBUG` or else `NCCL_DEBUG`
/// (NCCL's logger filters again; this only saves formatting what it would drop).
pub fn level_from(debug: &DebugSettings) -> log::LevelFilter {
    match debug.level {
        Some(DebugLevel::Trace) => log::LevelFilter::Trace,
        Some(DebugLevel::Debug) => log::LevelFilter::Debug,
        Some(DebugLevel::Info) => log::LevelFilter::Info,
        Some(DebugLevel::Abort) => log::LevelFilter::Error,
        Some(DebugLevel::Version | DebugLevel::Warn) | None => log::LevelFilter::Warn,
    }
}

/// Routes `log` records to `sink` (NCCL's logger; NULL silences them), at most as verbose
/// as `debug` says. Called at every `init`; the newest sink wins. If the process already
/// installed another `log` logger, weft's records go there instead.
pub fn install(sink: DebugLogger, debug: &DebugSettings) {
    *SINK.lock().unwrap_or_else(PoisonError::into_inner) = sink;
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(level_from(debug));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_from_the_environment() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            let lookup = move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            };
            weft_config::Settings::from_lookup(&lookup).unwrap().debug
        };
        assert_eq!(level_from(&env(&[])), log::LevelFilter::Warn);
        assert_eq!(
            level_from(&env(&[("NCCL_DEBUG", "info")])),
            log::LevelFilter::Info
        );
        assert_eq!(
            level_from(&env(&[("NCCL_DEBUG", "INFO"), ("WEFT_DEBUG", "TRACE")])),
            log::LevelFilter::Trace
        );
        assert_eq!(
            level_from(&env(&[("NCCL_DEBUG", "VERSION")])),
            log::LevelFilter::Warn
        );
        assert_eq!(c_text("a\0b").as_bytes(), b"a\\0b");
    }
}
