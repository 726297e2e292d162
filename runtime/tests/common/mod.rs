//! Multi-process tests on loopback: a test re-executes its own binary once per rank.
//!
//! The parent starts a bootstrap root and runs `<test binary> <test name> --exact` with
//! `WEFT_TEST_ID` / `WEFT_TEST_RANK` / `WEFT_TEST_NRANKS` (and the case's variables) set;
//! in a child, the same test function finds them ([`role`]) and runs as that rank. Child
//! output goes to a log file that the parent prints when a rank fails.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use weft_runtime::bootstrap::{BootstrapOptions, BootstrapRoot, UniqueId};
use weft_runtime::comm::{CommOptions, HostComm, TransportChoice};

/// This process's role when it is a rank of a multi-process test.
#[derive(Debug, Clone)]
pub struct Role {
    pub id: UniqueId,
    pub rank: usize,
    pub nranks: usize,
}

pub fn role() -> Option<Role> {
    let id = std::env::var("WEFT_TEST_ID").ok()?;
    let rank = std::env::var("WEFT_TEST_RANK").ok()?.parse().ok()?;
    let nranks = std::env::var("WEFT_TEST_NRANKS").ok()?.parse().ok()?;
    Some(Role {
        id: UniqueId::from_hex(&id).expect("WEFT_TEST_ID"),
        rank,
        nranks,
    })
}

/// A test-case variable (set by [`launch`] for every rank).
pub fn var(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// Loopback options with `timeout`, the channels, transport and FIFO step of the case's
/// variables (`WEFT_TEST_CHANNELS`, `WEFT_TEST_TRANSPORT`, `WEFT_TEST_STEP_BYTES`), and the
/// protocols of `WEFT_TEST_PROTO` (`NCCL_PROTO`'s syntax).
pub fn options(timeout: Duration) -> CommOptions {
    let mut opts = CommOptions::loopback(timeout);
    if let Some(c) = var("WEFT_TEST_CHANNELS") {
        opts.nchannels = Some(c.parse().expect("WEFT_TEST_CHANNELS"));
    }
    if let Some(t) = var("WEFT_TEST_TRANSPORT") {
        opts.transport = TransportChoice::parse(&t).expect("WEFT_TEST_TRANSPORT");
    }
    if let Some(b) = var("WEFT_TEST_STEP_BYTES") {
        opts.step_bytes = Some(b.parse().expect("WEFT_TEST_STEP_BYTES"));
    }
    if let Some(p) = var("WEFT_TEST_PROTO") {
        opts.protocols = weft_core::tune::ProtocolEnable::parse(&p).expect("WEFT_TEST_PROTO");
    }
    opts
}

impl Role {
    pub fn comm(&self, opts: &CommOptions) -> HostComm {
        HostComm::init(&self.id, self.rank, self.nranks, opts)
            .unwrap_or_else(|e| panic!("rank {}: init: {e}", self.rank))
    }
}

/// How one rank ended.
#[derive(Debug)]
pub struct RankExit {
    pub rank: usize,
    pub status: Option<ExitStatus>,
    pub log: String,
}

impl RankExit {
    /// Exited with success after running its test (a child whose name filter matched
    /// nothing would also exit 0: the harness's "1 passed" proves it ran).
    pub fn ok(&self) -> bool {
        self.status.is_some_and(|s| s.success()) && self.log.contains("1 passed")
    }
}

/// Runs test `name` as `nranks` rank processes with `vars`, waits up to `deadline`
/// (killing what is left), and returns how each ended.
pub fn launch(
    name: &str,
    nranks: usize,
    vars: &[(&str, String)],
    deadline: Duration,
) -> Vec<RankExit> {
    launch_each(name, nranks, vars, |_| Vec::new(), deadline)
}

/// [`launch`], with variables that differ per rank (`per_rank(rank)`).
pub fn launch_each(
    name: &str,
    nranks: usize,
    vars: &[(&str, String)],
    per_rank: impl Fn(usize) -> Vec<(String, String)>,
    deadline: Duration,
) -> Vec<RankExit> {
    let opts = BootstrapOptions::loopback(deadline);
    let (id, root) = BootstrapRoot::start(&opts).expect("bootstrap root");
    let exe = std::env::current_exe().expect("test binary");
    let dir = std::env::temp_dir();
    let mut children: Vec<(usize, Child, PathBuf)> = Vec::new();
    for rank in 0..nranks {
        let log = dir.join(format!(
            "weft-test-{}-{name}-{rank}.log",
            std::process::id()
        ));
        let file = std::fs::File::create(&log).expect("log file");
        let err = file.try_clone().expect("log file");
        let mut cmd = Command::new(&exe);
        cmd.args([name, "--exact", "--nocapture", "--test-threads=1"])
            .env("WEFT_TEST_ID", id.to_hex())
            .env("WEFT_TEST_RANK", rank.to_string())
            .env("WEFT_TEST_NRANKS", nranks.to_string())
            .env("RUST_BACKTRACE", "0")
            .stdout(Stdio::from(file))
            .stderr(Stdio::from(err));
        for (k, v) in vars {
            cmd.env(k, v);
        }
        for (k, v) in per_rank(rank) {
            cmd.env(k, v);
        }
        children.push((rank, cmd.spawn().expect("spawn rank"), log));
    }
    let start = Instant::now();
    let mut exits: Vec<RankExit> = Vec::new();
    while !children.is_empty() {
        let mut k = 0;
        while k < children.len() {
            if let Ok(Some(status)) = children[k].1.try_wait() {
                let (rank, _, log) = children.remove(k);
                exits.push(RankExit {
                    rank,
                    status: Some(status),
                    log: std::fs::read_to_string(&log).unwrap_or_default(),
                });
                let _ = std::fs::remove_file(log);
            } else {
                k += 1;
            }
        }
        if start.elapsed() > deadline {
            for (rank, mut child, log) in children.drain(..) {
                let _ = child.kill();
                let _ = child.wait();
                exits.push(RankExit {
                    rank,
                    status: None,
                    log: std::fs::read_to_string(&log).unwrap_or_default(),
                });
                let _ = std::fs::remove_file(log);
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(root);
    exits.sort_by_key(|e| e.rank);
    if std::env::var_os("WEFT_TEST_SHOW_LOGS").is_some() {
        for e in &exits {
            eprintln!(
                "---- {name}: rank {} ({:?}) ----\n{}",
                e.rank, e.status, e.log
            );
        }
    }
    exits
}

/// Asserts that every rank exited successfully, printing the logs of those that did not.
pub fn assert_all_ok(name: &str, exits: &[RankExit]) {
    let bad: Vec<&RankExit> = exits.iter().filter(|e| !e.ok()).collect();
    if !bad.is_empty() {
        for e in &bad {
            eprintln!(
                "---- {name}: rank {} ended with {:?} ----\n{}",
                e.rank, e.status, e.log
            );
        }
        panic!("{name}: {} rank(s) failed", bad.len());
    }
}
