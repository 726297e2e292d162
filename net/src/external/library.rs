//! Finding and opening a net plugin as NCCL 2.28 does (`src/plugin/plugin_open.cc`,
//! `src/plugin/net.cc`): which names `NCCL_NET_PLUGIN` asks for, which files each name may
//! be, and which table (`ncclNetPlugin_v11` down to `_v8`) the library exports.
//!
//! Libraries opened here are never closed: a plugin may keep threads running its code
//! (weft's own does), and unloading code under them crashes the process.

use std::ffi::{CStr, c_void};
use std::fmt;
use std::ptr::NonNull;

use super::table::{AbiVersion, Table};

/// What NCCL opens when `NCCL_NET_PLUGIN` is unset.
pub const DEFAULT_PLUGIN: &str = "libnccl-net.so";

/// The plugins `NCCL_NET_PLUGIN` asks for, in the order they are tried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginRequest {
    /// Each entry as written: a name, a library name or a path.
    pub entries: Vec<String>,
    /// Whether the user named them (`NCCL_NET_PLUGIN` set): a failure is then worth a
    /// warning; NCCL's default `libnccl-net.so` is usually absent and only worth INFO.
    pub explicit: bool,
}

impl PluginRequest {
    /// From `NCCL_NET_PLUGIN`'s value: unset is NCCL's default `libnccl-net.so`; `none`
    /// (any case) is no plugin; otherwise a comma-separated list (empty entries skipped).
    pub fn from_setting(value: Option<&str>) -> PluginRequest {
        match value {
            None => PluginRequest {
                entries: vec![DEFAULT_PLUGIN.to_string()],
                explicit: false,
            },
            Some(v) if v.trim().eq_ignore_ascii_case("none") => PluginRequest {
                entries: Vec::new(),
                explicit: true,
            },
            Some(v) => PluginRequest {
                entries: v
                    .split(',')
                    .filter(|e| !e.is_empty())
                    .map(str::to_string)
                    .collect(),
                explicit: true,
            },
        }
    }
}

/// The names `dlopen` is given for one entry, in order: the entry itself, then
/// `libnccl-net-<entry>.so` unless the entry is a path (has a `/`) or already a library
/// name (`lib*.so`). So `weft` tries `weft` then `libnccl-net-weft.so`.
pub fn candidates(entry: &str) -> Vec<String> {
    let mut names = vec![entry.to_string()];
    let is_library_name = entry.starts_with("lib") && entry.ends_with(".so");
    if !entry.is_empty() && !entry.contains('/') && !is_library_name {
        names.push(format!("libnccl-net-{entry}.so"));
    }
    names
}

/// One `dlopen` attempt and the loader's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    /// The name or path passed to `dlopen`.
    pub name: String,
    /// What `dlerror()` said.
    pub dlerror: String,
}

impl Attempt {
    /// Whether the loader found no such file (as opposed to a file it refused).
    pub fn is_absent(&self) -> bool {
        self.dlerror.contains("No such file or directory")
    }
}

/// Why an entry of `NCCL_NET_PLUGIN` gave no usable plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadError {
    /// No candidate loaded: each attempt with the loader's answer.
    NotLoaded { entry: String, tried: Vec<Attempt> },
    /// The library loaded but exports no table weft takes (NCCL: "is unsupported").
    Unsupported {
        path: String,
        /// Older tables it does export (`ncclNetPlugin_v7`...), if any.
        older: Vec<&'static str>,
    },
    /// The table has a NULL where a function is required.
    BadTable {
        path: String,
        symbol: &'static str,
        entry: &'static str,
    },
}

impl LoadError {
    /// Whether every attempt found no file (NCCL's "Could not find").
    pub fn is_absent(&self) -> bool {
        matches!(self, LoadError::NotLoaded { tried, .. } if tried.iter().all(Attempt::is_absent))
    }
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::NotLoaded { tried, .. } if self.is_absent() => {
                // NCCL's words ("NET/Plugin: Could not find: <names>"), with the loader's.
                write!(f, "NET/Plugin: Could not find:")?;
                for a in tried {
                    write!(f, " {} ({})", a.name, a.dlerror)?;
                }
                Ok(())
            }
            LoadError::NotLoaded { tried, .. } => {
                for (i, a) in tried.iter().enumerate() {
                    if i > 0 {
                        f.write_str("; ")?;
                    }
                    write!(f, "NET/Plugin: {}: {}", a.name, a.dlerror)?;
                }
                Ok(())
            }
            LoadError::Unsupported { path, older } => {
                write!(
                    f,
                    "External network plugin {path} is unsupported: it exports none of \
                     ncclNetPlugin_v11, _v10, _v9, _v8"
                )?;
                if !older.is_empty() {
                    write!(f, " (only {}: weft loads v8 to v11)", older.join(", "))?;
                }
                Ok(())
            }
            LoadError::BadTable {
                path,
                symbol,
                entry,
            } => write!(
                f,
                "External network plugin {path}: {symbol}.{entry} is NULL, and weft cannot \
                 work without it"
            ),
        }
    }
}

impl std::error::Error for LoadError {}

/// A plugin library that loaded and exports a table weft takes.
#[derive(Debug, Clone)]
pub struct PluginLibrary {
    /// Where the loader found it (the full path when it can tell, else the name opened).
    pub path: String,
    /// Its newest table.
    pub table: Table,
}

/// Opens the first candidate of `entry` that loads (`RTLD_NOW | RTLD_LOCAL`, as NCCL) and
/// takes its newest table.
pub fn open(entry: &str) -> Result<PluginLibrary, LoadError> {
    open_versions(entry, &AbiVersion::PROBE_ORDER)
}

/// As [`open`], taking the first of `versions` that the library exports: a test (or a
/// user pinning an older ABI of a plugin that exports several) picks the table shape.
pub fn open_versions(entry: &str, versions: &[AbiVersion]) -> Result<PluginLibrary, LoadError> {
    let mut tried = Vec::new();
    for name in candidates(entry) {
        // SAFETY: dlopen runs the library's initialisers. The name is the one the user put in
        // NCCL_NET_PLUGIN (or NCCL's default), whose job is to be loaded into NCCL programs.
        let opened = unsafe {
            libloading::os::unix::Library::open(
                Some(&name),
                libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_LOCAL,
            )
        };
        match opened {
            Ok(library) => {
                // Never closed (see the module comment).
                let library: &'static libloading::os::unix::Library = Box::leak(Box::new(library));
                return probe(library, &name, versions);
            }
            Err(e) => tried.push(Attempt {
                dlerror: dlerror_text(&e, &name),
                name,
            }),
        }
    }
    Err(LoadError::NotLoaded {
        entry: entry.to_string(),
        tried,
    })
}

/// Looks up `symbol` as a data address; `None` when absent or NULL.
fn lookup(library: &libloading::os::unix::Library, symbol: &str) -> Option<NonNull<c_void>> {
    let name = format!("{symbol}\0");
    // SAFETY: the symbol is read as a plain data pointer, valid for any symbol; it becomes a
    // table only through `Table::check`.
    let found = unsafe { library.get::<*mut c_void>(name.as_bytes()) };
    found.ok().and_then(|s| NonNull::new(*s))
}

/// The newest table of `library`, probed as NCCL 2.28 does (v11 first).
fn probe(
    library: &'static libloading::os::unix::Library,
    opened_as: &str,
    versions: &[AbiVersion],
) -> Result<PluginLibrary, LoadError> {
    for &version in versions {
        let Some(symbol) = lookup(library, version.symbol()) else {
            continue;
        };
        let path = loaded_path(symbol).unwrap_or_else(|| opened_as.to_string());
        // SAFETY: the symbol is the plugin's exported table of this version (its name says
        // so, which is the plugin ABI's whole contract), in a library never closed.
        let table = unsafe { Table::check(version, symbol) };
        return match table {
            Ok(table) => Ok(PluginLibrary { path, table }),
            Err(entry) => Err(LoadError::BadTable {
                path,
                symbol: version.symbol(),
                entry,
            }),
        };
    }
    let older: Vec<&'static str> = ["ncclNetPlugin_v7", "ncclNetPlugin_v6", "ncclNetPlugin_v5"]
        .into_iter()
        .filter(|s| lookup(library, s).is_some())
        .collect();
    let path = ["ncclNetPlugin_v7", "ncclNetPlugin_v6", "ncclNetPlugin_v5"]
        .into_iter()
        .find_map(|s| lookup(library, s))
        .and_then(loaded_path)
        .unwrap_or_else(|| opened_as.to_string());
    Err(LoadError::Unsupported { path, older })
}

/// The file the loader mapped `symbol` from (NCCL prints that path, not the name opened).
fn loaded_path(symbol: NonNull<c_void>) -> Option<String> {
    // SAFETY: Dl_info is plain data (pointers and integers); all-zero is valid.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads the loader's tables; `info` is valid for writes.
    let found = unsafe { libc::dladdr(symbol.as_ptr(), &mut info) };
    if found == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dli_fname is the loader's NUL-terminated path of a loaded object.
    let path = unsafe { CStr::from_ptr(info.dli_fname) };
    Some(path.to_string_lossy().into_owned())
}

/// libloading wraps dlerror's text in its own words; keep the loader's, without the name
/// glibc repeats in front.
fn dlerror_text(err: &libloading::Error, name: &str) -> String {
    use std::error::Error as _;
    let text = err
        .source()
        .map_or_else(|| err.to_string(), ToString::to_string);
    match text.strip_prefix(name).and_then(|r| r.strip_prefix(": ")) {
        Some(rest) => rest.to_string(),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_resolve_as_nccl_does() {
        assert_eq!(candidates("weft"), ["weft", "libnccl-net-weft.so"]);
        assert_eq!(candidates("aws-ofi"), ["aws-ofi", "libnccl-net-aws-ofi.so"]);
        assert_eq!(
            candidates("/opt/x/libnccl-net.so"),
            ["/opt/x/libnccl-net.so"]
        );
        assert_eq!(candidates("./plugin.so"), ["./plugin.so"]);
        assert_eq!(candidates("libnccl-net-ofi.so"), ["libnccl-net-ofi.so"]);
        // Not both "lib" and ".so": NCCL tries the prefixed name too.
        assert_eq!(
            candidates("libfoo.so.1"),
            ["libfoo.so.1", "libnccl-net-libfoo.so.1.so"]
        );
        assert_eq!(candidates("foo.so"), ["foo.so", "libnccl-net-foo.so.so"]);
    }

    #[test]
    fn the_setting_lists_what_to_try() {
        let unset = PluginRequest::from_setting(None);
        assert_eq!(unset.entries, ["libnccl-net.so"]);
        assert!(!unset.explicit);
        for none in ["none", "NONE", "None"] {
            let r = PluginRequest::from_setting(Some(none));
            assert!(r.entries.is_empty() && r.explicit, "{none}");
        }
        let list = PluginRequest::from_setting(Some("weft,,/opt/libnccl-net-x.so"));
        assert_eq!(list.entries, ["weft", "/opt/libnccl-net-x.so"]);
        assert!(list.explicit);
    }

    #[test]
    fn a_missing_plugin_names_every_file_tried() {
        let err = open("weft-test-no-such-plugin").unwrap_err();
        assert!(err.is_absent(), "{err:?}");
        let text = err.to_string();
        assert!(
            text.starts_with("NET/Plugin: Could not find: weft-test-no-such-plugin ("),
            "{text}"
        );
        assert!(
            text.contains(" libnccl-net-weft-test-no-such-plugin.so ("),
            "{text}"
        );
        assert!(text.contains("No such file or directory"), "{text}");
        let err = open("/nonexistent/libnccl-net-x.so").unwrap_err();
        let LoadError::NotLoaded { tried, .. } = &err else {
            panic!("{err:?}")
        };
        assert_eq!(tried.len(), 1);
        assert!(tried[0].dlerror.contains("No such file"), "{tried:?}");
    }

    #[test]
    fn a_library_without_a_table_is_unsupported() {
        // libc loads anywhere and exports no ncclNetPlugin_vN.
        let err = open("libc.so.6").unwrap_err();
        let LoadError::Unsupported { path, older } = &err else {
            panic!("{err:?}")
        };
        assert_eq!(path, "libc.so.6");
        assert!(older.is_empty());
        assert!(
            err.to_string()
                .starts_with("External network plugin libc.so.6 is unsupported"),
            "{err}"
        );
    }

    #[test]
    fn a_file_that_is_no_library_is_refused_with_the_loader_answer() {
        let dir = std::env::temp_dir().join(format!("weft-plugin-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fake = dir.join("libnccl-net-fake.so");
        std::fs::write(&fake, b"not an ELF file").unwrap();
        let err = open(fake.to_str().unwrap()).unwrap_err();
        assert!(!err.is_absent(), "{err:?}");
        let text = err.to_string();
        assert!(
            text.starts_with(&format!("NET/Plugin: {}: ", fake.display())),
            "{text}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
