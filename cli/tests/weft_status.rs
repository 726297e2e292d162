//! `weft status` against a running `weft perf` job (three local rank processes): it finds
//! the job without being told where (the discovery directory), reports every rank, names
//! none while the job runs, and names the rank whose process is stopped (SIGSTOP) within
//! 2 seconds.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn status(runtime_dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_weft"))
        .arg("status")
        .args(args)
        .env("XDG_RUNTIME_DIR", runtime_dir)
        .output()
        .expect("run weft status")
}

/// The pids of `parent`'s children (the rank processes `weft perf --ranks` spawns).
fn children(parent: u32) -> Vec<u32> {
    let path = format!("/proc/{parent}/task/{parent}/children");
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

struct Job(Child);

impl Drop for Job {
    fn drop(&mut self) {
        for pid in children(self.0.id()) {
            // SAFETY: our own job's processes; SIGKILL ends stopped ones too.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn finds_a_running_job_and_names_a_stopped_rank() {
    let dir = std::env::temp_dir().join(format!("weft-status-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let job = Job(Command::new(env!("CARGO_BIN_EXE_weft"))
        .args([
            "perf",
            "all-reduce",
            "--ranks",
            "3",
            "-b",
            "64K",
            "-e",
            "64K",
            "-n",
            "10000000",
        ])
        .env("XDG_RUNTIME_DIR", &dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start weft perf"));
    // Wait for the ranks' servers to show up and answer.
    let start = Instant::now();
    let running = loop {
        let out = status(&dir, &["--json"]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if out.status.success() && text.matches("\"answered\":true").count() == 3 {
            break text;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the job never answered: {text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(running.contains("\"nranks\":3"), "{running}");
    assert!(running.contains("\"op\":\"AllReduce\""), "{running}");
    assert!(
        running.contains("\"culprit\":null"),
        "a running job has no culprit: {running}"
    );

    // Stop one rank process; the report names its rank.
    let ranks = children(job.0.id());
    assert_eq!(ranks.len(), 3, "{ranks:?}");
    let victim = ranks[1];
    // SAFETY: a process of our own job.
    unsafe { libc::kill(victim as libc::pid_t, libc::SIGSTOP) };
    std::thread::sleep(Duration::from_millis(1200));
    // A 3 s deadline per process: on a loaded 2-core CI machine a live rank's server must
    // not be taken for a stopped one (the 2 s bar of the issue is the library test's).
    let asked = Instant::now();
    let out = status(&dir, &["--deadline", "3000"]);
    let took = asked.elapsed();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    println!("{text}");
    assert!(took < Duration::from_secs(8), "took {took:?}");
    let culprit = text
        .lines()
        .find(|l| l.starts_with("holding the job up: rank "))
        .unwrap_or_else(|| panic!("no culprit named:\n{text}"));
    // The stopped process holds one rank; its own line says NO ANSWER, the culprit is it.
    let silent: Vec<&str> = text.lines().filter(|l| l.contains("NO ANSWER")).collect();
    assert_eq!(silent.len(), 1, "{text}");
    let rank = silent[0]
        .trim()
        .trim_start_matches("rank ")
        .split(':')
        .next()
        .unwrap();
    assert!(
        culprit.starts_with(&format!("holding the job up: rank {rank}:")),
        "{text}"
    );
    assert!(culprit.contains("did not answer"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}
