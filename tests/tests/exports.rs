//! Each of weft's C libraries exports its ABI and nothing else, so that a program that loads
//! it sees that ABI and nothing of weft's insides (no Rust runtime symbol, no other crate's
//! `#[no_mangle]` function that a dependency brought along):
//! - `libnccl.so.2` (weft-nccl): exactly the functions `nccl/include/nccl.h` declares, the
//!   device-API calls of `tests/nccl-api/device-api-exports.txt`, and `pnccl*` aliases of
//!   either (scripts/nccl-api-test.sh checks the same rule with `nm`);
//! - `libnccl-net-weft.so` (weft-nccl-net): `ncclNet*` / `ncclCollNet*` names only, among
//!   them the tables NCCL looks up, `ncclNetPlugin_v8` .. `ncclNetPlugin_v11`;
//! - `libweft.so` (weft-capi): exactly the functions `capi/include/weft.h` declares.
//!
//! Each test builds its library with cargo (the profile and target folder of this test) and
//! reads the ELF dynamic symbol table itself, so it needs no binutils.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use weft_tests::elf::{self, DynamicSymbol, SymbolKind};
use weft_tests::{profile_dir, workspace_root};

/// Builds `package`'s library with this test's profile and returns `<profile dir>/<file>`.
fn build(package: &str, file: &str) -> PathBuf {
    let profile_dir = profile_dir();
    let target_dir = profile_dir.parent().expect("<target>/<profile>");
    let profile = profile_dir
        .file_name()
        .and_then(|n| n.to_str())
        .expect("profile directory name");
    let mut cmd = Command::new(env!("CARGO"));
    cmd.current_dir(workspace_root())
        .args(["build", "--quiet", "-p", package, "--lib", "--target-dir"])
        .arg(target_dir);
    match profile {
        "debug" => {}
        "release" => {
            cmd.arg("--release");
        }
        other => {
            cmd.args(["--profile", other]);
        }
    }
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    assert!(status.success(), "{cmd:?} failed ({status})");
    let lib = profile_dir.join(file);
    assert!(lib.is_file(), "{} missing after the build", lib.display());
    lib
}

fn exports(lib: &Path) -> Vec<DynamicSymbol> {
    elf::defined_dynamic_symbols(lib).unwrap_or_else(|e| panic!("{e}"))
}

/// The functions a C header declares whose names start with `prefix`: each declaration
/// starts a line (`ncclResult_t ncclGetVersion(int *version);`, `const char
/// *weft_version(void);`); comments, preprocessor lines, typedefs and the insides of
/// structs do not.
fn declared_functions(header: &Path, prefix: &str) -> BTreeSet<String> {
    let text = std::fs::read_to_string(header)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", header.display()));
    text.lines()
        .filter(|line| {
            !line.starts_with(|c: char| c.is_whitespace() || matches!(c, '#' | '/' | '*'))
                && !line.starts_with("typedef")
        })
        .filter_map(|line| {
            let before = &line[..line.find('(')?];
            let name = before.rsplit([' ', '*']).next()?;
            let is_ident = name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            (name.starts_with(prefix) && is_ident).then(|| name.to_owned())
        })
        .collect()
}

/// `names` as one line each, for a failure message.
fn listed<T: std::fmt::Display>(names: impl IntoIterator<Item = T>) -> String {
    names
        .into_iter()
        .map(|n| format!("\n  {n}"))
        .collect::<String>()
}

#[test]
fn declared_functions_reads_c_declarations_only() {
    let dir = profile_dir().join("exports-test");
    std::fs::create_dir_all(&dir).expect("a folder for the header");
    let header = dir.join("sample.h");
    std::fs::write(
        &header,
        "// ncclCommented(void);\n#define ncclMacro(x) x\ntypedef void (*ncclFn)(int);\n\
         struct s {\n  int ncclField(void);\n};\nncclResult_t ncclGetVersion(int *version);\n\
         const char *ncclGetErrorString(ncclResult_t result);\nvoid ncclResetDebugInit(void);\n\
         ncclResult_t ncclCommSplit(ncclComm_t comm, int color,\n    int key);\n\
         uint32_t weft_abi_version(void);\n",
    )
    .expect("write the sample header");
    let found: Vec<String> = declared_functions(&header, "nccl").into_iter().collect();
    assert_eq!(
        found,
        [
            "ncclCommSplit",
            "ncclGetErrorString",
            "ncclGetVersion",
            "ncclResetDebugInit"
        ]
    );
}

#[test]
fn libnccl_exports_nccl_h_the_device_api_and_nothing_else() {
    let root = workspace_root();
    let lib = build("weft-nccl", "libnccl.so");
    let symbols = exports(&lib);

    let from_header = declared_functions(&root.join("nccl/include/nccl.h"), "nccl");
    assert!(
        from_header.len() >= 30 && from_header.contains("ncclAllReduce"),
        "nccl.h's functions were not found: {from_header:?}"
    );
    let list = root.join("tests/nccl-api/device-api-exports.txt");
    let device_api: BTreeSet<String> = std::fs::read_to_string(&list)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", list.display()))
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect();
    let allowed: BTreeSet<&str> = from_header
        .iter()
        .chain(&device_api)
        .map(String::as_str)
        .collect();

    let functions: BTreeSet<&str> = symbols
        .iter()
        .filter(|s| s.kind == SymbolKind::Function)
        .map(|s| s.name.as_str())
        .collect();
    let missing: Vec<&str> = allowed.difference(&functions).copied().collect();
    assert!(
        missing.is_empty(),
        "{} does not export these functions of nccl.h and {}:{}",
        lib.display(),
        list.display(),
        listed(missing)
    );

    // NCCL also exports each function as pncclX (for profilers): allowed, not required.
    let unexpected: Vec<String> = symbols
        .iter()
        .filter(|s| {
            let alias_of = s.name.strip_prefix('p').unwrap_or(&s.name);
            !(s.kind == SymbolKind::Function && allowed.contains(alias_of))
        })
        .map(ToString::to_string)
        .collect();
    assert!(
        unexpected.is_empty(),
        "{} exports what is neither a function of nccl.h nor of {} (nor a pnccl alias of \
         one): a dependency's #[no_mangle] item, or a Rust runtime symbol, leaks into NCCL's \
         API:{}",
        lib.display(),
        list.display(),
        listed(&unexpected)
    );
}

#[test]
fn net_plugin_exports_only_its_ncclnet_tables() {
    let lib = build("weft-nccl-net", "libnccl_net_weft.so");
    let symbols = exports(&lib);
    let unexpected: Vec<String> = symbols
        .iter()
        .filter(|s| !(s.name.starts_with("ncclNet") || s.name.starts_with("ncclCollNet")))
        .map(ToString::to_string)
        .collect();
    assert!(
        unexpected.is_empty(),
        "{} exports more than ncclNet*/ncclCollNet* names; NCCL would see these too:{}",
        lib.display(),
        listed(&unexpected)
    );
    // NCCL dlsyms the newest table it knows (2.28: v11, then v10, v9, v8).
    for version in 8..=11 {
        let name = format!("ncclNetPlugin_v{version}");
        assert!(
            symbols
                .iter()
                .any(|s| s.name == name && s.kind == SymbolKind::Object),
            "{} does not export the table {name} (data); it exports:{}",
            lib.display(),
            listed(symbols.iter().map(|s| &s.name))
        );
    }
}

#[test]
fn libweft_exports_weft_h_and_nothing_else() {
    let root = workspace_root();
    let lib = build("weft-capi", "libweft.so");
    let symbols = exports(&lib);
    let declared = declared_functions(&root.join("capi/include/weft.h"), "weft_");
    assert!(
        declared.contains("weft_last_error") && declared.contains("weft_mesh_handle_encode"),
        "weft.h's functions were not found: {declared:?}"
    );
    let functions: BTreeSet<String> = symbols
        .iter()
        .filter(|s| s.kind == SymbolKind::Function)
        .map(|s| s.name.clone())
        .collect();
    let missing: Vec<&String> = declared.difference(&functions).collect();
    assert!(
        missing.is_empty(),
        "{} does not export these functions of weft.h:{}",
        lib.display(),
        listed(missing)
    );
    let unexpected: Vec<String> = symbols
        .iter()
        .filter(|s| !(s.kind == SymbolKind::Function && declared.contains(&s.name)))
        .map(ToString::to_string)
        .collect();
    assert!(
        unexpected.is_empty(),
        "{} exports what capi/include/weft.h does not declare:{}",
        lib.display(),
        listed(&unexpected)
    );
}

/// The ELF reader against `nm -D --defined-only`, where binutils are installed: the same
/// names for a library with functions and data (the plugin).
#[test]
fn dynamic_symbols_match_nm() {
    let lib = build("weft-nccl-net", "libnccl_net_weft.so");
    let Ok(out) = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&lib)
        .output()
    else {
        println!("exports: SKIPPED the comparison with nm: nm (binutils) not found");
        return;
    };
    assert!(out.status.success(), "nm -D failed on {}", lib.display());
    let from_nm: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .map(|n| n.split('@').next().unwrap_or(n).to_owned())
        .collect();
    let ours: BTreeSet<String> = exports(&lib).into_iter().map(|s| s.name).collect();
    assert_eq!(ours, from_nm);
}
