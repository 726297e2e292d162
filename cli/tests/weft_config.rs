//! `weft config` end to end: the listing of every variable, NCCL_DEBUG=INFO's list of what
//! was set, and a bad value (exit status 2, the error on stderr).

use std::process::{Command, Output};

use weft_config::table::TABLE;

/// `weft config ARGS` with only `vars` of the table's variables set (whatever the test
/// environment has set is removed).
fn weft_config(args: &[&str], vars: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_weft"));
    cmd.arg("config").args(args);
    for entry in TABLE {
        for name in entry.info().names {
            cmd.env_remove(name);
        }
    }
    cmd.envs(vars.iter().copied());
    cmd.output().expect("run weft config")
}

fn stdout(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(out.stderr.is_empty(), "{out:?}");
    String::from_utf8(out.stdout.clone()).unwrap()
}

#[test]
fn lists_every_variable_with_its_value_and_default() {
    let text = stdout(&weft_config(
        &[],
        &[
            ("NCCL_SOCKET_IFNAME", "=lo"),
            ("WEFT_SOCKET_NTHREADS", "4"),
            ("NCCL_P2P_LEVEL", "FAST"),
            ("WEFT_TRANSPORT", " shm "),
        ],
    ));
    let rows: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with(['*', '!', ' ']))
        .collect();
    assert_eq!(rows.len(), TABLE.len(), "{text}");
    for want in [
        "* WEFT_SOCKET_IFNAME / NCCL_SOCKET_IFNAME = =lo (from NCCL_SOCKET_IFNAME; default unset: ",
        "  WEFT_SOCKET_NTHREADS / NCCL_SOCKET_NTHREADS = 4 (from WEFT_SOCKET_NTHREADS, the default)",
        "* WEFT_TRANSPORT = shm (from WEFT_TRANSPORT; default auto)",
        "! NCCL_P2P_LEVEL = unset: PXB, or SYS on AMD hosts with at most two GPUs (NCCL_P2P_LEVEL=\"FAST\" ignored: expected LOC, NVL, PIX, PXB, PHB, SYS or 0..5)",
        "  WEFT_BOOTSTRAP_TIMEOUT = 30",
        "  WEFT_DEBUG / NCCL_DEBUG = unset: warnings (libnccl: nothing)",
    ] {
        assert!(rows.iter().any(|r| r.starts_with(want)), "{want}\n{text}");
    }
}

#[test]
fn changed_lists_what_differs_as_nccl_debug_info_does() {
    let text = stdout(&weft_config(
        &["--changed"],
        &[
            ("NCCL_SOCKET_IFNAME", "eth0"),
            ("NCCL_SOCKET_NTHREADS", "4"),
            ("WEFT_ALGO", "oneshot"),
            ("NCCL_MAX_NRINGS", "12"),
        ],
    ));
    assert_eq!(
        text,
        "NCCL_SOCKET_IFNAME set by environment to eth0\n\
         NCCL_MAX_NRINGS set by environment to 12\n\
         WEFT_ALGO set by environment to oneshot\n"
    );
    assert_eq!(stdout(&weft_config(&["--changed"], &[])), "");
}

#[test]
fn a_bad_value_is_an_error_naming_it() {
    let out = weft_config(
        &[],
        &[
            ("NCCL_IB_QPS_PER_CONNECTION", "9"),
            ("NCCL_PROTO", "LL,Simpel"),
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(out.stdout.is_empty(), "{out:?}");
    let err = String::from_utf8(out.stderr).unwrap();
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 2, "{err}");
    assert_eq!(
        lines[0],
        "weft config: NCCL_IB_QPS_PER_CONNECTION=\"9\": expected a number from 1 to 8"
    );
    assert!(
        lines[1].starts_with("weft config: NCCL_PROTO=\"LL,Simpel\": unknown protocol"),
        "{err}"
    );
    // --changed refuses it alike.
    let out = weft_config(&["--changed"], &[("WEFT_TIMEOUT", "soon")]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert_eq!(
        String::from_utf8(out.stderr).unwrap(),
        "weft config: WEFT_TIMEOUT=\"soon\": expected a positive number of seconds\n"
    );
}

#[test]
fn markdown_is_docs_environment_md() {
    let text = stdout(&weft_config(&["--markdown"], &[("NCCL_PROTO", "bad")]));
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/environment.md"
    ))
    .unwrap();
    assert_eq!(text, doc);
}
