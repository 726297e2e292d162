//! What a communicator does when something goes wrong: every rank ends with an error that
//! names the rank at fault, well within the deadline, and never hangs.

mod common;

use std::time::{Duration, Instant};

use weft_core::abi::{DataType, RedOp};
use weft_runtime::comm::CommError;

/// The deadline of every wait in these tests: failures must be reported well before it.
const TIMEOUT: Duration = Duration::from_secs(8);

/// SIGKILLs this rank process 300 ms from now, in the middle of whatever call it makes.
fn kill_self_soon() {
    std::thread::spawn(|| {
        std::thread::sleep(Duration::from_millis(300));
        let me = std::process::id() as libc::pid_t;
        // SAFETY: signalling our own process; SIGKILL ends it at once, mid-call.
        unsafe { libc::kill(me, libc::SIGKILL) };
    });
}

/// Stops this process (SIGSTOP) 300 ms from now, mid-call: alive but silent, as a rank
/// hung outside weft; the test's rank 0 ends it with SIGKILL.
fn stop_self_soon() {
    std::thread::spawn(|| {
        std::thread::sleep(Duration::from_millis(300));
        // SAFETY: stopping our own process; rank 0 ends it with SIGKILL.
        unsafe { libc::raise(libc::SIGSTOP) };
    });
}

/// What a survivor does before its process exits: a real job's processes tear down and
/// log for a while after a failure, and a survivor that vanished the instant it failed
/// could be taken for the dead rank by a peer still looking (its process gone too; over
/// NET its closed connections look like a death).
fn linger_after_failure() {
    std::thread::sleep(Duration::from_millis(500));
}

/// The victim's process ended by SIGKILL, every other rank's cleanly (its checks passed);
/// the others' lines that name their own rank are printed.
fn victim_killed_others_ok(exits: &[common::RankExit], victim: usize) {
    use std::os::unix::process::ExitStatusExt;
    for e in exits {
        if e.rank == victim {
            assert_eq!(
                e.status.and_then(|s| s.signal()),
                Some(libc::SIGKILL),
                "the victim should have been killed: {}",
                e.log
            );
        } else {
            assert!(e.ok(), "rank {} ({:?}):\n{}", e.rank, e.status, e.log);
            let mine = format!("rank {}: ", e.rank);
            for line in e.log.lines().filter(|l| l.contains(&mine)) {
                println!("{line}");
            }
        }
    }
}

/// Loops large all-reduces; the victim SIGKILLs itself in the middle of one. The others
/// must fail within the deadline with an error naming the victim.
fn killed_rank(name: &str, nranks: usize, victim: usize, transport: &str) {
    if let Some(role) = common::role() {
        let mut comm = role.comm(&common::options(TIMEOUT));
        let count = 4 << 20;
        let send = vec![1u8; count * 4];
        let mut recv = vec![0u8; count * 4];
        if role.rank == victim {
            kill_self_soon();
        }
        let start = Instant::now();
        let mut last_ok = Instant::now();
        loop {
            match comm.all_reduce(&send, &mut recv, DataType::Float32, RedOp::Sum) {
                Ok(()) => last_ok = Instant::now(),
                Err(e) => {
                    let waited = last_ok.elapsed();
                    let text = e.to_string();
                    println!("rank {}: failed after {waited:?}: {text}", role.rank);
                    // The victim, even where the victim's other neighbour failed and closed
                    // first (issue 26's root cause: a failure a neighbour passed on waits a
                    // moment for the dying process to show): never a hang, never a
                    // neighbour named for the victim.
                    assert!(
                        text.contains(&format!("rank {victim} (pid")),
                        "the error does not name the dead rank {victim}: {text}"
                    );
                    assert!(waited < TIMEOUT, "took {waited:?}, deadline {TIMEOUT:?}");
                    // The communicator is unusable afterwards, and says why.
                    let again = comm.all_reduce(&send, &mut recv, DataType::Float32, RedOp::Sum);
                    assert!(matches!(again, Err(CommError::Failed(_))), "{again:?}");
                    linger_after_failure();
                    return;
                }
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "rank {victim} never died"
            );
        }
    }
    let exits = common::launch(
        name,
        nranks,
        &[
            ("WEFT_TEST_CHANNELS", "2".to_string()),
            ("WEFT_TEST_TRANSPORT", transport.to_string()),
        ],
        Duration::from_secs(60),
    );
    victim_killed_others_ok(&exits, victim);
}

#[test]
fn killed_rank_over_shm() {
    killed_rank("killed_rank_over_shm", 4, 2, "shm");
}

#[test]
fn killed_rank_over_net() {
    killed_rank("killed_rank_over_net", 3, 1, "net");
}

/// Issue 26's root cause across hosts: each rank on a host of its own (`NCCL_HOSTID`), so
/// no rank can see the victim's process die; the survivors' errors still name the victim,
/// found by the health query (its process no longer answers), not the neighbour that
/// passed the failure on.
#[test]
fn killed_rank_on_another_host_is_named() {
    const VICTIM: usize = 1;
    if let Some(role) = common::role() {
        let mut comm = role.comm(&common::options(TIMEOUT));
        let count = 1 << 20;
        let send = vec![1u8; count * 4];
        let mut recv = vec![0u8; count * 4];
        if role.rank == VICTIM {
            kill_self_soon();
        }
        let start = Instant::now();
        loop {
            if let Err(e) = comm.all_reduce(&send, &mut recv, DataType::Float32, RedOp::Sum) {
                let text = e.to_string();
                println!("rank {}: {text}", role.rank);
                assert_eq!(e.culprit(), Some(VICTIM), "{text}");
                assert!(text.contains(&format!("rank {VICTIM}")), "{text}");
                linger_after_failure();
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "rank {VICTIM} never died"
            );
        }
    }
    let exits = common::launch_each(
        "killed_rank_on_another_host_is_named",
        3,
        &[
            ("WEFT_TEST_CHANNELS", "2".to_string()),
            ("WEFT_TEST_TRANSPORT", "net".to_string()),
        ],
        |rank| vec![("NCCL_HOSTID".to_string(), format!("weft-test-host-{rank}"))],
        Duration::from_secs(60),
    );
    victim_killed_others_ok(&exits, VICTIM);
}

/// Issue 26: a rank SIGKILLs itself mid-all-reduce; the others fail naming it (as above),
/// then shrink it away and run all-reduces on the survivors' communicator, every element
/// checked. Prints how long init and the shrink took.
fn killed_rank_then_shrink(name: &str, nranks: usize, victim: usize, transport: &str) {
    if let Some(role) = common::role() {
        let opts = common::options(TIMEOUT);
        let started = Instant::now();
        let mut comm = role.comm(&opts);
        let init_took = started.elapsed();
        let count = 1 << 20;
        let send = vec![1u8; count * 4];
        let mut recv = vec![0u8; count * 4];
        if role.rank == victim {
            kill_self_soon();
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        while comm
            .all_reduce(&send, &mut recv, DataType::Float32, RedOp::Sum)
            .is_ok()
        {
            assert!(Instant::now() < deadline, "rank {victim} never died");
        }
        // NCCL's revoke: nothing is in flight any more (the call returned); the flag keeps
        // any straggling wait from blocking the shrink.
        comm.abort_flag().abort();
        let shrink_took = shrink_and_check(&mut comm, &opts, role.rank, victim, nranks, 3);
        println!(
            "rank {}: init {init_took:?}, shrink to {} ranks {shrink_took:?}, 3 all-reduces correct",
            role.rank,
            nranks - 1
        );
        return;
    }
    let exits = common::launch(
        name,
        nranks,
        &[
            ("WEFT_TEST_CHANNELS", "2".to_string()),
            ("WEFT_TEST_TRANSPORT", transport.to_string()),
        ],
        Duration::from_secs(90),
    );
    for e in &exits {
        if e.rank != victim {
            assert!(e.ok(), "rank {} ({:?}):\n{}", e.rank, e.status, e.log);
            print!("{}", e.log);
        }
    }
}

/// The survivors' side of a shrink: `rank` of `nranks` shrinks `victim` away from `comm`,
/// checks it is ranked in parent order, and runs `rounds` all-reduces on the new
/// communicator, every element checked. Returns how long the shrink took.
fn shrink_and_check(
    comm: &mut weft_runtime::comm::HostComm,
    opts: &weft_runtime::comm::CommOptions,
    rank: usize,
    victim: usize,
    nranks: usize,
    rounds: u32,
) -> Duration {
    let started = Instant::now();
    let mut shrunk = comm
        .shrink(&[victim], opts)
        .unwrap_or_else(|e| panic!("rank {rank}: shrink: {e}"));
    let took = started.elapsed();
    assert_eq!(shrunk.nranks(), nranks - 1);
    let survivors: Vec<usize> = (0..nranks).filter(|&r| r != victim).collect();
    assert_eq!(survivors[shrunk.rank()], rank, "ranked in parent order");
    let count = 1 << 14;
    let mut recv = vec![0u8; count * 4];
    for round in 0..rounds {
        let value = |parent: usize, i: usize| ((parent + 1) * (i % 7 + 1)) as f32 + round as f32;
        let mine: Vec<u8> = (0..count)
            .flat_map(|i| value(rank, i).to_le_bytes())
            .collect();
        recv.fill(0xa5);
        shrunk
            .all_reduce(&mine, &mut recv, DataType::Float32, RedOp::Sum)
            .unwrap_or_else(|e| panic!("rank {rank}: all-reduce {round} after the shrink: {e}"));
        for (i, got) in recv.chunks_exact(4).enumerate() {
            let got = f32::from_le_bytes(got.try_into().unwrap());
            let want: f32 = survivors.iter().map(|&p| value(p, i)).sum();
            assert_eq!(got, want, "rank {rank}: round {round}, element {i}");
        }
    }
    took
}

#[test]
fn survivors_shrink_and_go_on_over_shm() {
    killed_rank_then_shrink("survivors_shrink_and_go_on_over_shm", 4, 1, "shm");
}

#[test]
fn survivors_shrink_and_go_on_over_net() {
    killed_rank_then_shrink("survivors_shrink_and_go_on_over_net", 3, 2, "net");
}

/// Issue 26's revoke on the host communicator: a rank stops (SIGSTOP) mid-all-reduce, so
/// the others' calls block with no dead peer to find and a 30 s deadline far off. Each
/// survivor's watcher thread asks the job (the health query), sees the stopped rank
/// silent, and revokes from outside the call (NCCL's revoke: the abort flag): the blocked
/// all-reduce returns within 2 s of it, the survivors shrink the stopped rank away and run
/// 100 all-reduces on their new communicator, every element checked. Prints how long the
/// call took to return after the revoke, the shrink, and the parent's init.
#[test]
fn a_stopped_rank_is_revoked_away_and_the_survivors_go_on() {
    const VICTIM: usize = 2;
    if let Some(role) = common::role() {
        let opts = common::options(Duration::from_secs(30));
        let started = Instant::now();
        let mut comm = role.comm(&opts);
        let init_took = started.elapsed();
        let count = 1 << 14;
        let send = vec![1u8; count * 4];
        let mut recv = vec![0u8; count * 4];
        if role.rank == VICTIM {
            stop_self_soon();
        }
        let revoked_at = std::sync::Arc::new(std::sync::Mutex::new(None::<Instant>));
        let watcher = {
            let status = comm.status();
            let revoke = comm.abort_flag();
            let revoked_at = std::sync::Arc::clone(&revoked_at);
            std::thread::spawn(move || {
                let start = Instant::now();
                loop {
                    std::thread::sleep(Duration::from_millis(200));
                    let report = status.query(weft_runtime::status::QUERY_DEADLINE);
                    let culprit = report.culprit();
                    if culprit.as_ref().is_some_and(|c| {
                        c.rank as usize == VICTIM && c.why.contains("did not answer")
                    }) {
                        *revoked_at.lock().unwrap() = Some(Instant::now());
                        revoke.abort();
                        return;
                    }
                    assert!(
                        start.elapsed() < Duration::from_secs(20),
                        "rank {VICTIM} never named: {report}"
                    );
                }
            })
        };
        let failed = loop {
            if let Err(e) = comm.all_reduce(&send, &mut recv, DataType::Float32, RedOp::Sum) {
                break e;
            }
        };
        let returned = Instant::now();
        watcher.join().expect("the watcher's checks");
        let revoked = revoked_at
            .lock()
            .unwrap()
            .expect("revoked before the call returned");
        let return_took = returned.saturating_duration_since(revoked);
        assert!(
            return_took < Duration::from_secs(2),
            "rank {}: the call returned {return_took:?} after the revoke: {failed}",
            role.rank
        );
        let shrink_took = shrink_and_check(&mut comm, &opts, role.rank, VICTIM, 3, 100);
        println!(
            "rank {}: init {init_took:?}; the blocked call returned {return_took:?} after the \
             revoke ({failed}); shrink to 2 ranks {shrink_took:?}; 100 all-reduces correct",
            role.rank
        );
        if role.rank == 0 {
            let victim_pid = comm.peer_pids()[VICTIM];
            // SAFETY: ending the stopped rank's process, whose pid it sent us.
            unsafe { libc::kill(victim_pid as libc::pid_t, libc::SIGKILL) };
        }
        linger_after_failure();
        return;
    }
    let exits = common::launch(
        "a_stopped_rank_is_revoked_away_and_the_survivors_go_on",
        3,
        &[("WEFT_TEST_TRANSPORT", "shm".to_string())],
        Duration::from_secs(90),
    );
    victim_killed_others_ok(&exits, VICTIM);
}

/// Ranks that disagree on the count: every rank fails (no hang) within the deadline.
#[test]
fn mismatched_counts_fail_everywhere() {
    if let Some(role) = common::role() {
        let mut comm = role.comm(&common::options(TIMEOUT));
        let count = 100_000 + 16 * role.rank;
        let send = vec![0u8; count * 4];
        let mut recv = vec![0u8; count * 4];
        let start = Instant::now();
        let r = comm.all_reduce(&send, &mut recv, DataType::Float32, RedOp::Sum);
        let err = r.expect_err("mismatched counts must fail");
        println!("rank {}: {err} after {:?}", role.rank, start.elapsed());
        assert!(start.elapsed() < TIMEOUT + Duration::from_secs(2));
        return;
    }
    let exits = common::launch(
        "mismatched_counts_fail_everywhere",
        3,
        &[("WEFT_TEST_TRANSPORT", "shm".to_string())],
        Duration::from_secs(60),
    );
    common::assert_all_ok("mismatched_counts_fail_everywhere", &exits);
}

/// A rank started with another channel count is named at init.
#[test]
fn inconsistent_settings_are_named_at_init() {
    if let Some(role) = common::role() {
        let mut opts = common::options(TIMEOUT);
        opts.nchannels = Some(if role.rank == 1 { 3 } else { 2 });
        let err = weft_runtime::comm::HostComm::init(&role.id, role.rank, role.nranks, &opts)
            .expect_err("init must fail");
        let text = err.to_string();
        println!("rank {}: {text}", role.rank);
        assert!(text.contains("channel count"), "{text}");
        let culprit = if role.rank == 1 { 0 } else { 1 };
        assert_eq!(err.culprit(), Some(culprit), "{text}");
        return;
    }
    let exits = common::launch(
        "inconsistent_settings_are_named_at_init",
        3,
        &[],
        Duration::from_secs(60),
    );
    common::assert_all_ok("inconsistent_settings_are_named_at_init", &exits);
}

/// SHM forced between two "hosts" is refused at init with a clear reason.
#[test]
fn forced_shm_across_hosts_is_refused() {
    let name = "forced_shm_across_hosts_is_refused";
    if let Some(role) = common::role() {
        let err = weft_runtime::comm::HostComm::init(
            &role.id,
            role.rank,
            role.nranks,
            &common::options(TIMEOUT),
        )
        .expect_err("SHM cannot connect two hosts");
        let text = err.to_string();
        println!("rank {}: {text}", role.rank);
        assert!(text.contains("another host"), "{text}");
        return;
    }
    let exits = common::launch_each(
        name,
        2,
        &[("WEFT_TEST_TRANSPORT", "shm".to_string())],
        |rank| vec![("WEFT_HOSTID".to_string(), format!("host-{rank}"))],
        Duration::from_secs(60),
    );
    common::assert_all_ok(name, &exits);
}

/// Issue 26's health query: a rank stops (SIGSTOP) in the middle of a job; rank 0, stuck
/// in its all-reduce, asks every rank from another thread, and the report names the stopped
/// rank within 2 seconds, with the others' calls and waits. Rank 0 then ends the stopped
/// process, and the others fail naming it.
#[test]
fn a_stopped_rank_is_named_by_the_health_query() {
    const VICTIM: usize = 2;
    if let Some(role) = common::role() {
        let mut comm = role.comm(&common::options(Duration::from_secs(30)));
        let count = 1 << 14;
        let send = vec![1u8; count * 4];
        let mut recv = vec![0u8; count * 4];
        if role.rank == VICTIM {
            stop_self_soon();
        }
        let watcher = (role.rank == 0).then(|| {
            let status = comm.status();
            let victim_pid = comm.peer_pids()[VICTIM];
            std::thread::spawn(move || {
                let start = Instant::now();
                loop {
                    std::thread::sleep(Duration::from_millis(200));
                    let report = status.query(weft_runtime::status::QUERY_DEADLINE);
                    let culprit = report.culprit();
                    // One silent rank: a live one starved past the deadline on a loaded
                    // machine makes this query inconclusive, and the next one decides.
                    let silent = report.ranks.iter().filter(|r| r.is_err()).count();
                    if silent == 1
                        && culprit
                            .as_ref()
                            .is_some_and(|c| c.why.contains("did not answer"))
                    {
                        println!("health query after {:?}:\n{report}", start.elapsed());
                        println!("as JSON: {}", report.to_json());
                        let c = culprit.unwrap();
                        assert_eq!(c.rank as usize, VICTIM, "{report}");
                        assert!(report.took < Duration::from_secs(2), "{report}");
                        // The others answered, each in a call or waiting.
                        for (r, rank) in report.ranks.iter().enumerate() {
                            if r != VICTIM {
                                let rank = rank.as_ref().expect("a live rank answers");
                                assert!(rank.started > 0, "{report}");
                            }
                        }
                        let text = report.to_string();
                        assert!(text.contains("holding the job up: rank 2"), "{text}");
                        // SAFETY: ending the stopped rank's process, whose pid it sent us.
                        unsafe { libc::kill(victim_pid as libc::pid_t, libc::SIGKILL) };
                        return;
                    }
                    assert!(
                        start.elapsed() < Duration::from_secs(20),
                        "never named: {report}"
                    );
                }
            })
        });
        let mut failed = None;
        for _ in 0..100_000 {
            if let Err(e) = comm.all_reduce(&send, &mut recv, DataType::Float32, RedOp::Sum) {
                failed = Some(e.to_string());
                break;
            }
        }
        let text = failed.expect("the job cannot finish with a rank stopped");
        println!("rank {}: {text}", role.rank);
        assert!(text.contains(&format!("rank {VICTIM}")), "{text}");
        if let Some(w) = watcher {
            w.join().expect("the watcher's checks");
        }
        linger_after_failure();
        return;
    }
    let exits = common::launch(
        "a_stopped_rank_is_named_by_the_health_query",
        3,
        &[("WEFT_TEST_TRANSPORT", "shm".to_string())],
        Duration::from_secs(60),
    );
    victim_killed_others_ok(&exits, VICTIM);
    let rank0 = &exits.iter().find(|e| e.rank == 0).unwrap().log;
    println!("{rank0}");
}

/// A rank that never makes the call the others are in: at their deadline the others run
/// the health query, and the error that reaches the program names that rank as the one
/// holding the job up (not merely the neighbour each waited on).
#[test]
fn a_deadline_names_the_rank_that_never_called() {
    const ABSENT: usize = 2;
    if let Some(role) = common::role() {
        let mut comm = role.comm(&common::options(Duration::from_secs(2)));
        if role.rank == ABSENT {
            // Alive and answering the query, but never in the call.
            std::thread::sleep(Duration::from_secs(6));
            return;
        }
        let send = vec![1u8; 4096];
        let mut recv = vec![0u8; 4096];
        let err = comm
            .all_reduce(&send, &mut recv, DataType::Float32, RedOp::Sum)
            .expect_err("rank 2 never calls");
        let text = err.to_string();
        println!("rank {}: {text}", role.rank);
        if matches!(err, CommError::Stuck { .. }) {
            assert!(text.contains("holding the job up: rank 2"), "{text}");
            assert_eq!(err.culprit(), Some(ABSENT), "{text}");
        }
        return;
    }
    let exits = common::launch(
        "a_deadline_names_the_rank_that_never_called",
        3,
        &[("WEFT_TEST_TRANSPORT", "shm".to_string())],
        Duration::from_secs(60),
    );
    for e in &exits {
        assert!(e.ok(), "rank {} ({:?}):\n{}", e.rank, e.status, e.log);
        for line in e.log.lines().filter(|l| l.contains("holding the job up")) {
            println!("{line}");
        }
    }
    assert!(
        exits.iter().any(|e| e
            .log
            .contains("holding the job up: rank 2: it has not begun collective #1")),
        "no rank's deadline named rank 2:\n{}",
        exits
            .iter()
            .map(|e| e.log.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
}
