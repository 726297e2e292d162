//! Reading and writing bootstrap frames on a TCP stream, every wait bounded by a deadline
//! and interruptible by a stop flag.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use weft_core::wire::ParseError;
use weft_core::wire::bootstrap::{
    FrameKind, HEADER_LEN, HeaderRepr, HeaderView, HelloRepr, MAX_BODY_LEN,
};

/// How often a blocked read looks at the stop flag.
const POLL: Duration = Duration::from_millis(50);
/// How long past its deadline a read may go on while bytes keep arriving.
const HARD_STOP: Duration = Duration::from_millis(500);

/// Whether a socket call with a timeout ended without its data only because the timeout
/// ran out or a signal came: the caller checks its own deadline and tries again.
pub(crate) fn timed_out_or_interrupted(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

/// Why reading a frame did not produce one.
#[derive(Debug)]
pub(crate) enum ReadFail {
    /// The deadline passed.
    Timeout,
    /// The peer closed the connection (EOF).
    Closed,
    /// The stop flag was raised.
    Stopped,
    /// The socket failed (reset, ...).
    Io(io::Error),
    /// The bytes are not a valid frame.
    Parse(ParseError),
}

/// Reads exactly `buf.len()` bytes, giving up at `deadline` or, with a deadline, soon after
/// `stop` is set.
fn read_exact(
    stream: &mut TcpStream,
    buf: &mut [u8],
    deadline: Option<Instant>,
    stop: &AtomicBool,
) -> Result<(), ReadFail> {
    let mut filled = 0;
    while filled < buf.len() {
        if stop.load(Ordering::Acquire) {
            return Err(ReadFail::Stopped);
        }
        // Without a deadline the read blocks until data, EOF, or the owner shuts the socket
        // down (that is how a bootstrap being dropped wakes its reader threads). With one,
        // a passed deadline still allows a last short read: bytes already here (the rest of
        // a frame whose header we have) are taken, not left to desynchronise the stream.
        let slice = deadline.map(|at| {
            at.saturating_duration_since(Instant::now())
                .clamp(Duration::from_millis(1), POLL)
        });
        stream.set_read_timeout(slice).map_err(ReadFail::Io)?;
        let Some(rest) = buf.get_mut(filled..) else {
            break;
        };
        let progressed = match stream.read(rest) {
            Ok(0) => return Err(ReadFail::Closed),
            Ok(n) => {
                filled += n;
                true
            }
            Err(e) if timed_out_or_interrupted(&e) => false,
            Err(e) => return Err(ReadFail::Io(e)),
        };
        // Past the deadline: stop once the bytes stop coming, and a little later in any
        // case (a peer trickling bytes must not hold us forever).
        if let Some(at) = deadline {
            let now = Instant::now();
            if now >= at && (!progressed || now >= at + HARD_STOP) && filled < buf.len() {
                return Err(ReadFail::Timeout);
            }
        }
    }
    Ok(())
}

/// Reads one frame whose body is at most `max_body` bytes.
pub(crate) fn read_frame(
    stream: &mut TcpStream,
    deadline: Option<Instant>,
    stop: &AtomicBool,
    max_body: u32,
) -> Result<(HeaderRepr, Vec<u8>), ReadFail> {
    let mut head = [0u8; HEADER_LEN];
    read_exact(stream, &mut head, deadline, stop)?;
    let header = HeaderView::new_checked(&head)
        .map(|v| HeaderRepr::parse(&v))
        .map_err(ReadFail::Parse)?;
    if header.length > max_body.min(MAX_BODY_LEN) {
        return Err(ReadFail::Parse(ParseError::TooMany {
            field: "frame body length",
            count: header.length as usize,
            max: max_body as usize,
        }));
    }
    let mut body = vec![0u8; header.length as usize];
    read_exact(stream, &mut body, deadline, stop)?;
    Ok((header, body))
}

/// Writes one frame (header and body in one write, so small frames leave in one segment).
pub(crate) fn write_frame(
    stream: &mut TcpStream,
    kind: FrameKind,
    rank: u32,
    tag: u32,
    body: &[u8],
    timeout: Duration,
) -> io::Result<()> {
    let length = u32::try_from(body.len())
        .ok()
        .filter(|&l| l <= MAX_BODY_LEN)
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "bootstrap message of {} bytes exceeds the {MAX_BODY_LEN}-byte limit",
                    body.len()
                ),
            )
        })?;
    let header = HeaderRepr {
        kind,
        rank,
        tag,
        length,
    }
    .to_bytes()
    .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
    stream.set_write_timeout(Some(timeout.max(Duration::from_millis(1))))?;
    if body.len() <= 64 * 1024 {
        let mut frame = Vec::with_capacity(HEADER_LEN + body.len());
        frame.extend_from_slice(&header);
        frame.extend_from_slice(body);
        stream.write_all(&frame)
    } else {
        stream.write_all(&header)?;
        stream.write_all(body)
    }
}

/// Writes a `Hello` frame: the secret and what this connection is for.
pub(crate) fn write_hello(
    stream: &mut TcpStream,
    rank: u32,
    hello: &HelloRepr,
    timeout: Duration,
) -> io::Result<()> {
    let mut body = [0u8; weft_core::wire::bootstrap::HELLO_LEN];
    hello
        .emit(&mut body)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
    write_frame(stream, FrameKind::Hello, rank, 0, &body, timeout)
}

/// Connects to `addr`, retrying refused or unreachable attempts until `deadline`, so that
/// ranks may start in any order. Returns the last error when the deadline passes, or at
/// once when `stop` goes up (looked at between attempts of at most a second, and while
/// waiting between them).
pub(crate) fn connect_retry(
    addr: SocketAddr,
    deadline: Instant,
    stop: &AtomicBool,
) -> Result<TcpStream, (Duration, io::Error)> {
    let start = Instant::now();
    let mut backoff = Duration::from_millis(10);
    let stopped = || io::Error::new(io::ErrorKind::Interrupted, "stopped while connecting");
    loop {
        if stop.load(Ordering::Acquire) {
            return Err((start.elapsed(), stopped()));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let attempt = if left.is_zero() {
            Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "deadline passed before connecting",
            ))
        } else {
            TcpStream::connect_timeout(&addr, left.min(Duration::from_secs(1)))
        };
        match attempt {
            Ok(stream) => {
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Err(e) => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() || stop.load(Ordering::Acquire) {
                    return Err((start.elapsed(), e));
                }
                log::trace!("bootstrap: connect to {addr} failed ({e}); retrying");
                let until = Instant::now() + backoff.min(left);
                while Instant::now() < until {
                    if stop.load(Ordering::Acquire) {
                        return Err((start.elapsed(), stopped()));
                    }
                    thread::sleep(POLL.min(until.saturating_duration_since(Instant::now())));
                }
                backoff = (backoff * 2).min(Duration::from_millis(500));
            }
        }
    }
}
