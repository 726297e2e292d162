//! The NCCL net plugin as NCCL sees it: builds `weft-nccl-net` (debug), copies
//! `libnccl_net_weft.so` to NCCL's name `libnccl-net-weft.so`, compiles the C harness in
//! `tests/plugin/` with `cc -Wall -Wextra -Werror` and runs it twice: with the full path (as
//! `NCCL_NET_PLUGIN=/path/...`) and with the bare name on `LD_LIBRARY_PATH` (as
//! `NCCL_NET_PLUGIN=weft`), then in its two-process mode (connect across processes, the
//! receiver killed mid-transfer). The harness prints `N passed, M failed`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use weft_tests::{profile_dir, workspace_root};

fn build_plugin() -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "-p", "weft-nccl-net"])
        .current_dir(workspace_root())
        .status()
        .expect("run cargo build -p weft-nccl-net");
    assert!(status.success(), "cargo build -p weft-nccl-net failed");
    let dir = profile_dir();
    let built = dir.join("libnccl_net_weft.so");
    assert!(
        built.exists(),
        "{} missing after the build",
        built.display()
    );
    let named = dir.join("libnccl-net-weft.so");
    std::fs::copy(&built, &named).expect("copy to libnccl-net-weft.so");
    named
}

fn compile_harness() -> PathBuf {
    let src = workspace_root().join("tests/plugin/harness.c");
    let out = profile_dir().join("weft-plugin-harness");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-o"])
        .arg(&out)
        .arg(&src)
        .arg("-ldl")
        .status()
        .unwrap_or_else(|e| panic!("run {cc}: {e}"));
    assert!(status.success(), "{cc} failed on {}", src.display());
    out
}

/// The plugin and the harness, built once per test process: the tests run in parallel, and
/// one rebuilding the harness (or copying the plugin) while another executes it failed with
/// "Text file busy" (ETXTBSY).
fn plugin_and_harness() -> &'static (PathBuf, PathBuf) {
    static BUILT: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    BUILT.get_or_init(|| (build_plugin(), compile_harness()))
}

/// Runs the harness with a deadline; returns its stdout.
fn run_harness(harness: &Path, args: &[&str], lib_dir: Option<&Path>) -> String {
    run_harness_with(harness, args, lib_dir, &[])
}

/// As [`run_harness`], with `envs` set for the harness.
fn run_harness_with(
    harness: &Path,
    args: &[&str],
    lib_dir: Option<&Path>,
    envs: &[(&str, &str)],
) -> String {
    let mut cmd = Command::new(harness);
    cmd.args(args)
        .envs(envs.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if let Some(dir) = lib_dir {
        cmd.env("LD_LIBRARY_PATH", dir);
    }
    let mut child = cmd.spawn().expect("start the harness");
    let start = Instant::now();
    loop {
        if child.try_wait().expect("wait for the harness").is_some() {
            break;
        }
        if start.elapsed() > Duration::from_secs(300) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the plugin harness ran for more than 300 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("harness output");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    print!("{stdout}");
    assert!(out.status.success(), "harness failed:\n{stdout}");
    stdout
}

fn counts(stdout: &str) -> (u32, u32) {
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.contains(" passed, "))
        .expect("summary line");
    let mut words = line.split_whitespace();
    let passed = words.next().and_then(|w| w.parse().ok()).expect("passed");
    let failed = words.nth(1).and_then(|w| w.parse().ok()).expect("failed");
    (passed, failed)
}

#[test]
fn c_harness_drives_the_plugin_as_nccl_does() {
    let (lib, harness) = plugin_and_harness();

    let path = lib.to_str().expect("utf-8 path");

    let full = run_harness(harness, &[path], None);
    assert_eq!(counts(&full), (13, 0), "full path run");

    // NCCL_NET_PLUGIN=weft: NCCL dlopens "libnccl-net-weft.so" from the library path.
    let by_name = run_harness(harness, &["libnccl-net-weft.so"], lib.parent());
    assert_eq!(counts(&by_name), (13, 0), "library path run");

    // Sender and receiver in two processes; the receiver is killed mid-transfer.
    let two = run_harness(harness, &[path, "--two-process"], None);
    assert_eq!(counts(&two), (4, 0), "two-process run");
}

/// The mesh backend over sockets (what a host without RDMA devices runs): every check of the
/// harness with the socket backend's semantics, the two-process checks, and the cross-host
/// mode (`--peer`: the handle through a folder) between two processes of this host.
#[test]
fn c_harness_drives_the_mesh_backend_over_sockets() {
    let (lib, harness) = plugin_and_harness();
    let path = lib.to_str().expect("utf-8 path");
    let envs = [
        ("HARNESS_BACKEND", "mesh-socket"),
        ("WEFT_NET_BACKEND", "mesh"),
        ("WEFT_MESH_TRANSPORT", "socket"),
    ];
    let full = run_harness_with(harness, &[path], None, &envs);
    assert_eq!(counts(&full), (13, 0), "mesh: full run");
    let two = run_harness_with(harness, &[path, "--two-process"], None, &envs);
    assert_eq!(counts(&two), (4, 0), "mesh: two-process run");

    let dir = profile_dir().join(format!("mesh-peer-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a folder for the handle");
    let folder = dir.to_str().expect("utf-8 path");
    let mut recv = Command::new(harness)
        .args([path, "--peer", folder, "recv"])
        .envs(envs)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the receiving harness");
    let sent = run_harness_with(harness, &[path, "--peer", folder, "send"], None, &envs);
    assert_eq!(counts(&sent), (5, 0), "mesh: peer sender");
    let start = Instant::now();
    while recv.try_wait().expect("wait for the receiver").is_none() {
        if start.elapsed() > Duration::from_secs(300) {
            let _ = recv.kill();
            let _ = recv.wait();
            panic!("the receiving harness ran for more than 300 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = recv.wait_with_output().expect("receiver output");
    let got = String::from_utf8_lossy(&out.stdout).into_owned();
    print!("{got}");
    assert!(out.status.success(), "receiving harness failed:\n{got}");
    assert_eq!(counts(&got), (4, 0), "mesh: peer receiver");
    let _ = std::fs::remove_dir_all(&dir);
}
