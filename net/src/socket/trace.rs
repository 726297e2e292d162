//! Per-message timestamps for finding where a connection's time goes
//! (`WEFT_SOCKET_TRACE=<directory>`; off by default and then free).
//!
//! Each end of each connection records, per message, when it was posted, when its bytes were
//! all handed to (or taken from) the kernel, and when `test` reported it done; the receiver
//! also records when the message's data frame was matched to a posted buffer. Times are
//! `CLOCK_MONOTONIC` nanoseconds, which every process of a host shares, and both ends number
//! messages the same way and carry the connection's id, so the two ends' files line up:
//! `scripts/socket_trace.py <directory>` prints where each message spent its time.
//!
//! On close, an end writes `<directory>/weft-trace-<pid>-<connection id>-<send|recv>.tsv`:
//! lines `seq event ns bytes` (bytes 0 where not known; events `P`osted, `M`atched,
//! `H`anded over, `D`one), then `# <isend|irecv|test> calls <n> ns <total>`: how often the
//! caller (NCCL's proxy) called in, and how long it spent inside. At most [`MAX_EVENTS`]
//! events are kept per end; later ones are dropped.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::sys;

/// Events kept per connection end (about 48 MiB at most).
pub(super) const MAX_EVENTS: usize = 2 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Event {
    /// `isend` / `irecv` accepted the request.
    Posted,
    /// Receiver: the message's data frame was matched to a posted buffer.
    Matched,
    /// The last byte was handed to the kernel (send) or taken from it (receive).
    Handed,
    /// `test` reported the request done.
    Done,
}

impl Event {
    fn letter(self) -> char {
        match self {
            Event::Posted => 'P',
            Event::Matched => 'M',
            Event::Handed => 'H',
            Event::Done => 'D',
        }
    }
}

/// The entry points whose time inside the plugin is summed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Call {
    Isend,
    Irecv,
    Test,
}

impl Call {
    const ALL: [Call; 3] = [Call::Isend, Call::Irecv, Call::Test];

    fn name(self) -> &'static str {
        match self {
            Call::Isend => "isend",
            Call::Irecv => "irecv",
            Call::Test => "test",
        }
    }
}

/// One connection end's recorder.
#[derive(Debug)]
pub(super) struct Trace {
    dir: PathBuf,
    conn_id: u64,
    send: bool,
    events: Vec<(u64, Event, u64, u64)>,
    /// Per [`Call`]: how many calls, and nanoseconds spent inside them.
    calls: [(u64, u64); 3],
}

impl Trace {
    /// A recorder that writes into `dir` on close.
    pub fn new(dir: &Path, conn_id: u64, send: bool) -> Trace {
        Trace {
            dir: dir.to_path_buf(),
            conn_id,
            send,
            events: Vec::with_capacity(4096),
            calls: [(0, 0); 3],
        }
    }

    /// Records `event` of message `seq` at `ns`, with the message's size where known (else 0).
    pub fn record(&mut self, seq: u64, event: Event, ns: u64, bytes: u64) {
        if self.events.len() < MAX_EVENTS {
            self.events.push((seq, event, ns, bytes));
        }
    }

    pub fn now(&mut self, seq: u64, event: Event, bytes: u64) {
        self.record(seq, event, sys::monotonic_ns(), bytes);
    }

    /// Counts one call of `call` that took `ns`.
    pub fn count(&mut self, call: Call, ns: u64) {
        let i = call as usize;
        if let Some((calls, total)) = self.calls.get_mut(i) {
            *calls += 1;
            *total += ns;
        }
    }

    /// Writes the file; a failure is logged, not returned (tracing must not fail a job).
    pub fn write(&mut self) {
        let name = format!(
            "weft-trace-{}-{:016x}-{}.tsv",
            std::process::id(),
            self.conn_id,
            if self.send { "send" } else { "recv" }
        );
        let path = self.dir.join(name);
        let result = (|| -> std::io::Result<()> {
            let mut out = std::io::BufWriter::new(std::fs::File::create(&path)?);
            for (seq, event, ns, bytes) in &self.events {
                writeln!(out, "{seq}\t{}\t{ns}\t{bytes}", event.letter())?;
            }
            for (call, (calls, ns)) in Call::ALL.iter().zip(self.calls) {
                writeln!(out, "# {} calls {calls} ns {ns}", call.name())?;
            }
            out.flush()
        })();
        match result {
            Ok(()) => log::info!(
                "NET/Socket: wrote {} trace events to {}",
                self.events.len(),
                path.display()
            ),
            Err(e) => log::warn!(
                "NET/Socket: could not write the trace {}: {e} (WEFT_SOCKET_TRACE)",
                path.display()
            ),
        }
        self.events.clear();
    }
}
