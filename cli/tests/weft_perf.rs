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
