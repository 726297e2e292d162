//! Local runs: the parent starts the rendezvous and re-executes itself once per rank.
//!
//! Each child gets the parent's arguments plus the hidden `--rank-of ID:RANK:NRANKS`. The
//! parent only waits: rank 0 prints the report. When a rank fails, the others fail on their
//! own within their deadline (its connections are marked aborted, or its process is gone);
//! the parent gives them that long, then kills what is left, so it never hangs either.

use std::net::{IpAddr, Ipv4Addr};
use std::process::{Child, Command, ExitCode};
use std::time::{Duration, Instant};

use weft_runtime::bootstrap::{BootstrapOptions, BootstrapRoot};

/// The hidden option that makes a process one rank of a local run.
pub const ROLE_FLAG: &str = "--rank-of";

/// Starts `nranks` rank processes with `args` (the `perf` arguments) and waits for them;
/// the rendezvous as `opts` say, with deadline `timeout`.
pub fn run_local(
    nranks: usize,
    args: &[String],
    mut opts: BootstrapOptions,
    timeout: Duration,
) -> ExitCode {
    if opts.interface.is_none() && opts.root_ip.is_none() {
        opts.root_ip = Some(IpAddr::V4(Ipv4Addr::LOCALHOST));
    }
    opts.timeout = timeout;
    let (id, root) = match BootstrapRoot::start(&opts) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("weft perf: cannot start the rendezvous: {e}");
            return ExitCode::FAILURE;
        }
    };
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("weft perf: cannot find this program to start the ranks: {e}");
            return ExitCode::FAILURE;
        }
    };
    let hex = id.to_hex();
    let mut children: Vec<(usize, Child)> = Vec::with_capacity(nranks);
    for rank in 0..nranks {
        let spawned = Command::new(&exe)
            .arg("perf")
            .args(args)
            .arg(ROLE_FLAG)
            .arg(format!("{hex}:{rank}:{nranks}"))
            .spawn();
        match spawned {
            Ok(child) => children.push((rank, child)),
            Err(e) => {
                eprintln!("weft perf: cannot start rank {rank}: {e}");
                kill_all(&mut children);
                return ExitCode::FAILURE;
            }
        }
    }
    let status = wait_all(&mut children, timeout);
    // The rendezvous ended long ago (or failed, which the ranks reported).
    drop(root);
    status
}

fn kill_all(children: &mut [(usize, Child)]) {
    for (_, child) in children.iter_mut() {
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// Waits for every child; after the first failure, gives the others `grace` to fail or
/// finish on their own, then kills them.
fn wait_all(children: &mut Vec<(usize, Child)>, timeout: Duration) -> ExitCode {
    let grace = timeout + Duration::from_secs(5);
    let mut failed: Vec<usize> = Vec::new();
    let mut first_failure: Option<Instant> = None;
    while !children.is_empty() {
        let mut k = 0;
        while k < children.len() {
            let (rank, child) = &mut children[k];
            match child.try_wait() {
                Ok(Some(status)) => {
                    if !status.success() {
                        failed.push(*rank);
                        first_failure.get_or_insert_with(Instant::now);
                        if let Some(sig) = std::os::unix::process::ExitStatusExt::signal(&status) {
                            eprintln!("weft perf: rank {rank} was killed by signal {sig}");
                        }
                    }
                    children.remove(k);
                }
                Ok(None) => k += 1,
                Err(e) => {
                    eprintln!("weft perf: waiting for rank {rank}: {e}");
                    failed.push(*rank);
                    children.remove(k);
                }
            }
        }
        if first_failure.is_some_and(|t| t.elapsed() > grace) {
            for (rank, _) in children.iter() {
                eprintln!(
                    "weft perf: rank {rank} still running {grace:?} after a failure; killing it"
                );
                failed.push(*rank);
            }
            kill_all(children);
            children.clear();
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        failed.sort_unstable();
        eprintln!("weft perf: failed ranks: {failed:?}");
        ExitCode::FAILURE
    }
}
