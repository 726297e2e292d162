//! Opening a shared library by the first of several names that loads, and resolving its
//! symbols into tables of function pointers, with errors that name the library, every path
//! tried with the dynamic loader's answer, and what to do about it.
//!
//! Libraries opened here are never closed: the tables hand out plain `fn` pointers that
//! callers may copy anywhere, and closing libcuda or libibverbs under a live context is
//! undefined behaviour anyway (NCCL never closes them either). Loading twice only raises
//! the loader's reference count.

use core::ffi::c_void;
use core::fmt;
use std::ffi::CString;

/// One `dlopen` attempt: the name or path handed to the loader and what it answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    /// The name or path passed to `dlopen`.
    pub path: String,
    /// The text of `dlerror()` after the attempt failed.
    pub dlerror: String,
}

/// Why a library table could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadError {
    /// No candidate exists on this machine (every attempt said "No such file").
    NotFound {
        /// The library's usual name, e.g. `libcuda.so.1`.
        library: &'static str,
        /// What a missing library usually means here.
        reason: &'static str,
        /// Every name or path tried, in order, with the loader's answer.
        tried: Vec<Attempt>,
        /// What to do about it.
        hint: &'static str,
    },
    /// A candidate exists but the loader refused it (wrong architecture, a missing
    /// dependency, an unresolved symbol under `RTLD_NOW`...).
    Unloadable {
        /// The library's usual name.
        library: &'static str,
        /// Every name or path tried, in order, with the loader's answer.
        tried: Vec<Attempt>,
        /// What to do about it.
        hint: &'static str,
    },
    /// The library loaded but lacks a symbol that the table cannot work without.
    MissingSymbol {
        /// The library's usual name.
        library: &'static str,
        /// The path or name that loaded.
        path: String,
        /// The C symbol looked up.
        symbol: &'static str,
        /// The oldest version that has every required symbol, e.g. "CUDA 11.0+ driver".
        requires: &'static str,
        /// The loader's answer.
        dlerror: String,
    },
}

impl LoadError {
    /// The library's usual name, whichever way loading failed.
    pub fn library(&self) -> &'static str {
        match self {
            Self::NotFound { library, .. }
            | Self::Unloadable { library, .. }
            | Self::MissingSymbol { library, .. } => library,
        }
    }
}

fn write_attempts(f: &mut fmt::Formatter<'_>, tried: &[Attempt]) -> fmt::Result {
    f.write_str("tried ")?;
    for (i, attempt) in tried.iter().enumerate() {
        if i > 0 {
            f.write_str("; ")?;
        }
        write!(f, "{}: {}", attempt.path, attempt.dlerror)?;
    }
    Ok(())
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotFound {
                library,
                reason,
                tried,
                hint,
            } => {
                write!(f, "{library} not found: {reason} (")?;
                write_attempts(f, tried)?;
                write!(f, "). {hint}")
            }
            Self::Unloadable {
                library,
                tried,
                hint,
            } => {
                write!(f, "{library} is present but could not be loaded (")?;
                write_attempts(f, tried)?;
                write!(f, "). {hint}")
            }
            Self::MissingSymbol {
                library,
                path,
                symbol,
                requires,
                dlerror,
            } => write!(
                f,
                "{symbol} missing from {library} ({path}): library too old (needs {requires}); \
                 loader said: {dlerror}"
            ),
        }
    }
}

impl std::error::Error for LoadError {}

/// An optional symbol that the loaded library does not export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MissingSymbol {
    /// The C symbol, e.g. `cuMulticastCreate`.
    pub symbol: &'static str,
    /// What being too old means for this library, e.g. "driver too old".
    pub what_is_old: &'static str,
    /// The first version that exports it, e.g. "CUDA 12.1+".
    pub requires: &'static str,
}

impl fmt::Display for MissingSymbol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} missing: {} (needs {})",
            self.symbol, self.what_is_old, self.requires
        )
    }
}

impl std::error::Error for MissingSymbol {}

/// How a library is described in errors.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LibraryInfo {
    /// The usual name, e.g. `libcuda.so.1`.
    pub name: &'static str,
    /// What a missing library usually means.
    pub absent_reason: &'static str,
    /// What to do when it is missing or refused.
    pub hint: &'static str,
    /// The oldest version that has every required symbol.
    pub requires: &'static str,
    /// How an optional symbol's absence is phrased, e.g. "driver too old".
    pub what_is_old: &'static str,
}

/// A library that `dlopen` accepted, leaked on purpose (see the module comment).
#[derive(Debug)]
pub(crate) struct OpenedLibrary {
    library: &'static libloading::os::unix::Library,
    path: String,
    info: LibraryInfo,
}

/// True when the loader's answer means "there is no such file", as opposed to a file that
/// exists but cannot be loaded.
fn is_absent(dlerror: &str) -> bool {
    dlerror.contains("No such file or directory")
}

impl OpenedLibrary {
    /// Opens the first candidate that loads, with `RTLD_NOW` so that a library whose own
    /// dependencies are broken fails here rather than at its first call (where a lazy
    /// binding failure would abort the process).
    pub(crate) fn open_first<S: AsRef<str>>(
        candidates: &[S],
        info: LibraryInfo,
    ) -> Result<Self, LoadError> {
        let mut tried = Vec::with_capacity(candidates.len());
        for candidate in candidates {
            let path = candidate.as_ref();
            // SAFETY: dlopen runs the library's initialisers. The candidates are the system
            // libraries this crate exists to load (libcuda, libnvrtc, libibverbs) or a path
            // the caller chose explicitly; their initialisers are designed to run in any
            // process.
            let opened = unsafe {
                libloading::os::unix::Library::open(
                    Some(path),
                    libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_LOCAL,
                )
            };
            match opened {
                Ok(library) => {
                    return Ok(Self {
                        library: Box::leak(Box::new(library)),
                        path: path.to_owned(),
                        info,
                    });
                }
                Err(err) => {
                    // glibc's message starts with the path again; say it once.
                    let text = dlerror_text(&err);
                    let dlerror = match text
                        .strip_prefix(path)
                        .and_then(|rest| rest.strip_prefix(": "))
                    {
                        Some(rest) => rest.to_owned(),
                        None => text,
                    };
                    tried.push(Attempt {
                        path: path.to_owned(),
                        dlerror,
                    });
                }
            }
        }
        if tried.iter().all(|attempt| is_absent(&attempt.dlerror)) {
            Err(LoadError::NotFound {
                library: info.name,
                reason: info.absent_reason,
                tried,
                hint: info.hint,
            })
        } else {
            Err(LoadError::Unloadable {
                library: info.name,
                tried,
                hint: info.hint,
            })
        }
    }

    /// The name or path that loaded.
    pub(crate) fn path(&self) -> &str {
        &self.path
    }

    /// Looks `symbol` up; `Err` carries the loader's answer. A symbol whose address is null
    /// counts as absent, so that no null function pointer is ever made.
    fn lookup(&self, symbol: &'static str) -> Result<*mut c_void, String> {
        let name = CString::new(symbol).map_err(|_| String::from("symbol name contains NUL"))?;
        // SAFETY: the symbol is read as a plain data pointer, which is valid for any symbol;
        // it is turned into a function pointer only by the table that knows its prototype.
        let found = unsafe { self.library.get::<*mut c_void>(name.as_bytes_with_nul()) };
        match found {
            Ok(pointer) if !pointer.is_null() => Ok(*pointer),
            Ok(_) => Err(format!("{symbol} resolves to a null address")),
            Err(err) => Err(dlerror_text(&err)),
        }
    }

    /// A symbol the table cannot work without.
    pub(crate) fn required(&self, symbol: &'static str) -> Result<*mut c_void, LoadError> {
        self.lookup(symbol)
            .map_err(|dlerror| LoadError::MissingSymbol {
                library: self.info.name,
                path: self.path.clone(),
                symbol,
                requires: self.info.requires,
                dlerror,
            })
    }

    /// A symbol newer libraries export; `None` when this one does not.
    pub(crate) fn optional(&self, symbol: &'static str) -> Option<*mut c_void> {
        self.lookup(symbol).ok()
    }

    /// The error an accessor returns for an optional symbol that was absent.
    pub(crate) fn missing(
        info: &LibraryInfo,
        symbol: &'static str,
        requires: &'static str,
    ) -> MissingSymbol {
        MissingSymbol {
            symbol,
            what_is_old: info.what_is_old,
            requires,
        }
    }
}

/// libloading wraps dlerror's text in its own words; keep only the loader's part.
fn dlerror_text(err: &libloading::Error) -> String {
    use std::error::Error as _;
    match err.source() {
        Some(source) => source.to_string(),
        None => err.to_string(),
    }
}

/// Declares a table of C functions resolved from one library: required entries are plain
/// `unsafe extern "C" fn` fields (loading fails without them); optional entries are private
/// `Option`s behind an accessor of the same name that returns [`MissingSymbol`].
macro_rules! fn_table {
    (
        $(#[$meta:meta])*
        pub struct $table:ident {
            required {
                $(
                    $(#[$field_doc:meta])*
                    $field:ident = $symbol:literal : fn($($arg:ty),* $(,)?) $(-> $ret:ty)?;
                )*
            }
            optional {
                $(
                    $(#[$opt_doc:meta])*
                    $opt:ident = $opt_symbol:literal since $since:literal :
                        fn($($opt_arg:ty),* $(,)?) $(-> $opt_ret:ty)?;
                )*
            }
        }
    ) => {
        $(#[$meta])*
        #[allow(non_snake_case)]
        #[derive(Clone, Copy)]
        pub struct $table {
            path: &'static str,
            info: $crate::library::LibraryInfo,
            $(
                $(#[$field_doc])*
                #[doc = concat!("\n\nC symbol: `", $symbol, "`.")]
                pub $field: unsafe extern "C" fn($($arg),*) $(-> $ret)?,
            )*
            $(
                $opt: Option<unsafe extern "C" fn($($opt_arg),*) $(-> $opt_ret)?>,
            )*
        }

        #[allow(non_snake_case)]
        impl $table {
            /// The C symbols loading fails without.
            pub const REQUIRED_SYMBOLS: &'static [&'static str] = &[$($symbol),*];
            /// The C symbols newer libraries add, each with the version that added it.
            pub const OPTIONAL_SYMBOLS: &'static [(&'static str, &'static str)] =
                &[$(($opt_symbol, $since)),*];

            fn resolve(
                library: $crate::library::OpenedLibrary,
                info: $crate::library::LibraryInfo,
            ) -> Result<Self, $crate::library::LoadError> {
                Ok(Self {
                    path: Box::leak(library.path().to_owned().into_boxed_str()),
                    info,
                    $(
                        $field: {
                            let pointer = library.required($symbol)?;
                            // SAFETY: `pointer` is the non-null address of the C function
                            // `$symbol`, whose prototype in the vendor's header is the one
                            // declared for this field; the library is never unloaded.
                            unsafe {
                                core::mem::transmute::<
                                    *mut core::ffi::c_void,
                                    unsafe extern "C" fn($($arg),*) $(-> $ret)?,
                                >(pointer)
                            }
                        },
                    )*
                    $(
                        $opt: library.optional($opt_symbol).map(|pointer| {
                            // SAFETY: as for the required entries: a non-null address of
                            // the C function `$opt_symbol` with the declared prototype, in a
                            // library that is never unloaded.
                            unsafe {
                                core::mem::transmute::<
                                    *mut core::ffi::c_void,
                                    unsafe extern "C" fn($($opt_arg),*) $(-> $opt_ret)?,
                                >(pointer)
                            }
                        }),
                    )*
                })
            }

            /// The name or path that `dlopen` accepted.
            pub fn path(&self) -> &'static str {
                self.path
            }

            /// Whether the optional C symbol `symbol` was found; `false` for names that
            /// are not optional entries of this table.
            pub fn has(&self, symbol: &str) -> bool {
                $(
                    if symbol == $opt_symbol {
                        return self.$opt.is_some();
                    }
                )*
                false
            }

            $(
                $(#[$opt_doc])*
                #[doc = concat!(
                    "\n\nC symbol: `", $opt_symbol, "` (", $since,
                    "); `Err` names it when this library does not export it."
                )]
                pub fn $opt(
                    &self,
                ) -> Result<
                    unsafe extern "C" fn($($opt_arg),*) $(-> $opt_ret)?,
                    $crate::library::MissingSymbol,
                > {
                    self.$opt.ok_or_else(|| {
                        $crate::library::OpenedLibrary::missing(&self.info, $opt_symbol, $since)
                    })
                }
            )*
        }

        impl core::fmt::Debug for $table {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                let missing: Vec<&str> = Self::OPTIONAL_SYMBOLS
                    .iter()
                    .map(|(symbol, _)| *symbol)
                    .filter(|symbol| !self.has(symbol))
                    .collect();
                f.debug_struct(stringify!($table))
                    .field("path", &self.path)
                    .field("missing_optional", &missing)
                    .finish_non_exhaustive()
            }
        }
    };
}

pub(crate) use fn_table;
