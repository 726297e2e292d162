//! `NCCL_DEBUG` output in NCCL's line format (`host:pid:tid [dev] NCCL INFO text`), so that
//! scripts and people reading a job's log find weft's lines where they find NCCL's.
//!
//! `NCCL_DEBUG=WARN` prints failures, `INFO` also what weft chose (version, transport,
//! channels, the variables set to other than their defaults); `WEFT_DEBUG`, when set, wins
//! over it (weft-config's rule for every pair of names). Lines go to stdout, as NCCL's do.

use std::fs::File;
use std::io::Write;
use std::sync::{Mutex, OnceLock};

use weft_config::{DebugLevel, DebugSettings, Settings};

/// How much to print.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    None,
    /// The version line alone (`NCCL_DEBUG=VERSION`).
    Version,
    Warn,
    Info,
}

/// What libnccl prints at an `NCCL_DEBUG` level (weft-config parses NCCL's names, any
/// case): TRACE (and weft's DEBUG) as INFO, ABORT as WARN, VERSION only the version line,
/// as INFO does first.
pub fn print_level(level: Option<DebugLevel>) -> Level {
    match level {
        Some(DebugLevel::Info | DebugLevel::Debug | DebugLevel::Trace) => Level::Info,
        Some(DebugLevel::Warn | DebugLevel::Abort) => Level::Warn,
        Some(DebugLevel::Version) => Level::Version,
        None => Level::None,
    }
}

/// `NCCL_DEBUG`, `NCCL_DEBUG_SUBSYS` and `NCCL_DEBUG_FILE`, read once, at the first line:
/// they hold for the whole process, as NCCL's do.
fn settings() -> &'static DebugSettings {
    static DEBUG: OnceLock<DebugSettings> = OnceLock::new();
    DEBUG.get_or_init(|| Settings::from_lookup_or_defaults(&weft_config::lookup::process).debug)
}

fn level() -> Level {
    print_level(settings().level)
}

/// Whether `NCCL_DEBUG_SUBSYS` lets INFO lines of subsystem `name` through, by NCCL's rule:
/// unset means INIT,BOOTSTRAP,ENV; a list names the subsystems (ALL: every one); a list
/// starting with `^` names those left out.
pub fn subsys_enabled(subsys: Option<&str>, name: &str) -> bool {
    let list = subsys.unwrap_or("INIT,BOOTSTRAP,ENV").trim();
    let (invert, list) = match list.strip_prefix('^') {
        Some(rest) => (true, rest),
        None => (false, list),
    };
    let named = list
        .split(',')
        .map(str::trim)
        .any(|s| s.eq_ignore_ascii_case(name) || s.eq_ignore_ascii_case("ALL"));
    named != invert
}

/// Whether the per-call lines (`NCCL_DEBUG_SUBSYS` naming COLL) print: read once.
pub fn coll_enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        level() >= Level::Info && subsys_enabled(settings().subsys.as_deref(), "COLL")
    })
}

fn host() -> &'static str {
    static HOST: OnceLock<String> = OnceLock::new();
    HOST.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().split('.').next().unwrap_or("").to_string())
            .unwrap_or_else(|_| "localhost".to_string())
    })
}

/// One line in NCCL's format; `dev` is the CUDA ordinal the line concerns (NCCL prints
/// the thread's current device; weft prints the communicator's, or 0).
pub fn format_line(host: &str, pid: u32, tid: i64, dev: usize, kind: &str, text: &str) -> String {
    format!("{host}:{pid}:{tid} [{dev}] NCCL {kind} {text}\n")
}

/// `NCCL_DEBUG_FILE`'s name with NCCL's substitutions: `%h` the host name, `%p` the process
/// id, `%%` a percent sign; any other `%` stays as it is.
pub fn debug_file_name(pattern: &str, host: &str, pid: u32) -> String {
    let mut out = String::with_capacity(pattern.len() + 16);
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, chars.peek()) {
            ('%', Some('h')) => {
                out.push_str(host);
                chars.next();
            }
            ('%', Some('p')) => {
                out.push_str(&pid.to_string());
                chars.next();
            }
            ('%', Some('%')) => {
                out.push('%');
                chars.next();
            }
            _ => out.push(c),
        }
    }
    out
}

/// Where the lines go: `NCCL_DEBUG_FILE`'s file, created at the first line (as NCCL does),
/// or stdout (unset, or the file cannot be created: then the first line says so).
fn file() -> Option<&'static Mutex<File>> {
    static FILE: OnceLock<Option<Mutex<File>>> = OnceLock::new();
    FILE.get_or_init(|| {
        let pattern = settings().file.as_deref()?;
        let name = debug_file_name(pattern, host(), std::process::id());
        match File::create(&name) {
            Ok(f) => Some(Mutex::new(f)),
            Err(e) => {
                let line = format_line(
                    host(),
                    std::process::id(),
                    0,
                    0,
                    "WARN",
                    &format!("NCCL_DEBUG_FILE {name}: {e}; writing to stdout"),
                );
                let _ = std::io::stdout().lock().write_all(line.as_bytes());
                None
            }
        }
    })
    .as_ref()
}

fn emit(at: Level, kind: &str, dev: usize, text: &str) {
    if level() < at {
        return;
    }
    // SAFETY: gettid takes no arguments and cannot fail.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) };
    let line = format_line(host(), std::process::id(), tid, dev, kind, text);
    // A closed stdout or a full disk must not fail the call that logs.
    match file() {
        Some(f) => {
            let mut f = f.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let _ = f.write_all(line.as_bytes());
        }
        None => {
            let _ = std::io::stdout().lock().write_all(line.as_bytes());
        }
    }
}

/// weft's own crates report through the `log` facade (a deadline's health-query report, a
/// NET proxy's failure); libnccl sends their warnings and errors to `NCCL_DEBUG=WARN`
/// lines, where a job's log shows NCCL's own. Their INFO records are left out: libnccl
/// prints what weft chose in NCCL's words itself.
struct RuntimeRecords;

impl log::Log for RuntimeRecords {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        metadata.level() <= log::Level::Warn && level() >= Level::Warn
    }

    fn log(&self, record: &log::Record) {
        if self.enabled(record.metadata()) {
            warn(0, &record.args().to_string());
        }
    }

    fn flush(&self) {}
}

/// Installs `RuntimeRecords` as the `log` crate's logger, once. Through `libnccl.so` the
/// library has its own copy of `log`, so a host program's logger is neither replaced nor
/// told. A Rust program linking weft-nccl as a crate shares `log` with it: one that set its
/// logger first keeps it (weft's records then go there), and one that sets it after the
/// first libnccl call finds it taken (`log::set_logger` fails; `env_logger::init` panics):
/// such a program sets its logger before calling libnccl.
pub fn forward_runtime_records() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if log::set_logger(&RuntimeRecords).is_ok() {
            log::set_max_level(log::LevelFilter::Warn);
        }
    });
}

pub fn info(dev: usize, text: &str) {
    emit(Level::Info, "INFO", dev, text);
}

pub fn warn(dev: usize, text: &str) {
    emit(Level::Warn, "WARN", dev, text);
}

/// The version line NCCL prints first at INFO, naming weft as the implementation.
pub fn version_line() -> String {
    format!(
        "NCCL version {}.{}.{}+weft-{} (weft's libnccl over its GPU communicator)",
        crate::NCCL_MAJOR,
        crate::NCCL_MINOR,
        crate::NCCL_PATCH,
        env!("CARGO_PKG_VERSION")
    )
}

/// Prints [`version_line`] once per process, at `VERSION` and above (NCCL prints it at
/// `NCCL_DEBUG=VERSION` too: scripts check which library answered with it).
pub fn version_once(dev: usize) {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| emit(Level::Version, "INFO", dev, &version_line()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_follow_nccl_names() {
        let parse_level = |v: Option<&'static str>| {
            let lookup = move |k: &str| (k == "NCCL_DEBUG").then_some(v).flatten();
            let s = Settings::from_lookup(&|k| lookup(k).map(str::to_string)).unwrap();
            print_level(s.debug.level)
        };
        assert_eq!(parse_level(Some("INFO")), Level::Info);
        assert_eq!(parse_level(Some(" info ")), Level::Info);
        assert_eq!(parse_level(Some("TRACE")), Level::Info);
        assert_eq!(parse_level(Some("WARN")), Level::Warn);
        assert_eq!(parse_level(Some("ABORT")), Level::Warn);
        assert_eq!(parse_level(Some("VERSION")), Level::Version);
        assert_eq!(parse_level(Some("")), Level::None);
        assert_eq!(parse_level(Some("LOUD")), Level::None);
        assert_eq!(parse_level(None), Level::None);
    }

    #[test]
    fn debug_file_names_take_host_and_pid() {
        assert_eq!(
            debug_file_name("/tmp/nccl.%h.%p.log", "gpu7", 4242),
            "/tmp/nccl.gpu7.4242.log"
        );
        assert_eq!(debug_file_name("a%%b%x%", "h", 1), "a%b%x%");
        assert_eq!(debug_file_name("plain", "h", 1), "plain");
    }

    #[test]
    fn subsystems_follow_nccl_rules() {
        assert!(!subsys_enabled(None, "COLL"));
        assert!(subsys_enabled(None, "INIT"));
        assert!(subsys_enabled(Some("INIT,COLL"), "COLL"));
        assert!(subsys_enabled(Some("coll"), "COLL"));
        assert!(subsys_enabled(Some("ALL"), "COLL"));
        assert!(!subsys_enabled(Some("^COLL"), "COLL"));
        assert!(subsys_enabled(Some("^P2P"), "COLL"));
        assert!(!subsys_enabled(Some("INIT,P2P"), "COLL"));
    }

    #[test]
    fn lines_have_nccl_shape() {
        assert_eq!(
            format_line("gpu7", 4242, 4250, 1, "INFO", "Init COMPLETE"),
            "gpu7:4242:4250 [1] NCCL INFO Init COMPLETE\n"
        );
        let v = version_line();
        assert!(v.starts_with("NCCL version 2.28.3+weft-"), "{v}");
    }
}
