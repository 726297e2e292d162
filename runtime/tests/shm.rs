//! SHM between two processes: this test binary re-executes itself as the peer rank
//! (`WEFT_SHM_TEST_ROLE` selects the child's part in `child_role`), the connect infos travel
//! over the child's stdin/stdout as the bootstrap would carry them.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use weft_runtime::conn::{AbortFlag, ConnError, FifoLayout, FifoRecvEnd, FifoSendEnd, WaitPolicy};
use weft_runtime::transport::shm::{ShmError, ShmTransport, sweep_stale_segments};
use weft_runtime::transport::{ConnSpec, PeerInfo, Transport};

const ROLE: &str = "WEFT_SHM_TEST_ROLE";
const COUNT: &str = "WEFT_SHM_TEST_COUNT";
const SEED: &str = "WEFT_SHM_TEST_SEED";
const STEP: &str = "WEFT_SHM_TEST_STEP";
const PAUSE_US: &str = "WEFT_SHM_TEST_PAUSE_US";

#[path = "common/random.rs"]
mod random;
use random::message;

fn env_u64(name: &str) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len() / 2)
        .map(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

fn transport(step: usize, timeout: Duration) -> ShmTransport {
    ShmTransport::new(
        FifoLayout::new(8, step).unwrap(),
        WaitPolicy::default().with_timeout(timeout),
        AbortFlag::new(),
    )
}

fn send_stream(send: &mut FifoSendEnd, seed: u64, count: u64) -> Result<(), ConnError> {
    let max = send.slice_bytes();
    for i in 0..count {
        send.send(&message(seed, i, max))?;
    }
    Ok(())
}

/// Receives `count` messages and checks every byte; `Err` names the first difference.
fn recv_stream(
    recv: &mut FifoRecvEnd,
    seed: u64,
    count: u64,
    pause: Duration,
) -> Result<(), String> {
    let max = recv.slice_bytes();
    let mut out = vec![0u8; max];
    for i in 0..count {
        if !pause.is_zero() {
            std::thread::sleep(pause);
        }
        let got = recv.recv_into(&mut out).map_err(|e| e.to_string())?;
        let want = message(seed, i, max);
        if out[..got] != want[..] {
            let at = out[..got].iter().zip(&want).position(|(a, b)| a != b);
            return Err(format!(
                "message {i}: {got} bytes vs {} expected, first difference at {at:?}",
                want.len()
            ));
        }
    }
    Ok(())
}

/// The child's part; a no-op in a normal test run.
#[test]
fn child_role() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let shm = transport(env_u64(STEP) as usize, Duration::from_secs(60));
    let spec = ConnSpec {
        rank: 1,
        peer: 0,
        channel: 2,
    };
    let mut stdin = std::io::stdin().lock();
    let mut line = String::new();
    let (seed, count) = (env_u64(SEED), env_u64(COUNT));
    let code = if role == "idle" {
        // Connects as the sender, then posts nothing until the parent closes our stdin.
        let (setup, blob) = shm.send_setup(spec).unwrap();
        println!("BLOB {}", hex(&blob));
        stdin.read_line(&mut line).unwrap();
        let _send = shm.send_connect(setup, &unhex(line.trim())).unwrap();
        println!("\nCONNECTED");
        let _ = stdin.read_line(&mut line);
        0
    } else if role == "send" {
        let (setup, blob) = shm.send_setup(spec).unwrap();
        println!("BLOB {}", hex(&blob));
        stdin.read_line(&mut line).unwrap();
        let mut send = shm.send_connect(setup, &unhex(line.trim())).unwrap();
        match send_stream(&mut send, seed, count) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("child sender: {e}");
                3
            }
        }
    } else {
        let (setup, blob) = shm.recv_setup(spec).unwrap();
        println!("BLOB {}", hex(&blob));
        stdin.read_line(&mut line).unwrap();
        let mut recv = shm.recv_connect(setup, &unhex(line.trim())).unwrap();
        let pause = Duration::from_micros(env_u64(PAUSE_US));
        match recv_stream(&mut recv, seed, count, pause) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("child receiver: {e}");
                3
            }
        }
    };
    std::process::exit(code);
}

struct Peer {
    child: Child,
    stdout: BufReader<ChildStdout>,
}

impl Peer {
    fn spawn(role: &str, step: usize, seed: u64, count: u64, pause_us: u64) -> Peer {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "child_role", "--nocapture", "--test-threads=1"])
            .env(ROLE, role)
            .env(STEP, step.to_string())
            .env(SEED, seed.to_string())
            .env(COUNT, count.to_string())
            .env(PAUSE_US, pause_us.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Peer { child, stdout }
    }

    fn blob(&mut self) -> Vec<u8> {
        let mut line = String::new();
        loop {
            line.clear();
            assert_ne!(
                self.stdout.read_line(&mut line).unwrap(),
                0,
                "child ended without a blob"
            );
            // The harness may have printed "test child_role ... " on the same line.
            if let Some((_, hex)) = line.split_once("BLOB ") {
                return unhex(hex.trim());
            }
        }
    }

    fn wait_for_line(&mut self, marker: &str) {
        let mut line = String::new();
        while !line.contains(marker) {
            line.clear();
            assert_ne!(
                self.stdout.read_line(&mut line).unwrap(),
                0,
                "child ended before {marker}"
            );
        }
    }

    fn give_blob(&mut self, blob: &[u8]) {
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{}", hex(blob)).unwrap();
        stdin.flush().unwrap();
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

fn spec() -> ConnSpec {
    ConnSpec {
        rank: 0,
        peer: 1,
        channel: 2,
    }
}

/// Segment files in /dev/shm created by `pid` (`weft-<id>-...`, the id's high half the pid).
fn segments_of(pid: u32) -> Vec<PathBuf> {
    std::fs::read_dir("/dev/shm")
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            name.strip_prefix("weft-")
                .and_then(|rest| rest.get(..8))
                .is_some_and(|high| u32::from_str_radix(high, 16) == Ok(pid))
        })
        .collect()
}

/// Parent receives from a child sender: every byte of 4000 odd-sized messages (500 trips
/// round an 8-slot ring); the segment's name is gone once both sides mapped it.
#[test]
fn child_sends_parent_checks_every_byte() {
    let (step, seed, count) = (4288, 0xfeed, 4000);
    let shm = transport(step, Duration::from_secs(60));
    let mut peer = Peer::spawn("send", step, seed, count, 0);
    let (setup, blob) = shm.recv_setup(spec()).unwrap();
    let path = setup.path().to_path_buf();
    assert!(path.exists());
    peer.give_blob(&blob);
    let mut recv = shm.recv_connect(setup, &peer.blob()).unwrap();
    assert_eq!(recv.slice_bytes(), step);
    recv_stream(&mut recv, seed, 1, Duration::ZERO).unwrap();
    // The child has mapped the segment (it posted data), so it unlinked the name.
    assert!(
        !path.exists(),
        "{} still exists after both sides mapped it",
        path.display()
    );
    let max = recv.slice_bytes();
    let mut out = vec![0u8; max];
    for i in 1..count {
        let got = recv.recv_into(&mut out).unwrap();
        assert_eq!(&out[..got], &message(seed, i, max)[..], "message {i}");
    }
    assert!(peer.child.wait().unwrap().success());
    // The sender's end closed with its exit: one more wait ends at once, not at the deadline.
    let err = recv.acquire().map(|_| ()).unwrap_err();
    assert!(
        matches!(
            err,
            ConnError::PeerClosed { .. } | ConnError::PeerDead { .. }
        ),
        "{err}"
    );
    assert!(segments_of(std::process::id()).iter().all(|p| *p != path));
}

/// Parent sends to a slow child receiver: the sender outpaces it, waits for credit, and
/// the child finds every byte intact (exit status 0).
#[test]
fn parent_sends_to_a_slow_child_which_checks_every_byte() {
    let (step, seed, count) = (1472, 0xbeef, 1500);
    let shm = transport(step, Duration::from_secs(60));
    let mut peer = Peer::spawn("recv", step, seed, count, 50);
    let (setup, blob) = shm.send_setup(spec()).unwrap();
    let child_blob = peer.blob();
    let child_segments = segments_of(peer.pid());
    assert_eq!(child_segments.len(), 1, "{child_segments:?}");
    peer.give_blob(&blob);
    let mut send = shm.send_connect(setup, &child_blob).unwrap();
    assert!(
        !child_segments[0].exists(),
        "sender did not unlink the segment after mapping"
    );
    send_stream(&mut send, seed, count).unwrap();
    let status = peer.child.wait().unwrap();
    assert!(status.success(), "child receiver failed: {status}");
}

fn kill(pid: u32) {
    // SAFETY: sending SIGKILL to our own child, whose pid we hold (not yet reaped).
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) }, 0);
}

/// SIGKILL the child sender mid-transfer: the parent drains what was posted, then its wait
/// fails with PeerDead naming the pid, long before the 60 s deadline. The child is not
/// reaped first (a zombie must count as dead).
#[test]
fn killed_sender_fails_the_receivers_wait_promptly() {
    let (step, seed) = (1024, 7);
    let shm = transport(step, Duration::from_secs(60));
    let mut peer = Peer::spawn("send", step, seed, u64::MAX, 0);
    let (setup, blob) = shm.recv_setup(spec()).unwrap();
    peer.give_blob(&blob);
    let mut recv = shm.recv_connect(setup, &peer.blob()).unwrap();
    recv_stream(&mut recv, seed, 100, Duration::ZERO).unwrap();
    let pid = peer.pid();
    kill(pid);
    let start = Instant::now();
    let mut drained = 0u64;
    let err = loop {
        match recv.recv_with(|_| ()) {
            Ok(()) => drained += 1,
            Err(e) => break e,
        }
    };
    let waited = start.elapsed();
    assert!(drained <= 8, "drained {drained} slices from an 8-slot ring");
    assert_eq!(
        err,
        ConnError::PeerDead {
            conn: recv.conn(),
            pid
        }
    );
    assert!(
        err.to_string()
            .contains(&format!("rank 1 (pid {pid}) has died")),
        "{err}"
    );
    assert!(
        waited < Duration::from_secs(5),
        "dead peer noticed after {waited:?}"
    );
    peer.child.wait().unwrap();
    assert!(segments_of(pid).is_empty());
}

/// SIGKILL a child receiver while the parent is blocked on credit: the send fails promptly.
#[test]
fn killed_receiver_fails_the_senders_wait_promptly() {
    let (step, seed) = (640, 9);
    let shm = transport(step, Duration::from_secs(60));
    let mut peer = Peer::spawn("recv", step, seed, u64::MAX, 1000);
    let (setup, blob) = shm.send_setup(spec()).unwrap();
    let child_blob = peer.blob();
    peer.give_blob(&blob);
    let mut send = shm.send_connect(setup, &child_blob).unwrap();
    send_stream(&mut send, seed, 20).unwrap();
    let pid = peer.pid();
    kill(pid);
    let start = Instant::now();
    let err = send_stream(&mut send, seed, u64::MAX).unwrap_err();
    assert_eq!(
        err,
        ConnError::PeerDead {
            conn: send.conn(),
            pid
        }
    );
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    peer.child.wait().unwrap();
}

/// A receiver killed between setup and connect leaves its segment's name behind; the sweep
/// keeps it while the creator lives and removes it once the creator is dead (a zombie here:
/// not reaped yet), leaving other files alone.
#[test]
fn sweep_removes_segments_of_dead_creators_only() {
    let mut peer = Peer::spawn("recv", 4096, 1, 1, 0);
    let _ = peer.blob();
    let pid = peer.pid();
    let left = segments_of(pid);
    assert_eq!(left.len(), 1, "{left:?}");
    let decoy = Path::new("/dev/shm").join(format!("weft-not-a-segment-{pid}"));
    std::fs::write(&decoy, b"x").unwrap();
    sweep_stale_segments(Path::new("/dev/shm"));
    assert!(left[0].exists(), "segment of a live process swept");
    kill(pid);
    // Wait until the kernel has made it a zombie.
    let start = Instant::now();
    while weft_runtime::conn::process_alive(pid) && start.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(sweep_stale_segments(Path::new("/dev/shm")) >= 1);
    let decoy_kept = decoy.exists();
    std::fs::remove_file(&decoy).ok();
    peer.child.wait().unwrap();
    assert!(!left[0].exists(), "segment of a dead process kept");
    assert!(decoy_kept);
}

/// A live sender that posts nothing: the receiver's wait ends at the deadline with an error
/// naming the transport, both ranks, the channel and the variable to raise.
#[test]
fn an_idle_peer_ends_in_a_timeout_naming_the_connection() {
    let shm = transport(4096, Duration::from_millis(300));
    let mut peer = Peer::spawn("idle", 4096, 0, 0, 0);
    let (setup, blob) = shm.recv_setup(spec()).unwrap();
    peer.give_blob(&blob);
    let mut recv = shm.recv_connect(setup, &peer.blob()).unwrap();
    peer.wait_for_line("CONNECTED"); // the child has mapped the segment
    let start = Instant::now();
    let err = recv.acquire().map(|_| ()).unwrap_err();
    let waited = start.elapsed();
    drop(peer.child.stdin.take());
    assert!(peer.child.wait().unwrap().success());
    assert!(matches!(err, ConnError::Timeout { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.starts_with("SHM recv connection rank 1 -> rank 0, channel 2: timed out"),
        "{text}"
    );
    assert!(text.contains("WEFT_CONN_TIMEOUT"), "{text}");
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
}

/// A /dev/shm too small for the segment: a clear error with both sizes and the docker hint.
/// Needs root to mount a 1 MiB tmpfs; elsewhere it checks the error text only.
#[test]
fn a_full_shm_filesystem_gives_a_clear_error() {
    let dir = std::env::temp_dir().join(format!("weft-tiny-shm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
        .arg(&dir)
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let shm = transport(1 << 20, Duration::from_secs(5)).with_dir(&dir);
    let result = shm.recv_setup(spec());
    if mounted {
        Command::new("umount").arg(&dir).status().unwrap();
    }
    std::fs::remove_dir_all(&dir).ok();
    let err = match result {
        Err(e) => e,
        Ok(_) if !mounted => {
            eprintln!("not root: no small tmpfs to fill; skipping the space check");
            return;
        }
        Ok(_) => panic!("8 MiB segment created in a 1 MiB tmpfs"),
    };
    let text = err.to_string();
    assert!(
        matches!(err, ShmError::NoSpace { need, .. } if need == 4096 + (8 << 20)),
        "{text}"
    );
    assert!(
        text.contains("MiB free, need 8.0 MiB") && text.contains("--shm-size"),
        "{text}"
    );
}

#[test]
fn shm_connects_ranks_of_one_host_only() {
    let shm = transport(4096, Duration::from_secs(5));
    let me = PeerInfo::local(0);
    let same_host = PeerInfo {
        rank: 1,
        pid: 1,
        ..me
    };
    let other_host = PeerInfo {
        host_hash: me.host_hash ^ 1,
        ..same_host
    };
    let other_container = PeerInfo {
        shm_dev: me.shm_dev ^ 1,
        ..same_host
    };
    assert!(shm.can_connect(&me, &same_host));
    assert!(!shm.can_connect(&me, &other_host));
    assert!(!shm.can_connect(&me, &other_container));
}
