//! The process's status server: one thread listening on a TCP port of the bootstrap's
//! interface, started with the first communicator, answering the health query for every
//! rank of this process (`wire` has the format). It only reads the boards, under their
//! locks for microseconds, so it answers while the ranks' threads wait; a process that is
//! stopped (SIGSTOP) or dead does not answer, which is what the query reports.
//!
//! The address is written to `<runtime dir>/weft-status/<pid>` (`$XDG_RUNTIME_DIR`, else
//! `/tmp/weft-status-<uid>`), so that `weft status` on a host finds its processes without
//! being told where, and logged at `NCCL_DEBUG=INFO`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::time::Duration;

use super::board::Board;
use super::wire;

/// How long the server gives a client to send its request.
const REQUEST_DEADLINE: Duration = Duration::from_secs(2);

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
/// address). An error (no port could be bound) is the caller's to log: the query is a
/// diagnostic, never a reason for a communicator to fail.
pub fn start(ip: IpAddr) -> Result<SocketAddr, String> {
    static SERVER: OnceLock<Result<SocketAddr, String>> = OnceLock::new();
    SERVER
        .get_or_init(|| {
            let listener = TcpListener::bind((ip, 0))
                .map_err(|e| format!("the status server could not listen on {ip}: {e}"))?;
            let addr = listener
                .local_addr()
                .map_err(|e| format!("the status server's address: {e}"))?;
            std::thread::Builder::new()
                .name("weft-status".to_string())
                .spawn(move || serve(listener))
                .map_err(|e| format!("the status server's thread: {e}"))?;
            let dir = discovery_dir();
            let file = dir.join(std::process::id().to_string());
            if let Err(e) =
                std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&file, addr.to_string()))
            {
                log::debug!(
                    "weft: status server: could not write {}: {e}",
                    file.display()
                );
            }
            log::info!("weft: status of this process's ranks at {addr} (weft status {addr})");
            Ok(addr)
        })
        .clone()
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
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        // One client at a time, each bounded by the request deadline: a query is rare and
        // small, and a client that says nothing cannot hold the server for long.
        if let Err(e) = answer(stream) {
            log::debug!("weft: status server: {e}");
        }
    }
}

fn answer(stream: TcpStream) -> std::io::Result<()> {
    stream.set_read_timeout(Some(REQUEST_DEADLINE))?;
    stream.set_write_timeout(Some(REQUEST_DEADLINE))?;
    let mut line = String::new();
    BufReader::new(&stream).take(256).read_line(&mut line)?;
    let want = line
        .trim()
        .strip_prefix(wire::REQUEST)
        .map(str::trim)
        .ok_or_else(|| std::io::Error::other(format!("not a status request: {line:?}")))?;
    let want = match want {
        "*" | "" => None,
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
    let mut out = &stream;
    for l in lines {
        writeln!(out, "{l}")?;
    }
    writeln!(out, "{}", wire::END)?;
    out.flush()
}
