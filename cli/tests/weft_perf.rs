//! `weft perf` end to end: the binary starts its rank processes, checks every element and
//! prints nccl-tests' report.

use std::process::Command;

fn perf(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_weft"))
        .arg("perf")
        .args(args)
        .env("WEFT_TIMEOUT", "30")
        .output()
        .expect("run weft perf");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The data rows: every non-comment line, split in columns.
fn rows(stdout: &str) -> Vec<Vec<String>> {
    stdout
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect()
}

#[test]
fn reports_like_nccl_tests() {
    let (ok, stdout, stderr) = perf(&[
        "all-reduce",
        "--ranks",
        "3",
        "-b",
        "12",
        "-e",
        "300K",
        "-f",
        "5",
        "-n",
        "3",
        "-w",
        "1",
    ]);
    assert!(ok, "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong"), "{stdout}");
    assert!(stdout.contains("# Out of bounds values : 0 OK"), "{stdout}");
    assert!(stdout.contains("# Avg bus bandwidth    : "), "{stdout}");
    let rows = rows(&stdout);
    // 12, 60, 300, ..., 187500 bytes: 7 sizes (floats: 3, 15, 75, ... elements).
    let sizes: Vec<&str> = rows.iter().map(|r| r[0].as_str()).collect();
    assert_eq!(
        sizes,
        ["12", "60", "300", "1500", "7500", "37500", "187500"],
        "{stdout}"
    );
    for r in &rows {
        assert_eq!(r.len(), 13, "{r:?}");
        assert_eq!(
            (r[2].as_str(), r[3].as_str(), r[4].as_str()),
            ("float", "sum", "-1")
        );
        assert_eq!(
            (r[8].as_str(), r[12].as_str()),
            ("0", "0"),
            "wrong elements: {r:?}"
        );
        let count: usize = r[1].parse().unwrap();
        assert_eq!(count * 4, r[0].parse::<usize>().unwrap());
    }
}

#[test]
fn every_collective_checks_out() {
    for (coll, extra) in [
        ("reduce-scatter", &["-d", "bfloat16", "-o", "avg"][..]),
        ("all-gather", &["-d", "int8"][..]),
        ("broadcast", &["-r", "1", "-d", "double"][..]),
        ("reduce", &["-r", "2", "-o", "max", "-d", "uint32"][..]),
        ("sendrecv", &["-d", "half"][..]),
        ("all-reduce", &["-d", "f8e4m3", "-o", "avg"][..]),
        ("reduce-scatter", &["-d", "f8e5m2", "-o", "sum"][..]),
    ] {
        let mut args = vec![
            coll, "--ranks", "3", "-b", "1K", "-e", "1M", "-f", "32", "-n", "2", "-w", "1", "-c",
        ];
        args.extend_from_slice(extra);
        let (ok, stdout, stderr) = perf(&args);
        assert!(ok, "{coll}: stdout:\n{stdout}\nstderr:\n{stderr}");
        assert!(
            stdout.contains("# Out of bounds values : 0 OK"),
            "{coll}: {stdout}"
        );
        assert_eq!(rows(&stdout).len(), 3, "{coll}: {stdout}");
    }
}

#[test]
fn over_net_too() {
    let (ok, stdout, stderr) = perf(&[
        "all-reduce",
        "--ranks",
        "2",
        "--transport",
        "net",
        "-b",
        "1K",
        "-e",
        "256K",
        "-f",
        "16",
        "-n",
        "2",
        "-w",
        "1",
    ]);
    assert!(ok, "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("transport NET"), "{stdout}");
    assert!(stdout.contains("# Out of bounds values : 0 OK"), "{stdout}");
}

#[test]
fn bad_arguments_are_explained() {
    let (ok, _, stderr) = perf(&["all-reduce", "-b", "2M", "-e", "1M"]);
    assert!(!ok);
    assert!(
        stderr.contains("invalid sizes for 'minbytes' and 'maxbytes'"),
        "{stderr}"
    );
    let (ok, _, stderr) = perf(&["all-to-all"]);
    assert!(!ok);
    assert!(stderr.contains("unknown collective"), "{stderr}");
}

/// weft's own net plugin, built for this profile (`<target>/<profile>/libnccl_net_weft.so`),
/// for the runs below that load it as an external plugin.
fn weft_plugin() -> std::path::PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let status = Command::new(cargo)
        .args(["build", "-p", "weft-nccl-net"])
        .current_dir(&root)
        .status()
        .expect("run cargo build -p weft-nccl-net");
    assert!(status.success(), "cargo build -p weft-nccl-net failed");
    // The test executable lives in <target>/<profile>/deps.
    let exe = std::env::current_exe().expect("path of the test executable");
    let lib = exe
        .parent()
        .and_then(std::path::Path::parent)
        .expect("test executable under <target>/<profile>/deps")
        .join("libnccl_net_weft.so");
    assert!(lib.exists(), "{} missing after the build", lib.display());
    lib
}

fn perf_env(args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_weft"))
        .arg("perf")
        .args(args)
        .env("WEFT_TIMEOUT", "30")
        .envs(env.iter().copied())
        .output()
        .expect("run weft perf");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The host communicator's NET connections over an external NCCL net plugin
/// (`NCCL_NET_PLUGIN`): weft's own `libnccl-net-weft.so` with its socket backend, loaded
/// through `ExternalNet`; every element of every all-reduce checked by perf.
#[test]
fn over_an_external_net_plugin() {
    let plugin = weft_plugin();
    let plugin = plugin.to_str().unwrap();
    let args = [
        "all-reduce",
        "--ranks",
        "3",
        "--transport",
        "net",
        "-b",
        "1K",
        "-e",
        "1M",
        "-f",
        "32",
        "-n",
        "2",
        "-w",
        "1",
        "-c",
    ];
    let env = [
        ("NCCL_NET_PLUGIN", plugin),
        ("NCCL_NET", "weft"),
        ("WEFT_NET_BACKEND", "socket"),
        ("NCCL_SOCKET_IFNAME", "lo"),
        ("WEFT_DEBUG", "INFO"),
    ];
    let (ok, stdout, stderr) = perf_env(&args, &env);
    assert!(ok, "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("transport NET"), "{stdout}");
    assert!(stdout.contains("# Out of bounds values : 0 OK"), "{stdout}");
    assert_eq!(rows(&stdout).len(), 3, "{stdout}");
    for r in rows(&stdout) {
        assert_eq!((r[8].as_str(), r[12].as_str()), ("0", "0"), "{r:?}");
    }
    assert!(
        stderr.contains("Initialized NET plugin weft (ncclNet v11"),
        "the plugin did not serve: {stderr}"
    );

    // Asked for by NCCL_NET but absent: a clear error at init, naming the file and the
    // loader's answer, well before the 30 s deadline.
    let missing = "/nonexistent/libnccl-net-weft.so";
    let start = std::time::Instant::now();
    let (ok, stdout, stderr) =
        perf_env(&args, &[("NCCL_NET_PLUGIN", missing), ("NCCL_NET", "weft")]);
    assert!(!ok, "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        stderr.contains("Failed to initialize any NET plugin")
            && stderr.contains(missing)
            && stderr.contains("No such file or directory"),
        "{stderr}"
    );
    assert!(start.elapsed() < std::time::Duration::from_secs(25));

    // Named without NCCL_NET: NCCL falls back to its own networks, weft to its sockets,
    // with a warning that names the file.
    let (ok, stdout, stderr) = perf_env(&args, &[("NCCL_NET_PLUGIN", missing)]);
    assert!(ok, "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("# Out of bounds values : 0 OK"), "{stdout}");
    assert!(
        stderr.contains("NET/Plugin: Could not find:") && stderr.contains(missing),
        "{stderr}"
    );
}
