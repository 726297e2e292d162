//! The process's status server: one thread listening on a TCP port of the bootstrap's
//! interface, started with the first communicator, answering the health query for every
//! rank of this process (`wire` has the format). Each client is served on a thread of its
//! own (at most [`MAX_CLIENTS`] at once; more are turned away), within [`CLIENT_DEADLINE`]
//! for the whole exchange, so a client that connects and says nothing, or reads slowly,
//! holds up no one else. It only reads the boards, under their locks for microseconds, so it
//! answers while the ranks' threads wait; a process that is stopped (SIGSTOP) or dead does
//! not answer, which is what the query reports.
//!
//! Who may ask what: a request for every communicator of the process (`*`, what `weft
//! status` sends to a process of its own host) is answered only to a client of this host
//! (on loopback, or from the very address it connected to); from elsewhere a request must
//! name a communicator's id, a random number only its ranks learn at init. `WEFT_STATUS=0` starts no server at all.
//!
//! The address is written to `<runtime dir>/weft-status/<pid>` (`$XDG_RUNTIME_DIR`, else
//! `/tmp/weft-status-<uid>`, made with mode 0700 and refused when another user owns it or it
//! is a symlink), through a temporary file renamed into place; files of processes that are
//! gone are removed when a server starts. `weft status` on a host finds its processes there.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::time::{Duration, Instant};

use super::board::Board;
use super::wire;

/// The most clients served at once; one more is turned away at once.
pub const MAX_CLIENTS: usize = 16;
/// The time a client has for its whole exchange (request and answer), well inside the
/// query's own deadline.
pub const CLIENT_DEADLINE: Duration = Duration::from_millis(500);

struct Registered {
    board: Weak<Board>,
    members: Vec<String>,
}

fn registry() -> &'static Mutex<Vec<Registered>> {
    static BOARDS: Mutex<Vec<Registered>> = Mutex::new(Vec::new());
    &BOARDS
}

/// The directory where each process with a status server leaves its address.
pub fn discovery_dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        Some(d) => PathBuf::from(d).join("weft-status"),
        // SAFETY: getuid has no preconditions and cannot fail.
        None => std::env::temp_dir().join(format!("weft-status-{}", unsafe { libc::getuid() })),
    }
}

/// Starts this process's server on `ip` (the first call decides; later calls return its
/// address); `None` when `WEFT_STATUS=0`. An error (no port could be bound) is the caller's
/// to log: the query is a diagnostic, never a reason for a communicator to fail.
pub fn start(ip: IpAddr) -> Result<Option<SocketAddr>, String> {
    static SERVER: OnceLock<Result<Option<SocketAddr>, String>> = OnceLock::new();
    SERVER
        .get_or_init(|| {
            if !crate::config::Settings::from_env_or_defaults().debug.status {
                return Ok(None);
            }
            let listener = TcpListener::bind((ip, 0))
                .map_err(|e| format!("the status server could not listen on {ip}: {e}"))?;
            let addr = listener
                .local_addr()
                .map_err(|e| format!("the status server's address: {e}"))?;
            std::thread::Builder::new()
                .name("weft-status".to_string())
                .spawn(move || serve(listener))
                .map_err(|e| format!("the status server's thread: {e}"))?;
            if let Err(e) = publish(&discovery_dir(), addr) {
                log::debug!("weft: status server: not listed for weft status: {e}");
            }
            log::info!("weft: status of this process's ranks at {addr} (weft status {addr})");
            Ok(Some(addr))
        })
        .clone()
}

/// Writes this process's address into `dir` (see the module documentation), removing the
/// files of processes that are gone.
fn publish(dir: &Path, addr: SocketAddr) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true).mode(0o700);
    builder.create(dir)?;
    let meta = std::fs::symlink_metadata(dir)?;
    // SAFETY: getuid has no preconditions and cannot fail.
    let me = unsafe { libc::getuid() };
    if !meta.is_dir() || meta.uid() != me {
        return Err(std::io::Error::other(format!(
            "{} is not a directory of this user's",
            dir.display()
        )));
    }
    listed(dir);
    let pid = std::process::id();
    let tmp = dir.join(format!(".{pid}.tmp"));
    let _ = std::fs::remove_file(&tmp);
    // create_new: never through a file or symlink someone left there.
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)?;
    f.write_all(addr.to_string().as_bytes())?;
    std::fs::rename(&tmp, dir.join(pid.to_string()))
}

/// The status servers of this user's live weft processes on this host (`weft status`
/// without an address asks them).
pub fn local_servers() -> Vec<String> {
    listed(&discovery_dir())
}

/// The addresses `dir` lists for live processes; the files of processes that are gone are
/// removed.
fn listed(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if !crate::conn::process_alive(pid) {
            let _ = std::fs::remove_file(e.path());
        } else if let Ok(addr) = std::fs::read_to_string(e.path()) {
            out.push(addr.trim().to_string());
        }
    }
    out
}

/// Shows `board` to the health query, with every rank's status address (`members`, by
/// rank), for as long as the board lives.
pub fn register(board: &Arc<Board>, members: Vec<String>) {
    let mut boards = registry().lock().unwrap_or_else(PoisonError::into_inner);
    boards.retain(|r| r.board.strong_count() > 0);
    boards.push(Registered {
        board: Arc::downgrade(board),
        members,
    });
}

fn serve(listener: TcpListener) {
    let busy = Arc::new(AtomicUsize::new(0));
    for stream in listener.incoming() {
        let stream = match stream {
            Ok(s) => s,
            Err(e) => {
                // Out of descriptors, say: do not spin on it.
                log::debug!("weft: status server: accept: {e}");
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        if busy.fetch_add(1, Ordering::AcqRel) >= MAX_CLIENTS {
            busy.fetch_sub(1, Ordering::AcqRel);
            continue;
        }
        let done = Arc::clone(&busy);
        let spawned = std::thread::Builder::new()
            .name("weft-status-client".to_string())
            .spawn(move || {
                if let Err(e) = answer(stream) {
                    log::debug!("weft: status server: {e}");
                }
                done.fetch_sub(1, Ordering::AcqRel);
            });
        if spawned.is_err() {
            busy.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Sets `stream`'s timeouts to what is left of `deadline`; an error once it has passed.
fn time_left(stream: &TcpStream, deadline: Instant) -> std::io::Result<()> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "the client's time is up",
        ));
    }
    stream.set_read_timeout(Some(left))?;
    stream.set_write_timeout(Some(left))
}

fn answer(stream: TcpStream) -> std::io::Result<()> {
    let deadline = Instant::now() + CLIENT_DEADLINE;
    // A client of this host: on loopback, or coming from the address it reached us on.
    let local_client = match (stream.peer_addr(), stream.local_addr()) {
        (Ok(peer), Ok(me)) => peer.ip().is_loopback() || peer.ip() == me.ip(),
        _ => false,
    };
    let mut request = Vec::new();
    let mut reader = BufReader::new(&stream).take(256);
    loop {
        time_left(&stream, deadline)?;
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            break;
        }
        let (chunk, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (&buf[..=i], true),
            None => (buf, false),
        };
        request.extend_from_slice(chunk);
        let n = chunk.len();
        reader.consume(n);
        if done {
            break;
        }
    }
    let line = String::from_utf8_lossy(&request);
    let want = line
        .trim()
        .strip_prefix(wire::REQUEST)
        .map(str::trim)
        .ok_or_else(|| std::io::Error::other(format!("not a status request: {line:?}")))?;
    let want = match want {
        "*" | "" if local_client => None,
        "*" | "" => {
            return Err(std::io::Error::other(
                "a request for every communicator from another host: refused",
            ));
        }
        hex => Some(
            u64::from_str_radix(hex, 16)
                .map_err(|_| std::io::Error::other(format!("bad communicator {hex:?}")))?,
        ),
    };
    let lines: Vec<String> = {
        let boards = registry().lock().unwrap_or_else(PoisonError::into_inner);
        boards
            .iter()
            .filter_map(|r| Some((r.board.upgrade()?, &r.members)))
            .filter(|(b, _)| want.is_none_or(|c| c == b.comm))
            .map(|(b, members)| wire::encode(&b.report(), members))
            .collect()
    };
    let mut out = String::new();
    for l in lines {
        out.push_str(&l);
        out.push('\n');
    }
    out.push_str(wire::END);
    out.push('\n');
    time_left(&stream, deadline)?;
    (&stream).write_all(out.as_bytes())?;
    (&stream).flush()
}
