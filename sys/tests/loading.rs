//! Loading the three tables: absent libraries, files that are not libraries, libraries that
//! lack symbols, and stand-in libraries compiled here with `cc` that export exactly the
//! symbols a test wants. No GPU or RDMA NIC is needed; `cuMulticastCreate` is never called.

use std::ffi::CStr;
use std::path::{Path, PathBuf};
use std::process::Command;

use weft_sys::cuda::types::CUresult;
use weft_sys::verbs::types::ibv_wc_status;
use weft_sys::{CudaDriver, LoadError, MissingSymbol, Nvrtc, Verbs};

/// A fresh directory for this test's files.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("weft-sys-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Compiles `source` into a shared library; the test fails with cc's output if it cannot.
fn compile_shared(dir: &Path, name: &str, source: &str) -> PathBuf {
    let c_file = dir.join(format!("{name}.c"));
    let library = dir.join(format!("{name}.so"));
    std::fs::write(&c_file, source).unwrap();
    let output = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-shared", "-fPIC", "-o"])
        .arg(&library)
        .arg(&c_file)
        .output()
        .expect("running cc (a C compiler is needed to build stand-in libraries)");
    assert!(
        output.status.success(),
        "cc failed on {}: {}",
        c_file.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    library
}

/// C definitions for `symbols` that do nothing; the tests never call them.
fn stubs(symbols: &[&str], except: &[&str]) -> String {
    symbols
        .iter()
        .filter(|symbol| !except.contains(symbol))
        .map(|symbol| format!("void {symbol}(void) {{}}\n"))
        .collect()
}

fn path_str(path: &Path) -> &str {
    path.to_str().unwrap()
}

#[test]
fn a_nonexistent_path_is_not_found_for_every_table() {
    let missing = "/nonexistent/weft/libmissing.so.7";
    let results = [
        CudaDriver::load_from(&[missing]).map(drop),
        Nvrtc::load_from(&[missing]).map(drop),
        Verbs::load_from(&[missing]).map(drop),
    ];
    let libraries = ["libcuda.so.1", "libnvrtc.so", "libibverbs.so.1"];
    for (result, library) in results.into_iter().zip(libraries) {
        let err = result.unwrap_err();
        match &err {
            LoadError::NotFound {
                library: name,
                tried,
                ..
            } => {
                assert_eq!(*name, library);
                assert_eq!(tried.len(), 1);
                assert_eq!(tried[0].path, missing);
                assert!(
                    tried[0].dlerror.contains("No such file"),
                    "{}",
                    tried[0].dlerror
                );
                // glibc repeats the path in its message; the error says it once.
                assert!(
                    !tried[0].dlerror.starts_with(missing),
                    "{}",
                    tried[0].dlerror
                );
            }
            other => panic!("expected NotFound, got {other:?}"),
        }
        let text = err.to_string();
        assert!(
            text.starts_with(&format!("{library} not found: ")),
            "{text}"
        );
        assert!(text.contains(missing), "{text}");
        assert_eq!(err.library(), library);
    }
}

#[test]
fn load_on_this_machine_names_libcuda_or_works() {
    match CudaDriver::load() {
        Err(err) => {
            let LoadError::NotFound { tried, .. } = &err else {
                panic!("expected NotFound, got {err:?}");
            };
            let paths: Vec<&str> = tried.iter().map(|attempt| attempt.path.as_str()).collect();
            assert_eq!(paths, ["libcuda.so.1", "libcuda.so"]);
            let text = err.to_string();
            assert!(
                text.starts_with("libcuda.so.1 not found: no NVIDIA driver on this machine"),
                "{text}"
            );
            assert!(text.contains("LD_LIBRARY_PATH"), "{text}");
            // The shared table remembers the same failure.
            assert_eq!(CudaDriver::shared().unwrap_err(), err);
        }
        Ok(driver) => {
            // A machine with a driver: the table works without cuInit.
            let mut version = 0;
            // SAFETY: cuDriverGetVersion writes one int and may be called before cuInit.
            let status = unsafe { (driver.cuDriverGetVersion)(&mut version) };
            assert!(status.is_success());
            assert!(version >= 11000, "driver version {version}");
        }
    }
}

#[test]
fn a_file_that_is_not_a_library_is_unloadable_not_absent() {
    let dir = scratch("not-elf");
    let fake = dir.join("libcuda.so.1");
    std::fs::write(&fake, b"this is not an ELF file\n").unwrap();
    let err = CudaDriver::load_from(&["/nonexistent/libcuda.so.1", path_str(&fake)]).unwrap_err();
    let LoadError::Unloadable { tried, .. } = &err else {
        panic!("expected Unloadable, got {err:?}");
    };
    assert_eq!(tried.len(), 2);
    assert!(
        !tried[1].dlerror.contains("No such file"),
        "{}",
        tried[1].dlerror
    );
    let text = err.to_string();
    assert!(
        text.starts_with("libcuda.so.1 is present but could not be loaded"),
        "{text}"
    );
    assert!(text.contains(path_str(&fake)), "{text}");
}

#[test]
fn a_library_without_the_required_symbols_names_the_first_one() {
    let dir = scratch("wrong-library");
    let library = compile_shared(&dir, "libnotcuda", "int not_cuda(void) { return 1; }\n");
    let err = CudaDriver::load_from(&[path_str(&library)]).unwrap_err();
    let LoadError::MissingSymbol {
        symbol,
        path,
        requires,
        ..
    } = &err
    else {
        panic!("expected MissingSymbol, got {err:?}");
    };
    assert_eq!(*symbol, CudaDriver::REQUIRED_SYMBOLS[0]);
    assert_eq!(*symbol, "cuInit");
    assert_eq!(path, path_str(&library));
    assert_eq!(*requires, "CUDA 11.0+ driver");
    let text = err.to_string();
    assert!(
        text.starts_with("cuInit missing from libcuda.so.1 ("),
        "{text}"
    );
    assert!(text.contains("needs CUDA 11.0+ driver"), "{text}");
}

#[test]
fn an_old_driver_loads_and_its_missing_calls_are_typed_errors() {
    let dir = scratch("old-driver");
    // A CUDA 11.8-era driver: every required call, none of the optional ones. Three calls
    // do something so the table can be exercised; the rest are never called.
    let mut source = String::from(
        "int cuDriverGetVersion(int *version) { *version = 11080; return 0; }\n\
         int cuGetErrorName(int error, const char **name) {\n\
           if (error == 2) { *name = \"CUDA_ERROR_OUT_OF_MEMORY\"; return 0; }\n\
           *name = 0; return 1; }\n\
         int cuGetErrorString(int error, const char **text) {\n\
           if (error == 2) { *text = \"out of memory\"; return 0; }\n\
           *text = 0; return 1; }\n",
    );
    source.push_str(&stubs(
        CudaDriver::REQUIRED_SYMBOLS,
        &["cuDriverGetVersion", "cuGetErrorName", "cuGetErrorString"],
    ));
    let library = compile_shared(&dir, "libcuda-old", &source);
    let driver = CudaDriver::load_from(&[path_str(&library)]).unwrap();
    assert_eq!(driver.path(), path_str(&library));

    let mut version = 0;
    // SAFETY: the stand-in cuDriverGetVersion writes one int.
    let status = unsafe { (driver.cuDriverGetVersion)(&mut version) };
    assert!(status.is_success());
    assert_eq!(version, 11080);

    assert_eq!(
        driver.describe(CUresult::CUDA_ERROR_OUT_OF_MEMORY),
        "CUDA_ERROR_OUT_OF_MEMORY (2): out of memory; GPU memory is exhausted: check nvidia-smi \
         for other processes"
    );
    // The stand-in knows only code 2: the others fall back to weft's own names.
    assert_eq!(
        driver.describe(CUresult::CUDA_ERROR_NOT_READY),
        "CUDA_ERROR_NOT_READY (600)"
    );
    assert_eq!(
        driver.describe(CUresult(4242)),
        "CUDA_ERROR_UNRECOGNISED (4242)"
    );

    let err: MissingSymbol = driver.cuMulticastCreate().unwrap_err();
    assert_eq!(
        err.to_string(),
        "cuMulticastCreate missing: driver too old (needs CUDA 12.1+)"
    );
    assert_eq!(
        driver.cuMemCreate().unwrap_err().to_string(),
        "cuMemCreate missing: driver too old (needs CUDA 10.2+)"
    );
    for (symbol, _) in CudaDriver::OPTIONAL_SYMBOLS {
        assert!(!driver.has(symbol), "{symbol}");
    }
    assert!(format!("{driver:?}").contains("cuMulticastBindMem"));
}

#[test]
fn a_current_driver_exposes_every_optional_call() {
    let dir = scratch("new-driver");
    let optional: Vec<&str> = CudaDriver::OPTIONAL_SYMBOLS
        .iter()
        .map(|(symbol, _)| *symbol)
        .collect();
    let source = stubs(CudaDriver::REQUIRED_SYMBOLS, &[]) + &stubs(&optional, &[]);
    let library = compile_shared(&dir, "libcuda-new", &source);
    let driver = CudaDriver::load_from(&[path_str(&library)]).unwrap();
    for symbol in &optional {
        assert!(driver.has(symbol), "{symbol}");
    }
    // Resolved, and deliberately never called.
    assert!(driver.cuMulticastCreate().is_ok());
    assert!(driver.cuMemExportToShareableHandle().is_ok());
    assert!(!driver.has("cuInit"), "required symbols are not 'optional'");
}

#[test]
fn nvrtc_stand_in_loads_and_reports_old_versions() {
    let dir = scratch("nvrtc");
    let mut source = String::from(
        "int nvrtcVersion(int *major, int *minor) { *major = 12; *minor = 9; return 0; }\n\
         const char *nvrtcGetErrorString(int result) {\n\
           return result == 6 ? \"NVRTC_ERROR_COMPILATION\" : \"NVRTC_ERROR_UNKNOWN\"; }\n",
    );
    source.push_str(&stubs(
        Nvrtc::REQUIRED_SYMBOLS,
        &["nvrtcVersion", "nvrtcGetErrorString"],
    ));
    let library = compile_shared(&dir, "libnvrtc-stand-in", &source);
    let nvrtc = Nvrtc::load_from(&["/nonexistent/libnvrtc.so.13", path_str(&library)]).unwrap();
    let (mut major, mut minor) = (0, 0);
    // SAFETY: the stand-in writes two ints.
    let status = unsafe { (nvrtc.nvrtcVersion)(&mut major, &mut minor) };
    assert!(status.is_success());
    assert_eq!((major, minor), (12, 9));
    assert_eq!(
        nvrtc.describe(weft_sys::nvrtc::nvrtcResult::NVRTC_ERROR_COMPILATION),
        "NVRTC_ERROR_COMPILATION (6)"
    );
    assert_eq!(
        nvrtc.nvrtcGetSupportedArchs().unwrap_err().to_string(),
        "nvrtcGetSupportedArchs missing: NVRTC too old (needs NVRTC 11.2+)"
    );
}

#[test]
fn verbs_stand_in_reports_missing_dmabuf_registration() {
    let dir = scratch("verbs");
    let library = compile_shared(&dir, "libibverbs-old", &stubs(Verbs::REQUIRED_SYMBOLS, &[]));
    let verbs = Verbs::load_from(&[path_str(&library)]).unwrap();
    assert_eq!(
        verbs.ibv_reg_dmabuf_mr().unwrap_err().to_string(),
        "ibv_reg_dmabuf_mr missing: libibverbs too old (needs IBVERBS_1.12, rdma-core 34+)"
    );
    assert!(verbs.ibv_reg_mr_iova2().is_err());
    assert!(verbs._ibv_query_gid_ex().is_err());
}

#[test]
fn system_libibverbs_loads_lists_devices_and_agrees_on_status_text() {
    let verbs = match Verbs::load() {
        Ok(verbs) => verbs,
        Err(err) => {
            // No rdma-core here: the error must say so, and how to fix it.
            let text = err.to_string();
            assert!(text.starts_with("libibverbs.so.1 not found"), "{text}");
            assert!(text.contains("libibverbs1"), "{text}");
            return;
        }
    };
    // rdma-core 44 and later export all three; older ones are reported, not fatal.
    let mut count = -1;
    // SAFETY: ibv_get_device_list writes the count and returns a list to free (or null
    // when the kernel has no RDMA support).
    let list = unsafe { (verbs.ibv_get_device_list)(&mut count) };
    if list.is_null() {
        assert!(count <= 0, "null list with {count} devices");
    } else {
        assert!(count >= 0);
        // SAFETY: `list` came from ibv_get_device_list and is freed once.
        unsafe { (verbs.ibv_free_device_list)(list) };
    }
    for code in 0..=30 {
        let status = ibv_wc_status(code);
        // SAFETY: ibv_wc_status_str accepts any value.
        let pointer = unsafe { (verbs.ibv_wc_status_str)(status) };
        assert!(!pointer.is_null());
        // SAFETY: it returns a static NUL-terminated string.
        let text = unsafe { CStr::from_ptr(pointer) };
        assert_eq!(text.to_str().unwrap(), status.summary(), "status {code}");
    }
}
