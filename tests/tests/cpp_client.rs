//! Runs the C++ client (tests/cpp/client.cpp) against the committed header and the static
//! library, as a user of the C ABI would build it, so that `cargo test --workspace` covers
//! the C ABI end to end. Skipped, with a message, only where g++ is absent.

use std::process::Command;
use weft_tests::{profile_dir, workspace_root};

fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    stdout
}

fn have(compiler: &str) -> bool {
    Command::new(compiler)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn cpp_client_passes_against_committed_header_and_static_lib() {
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "g++".to_owned());
    if !have(&cxx) {
        println!("cpp_client: SKIPPED: {cxx} not found; install g++ to test the C ABI");
        return;
    }
    let root = workspace_root();
    let profile_dir = profile_dir();
    let target_dir = profile_dir.parent().expect("<target>/<profile>");
    let profile = profile_dir
        .file_name()
        .and_then(|n| n.to_str())
        .expect("profile directory name");
    // Cargo already built libweft.a for this test run (weft-capi is a dependency and
    // builds all its crate types); building again is a no-op that also covers running this
    // test binary on its own after a source change.
    let mut build = Command::new(env!("CARGO"));
    build
        .current_dir(&root)
        .args([
            "build",
            "--quiet",
            "-p",
            "weft-capi",
            "--lib",
            "--target-dir",
        ])
        .arg(target_dir);
    match profile {
        "debug" => {}
        "release" => {
            build.arg("--release");
        }
        other => {
            build.args(["--profile", other]);
        }
    }
    run(&mut build);
    let lib = profile_dir.join("libweft.a");
    assert!(lib.is_file(), "{} missing after cargo build", lib.display());

    let include = root.join("capi/include");
    // weft.h includes weft_abi.h, generated for the kernels (kernels/include; not
    // kernels/cuda, whose stddef.h and stdint.h are NVRTC's stand-ins).
    let abi_include = root.join("kernels/include");
    let out_dir = profile_dir.join("cpp-client-test");
    std::fs::create_dir_all(&out_dir).expect("create output directory");

    let cc = std::env::var("CC").unwrap_or_else(|_| "gcc".to_owned());
    if have(&cc) {
        run(Command::new(&cc)
            .args([
                "-std=c11",
                "-Wall",
                "-Wextra",
                "-Werror",
                "-pedantic",
                "-fsyntax-only",
            ])
            .arg("-I")
            .arg(&include)
            .arg("-I")
            .arg(&abi_include)
            .arg(root.join("tests/cpp/header_c.c")));
    } else {
        println!("cpp_client: {cc} not found; skipping only the C11 header check");
    }

    let client = out_dir.join("client");
    run(Command::new(&cxx)
        .args(["-std=c++17", "-Wall", "-Wextra", "-Werror"])
        .arg("-I")
        .arg(&include)
        .arg("-I")
        .arg(&abi_include)
        .arg(root.join("tests/cpp/client.cpp"))
        .arg(&lib)
        .args(["-lpthread", "-ldl", "-lm", "-o"])
        .arg(&client));
    let stdout = run(&mut Command::new(&client));
    println!("{stdout}");
    let summary = stdout.lines().last().unwrap_or("");
    let passed: u32 = summary
        .strip_suffix(" passed, 0 failed")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("unexpected summary line {summary:?}"));
    assert!(passed > 100, "only {passed} checks ran");
}
