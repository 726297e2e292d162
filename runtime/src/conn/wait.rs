//! Waiting for the other side: spin, then yield, then sleep, always with a way out.
//!
//! Host ranks are often oversubscribed (8 ranks on 2 cores in CI), so a waiter that spins
//! for long steals the very core its peer needs to make progress. The schedule is: a short
//! spin (the peer is running and posts within a microsecond or two), a few `yield_now`s
//! (hand the core to a runnable peer), then sleeps doubling from 2 us up to
//! `max_sleep`. Every iteration checks the local [`AbortFlag`] and the connection's shared
//! abort word; after the spin phase, the deadline; and every `liveness_every`, whether the
//! peer's process still exists.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use weft_config::TransportSettings;

/// One flag for everything a communicator is doing: set it and every wait on every
/// connection that shares it returns [`ConnError::Aborted`](super::ConnError::Aborted)
/// at its next check (microseconds while spinning, at most `max_sleep` while sleeping).
#[derive(Debug, Clone, Default)]
pub struct AbortFlag(Arc<AtomicBool>);

impl AbortFlag {
    pub fn new() -> Self {
        Self::default()
    }

    /// Ends every wait sharing this flag. Never cleared: a communicator that aborted is done.
    pub fn abort(&self) {
        // Release pairs with the Acquire in `is_aborted`: whatever the aborting thread
        // recorded (its error) is visible to a waiter that sees the flag.
        self.0.store(true, Ordering::Release);
    }

    pub fn is_aborted(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// The default deadline: PyTorch's default process-group timeout. Long enough for a rank that
/// is merely late to the collective; dead peers are found much sooner by the liveness check.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// How a blocked operation waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitPolicy {
    /// Give up (with [`ConnError::Timeout`](super::ConnError::Timeout)) after this long.
    pub timeout: Duration,
    /// Busy polls before the first yield.
    pub spins: u32,
    /// `yield_now` polls before the first sleep.
    pub yields: u32,
    /// Upper bound of the doubling sleeps: also the worst-case latency of noticing data or
    /// an abort once a wait is deep in its sleep phase.
    pub max_sleep: Duration,
    /// How often a long wait checks that the peer process still exists.
    pub liveness_every: Duration,
}

impl Default for WaitPolicy {
    fn default() -> Self {
        WaitPolicy {
            timeout: DEFAULT_TIMEOUT,
            spins: 256,
            yields: 64,
            max_sleep: Duration::from_micros(500),
            liveness_every: Duration::from_millis(100),
        }
    }
}

impl WaitPolicy {
    /// The default policy with the deadline of a transport built on its own
    /// (`WEFT_CONN_TIMEOUT`).
    pub fn from_settings(settings: &TransportSettings) -> Self {
        WaitPolicy::default().with_timeout(settings.conn_timeout)
    }

    /// A policy with another deadline.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }
}

/// The escalating pause between polls; `pause` returns what the caller should check next.
#[derive(Debug)]
pub(crate) struct Backoff {
    policy: WaitPolicy,
    polls: u32,
    sleep: Duration,
    /// Set when the spin phase ends: the clock is read only by waits that are not short.
    started: Option<Instant>,
    next_liveness: Option<Instant>,
}

/// What a pause found due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Due {
    Nothing,
    /// The deadline passed, after this long.
    Deadline(Duration),
    /// Time to check that the peer is alive.
    Liveness,
}

impl Backoff {
    pub(crate) fn new(policy: WaitPolicy) -> Self {
        Backoff {
            policy,
            polls: 0,
            sleep: Duration::from_micros(2),
            started: None,
            next_liveness: None,
        }
    }

    /// Whether the wait is still in its spin phase.
    pub(crate) fn spinning(&self) -> bool {
        self.polls < self.policy.spins
    }

    /// Polls made so far.
    pub(crate) fn polls(&self) -> u32 {
        self.polls
    }

    /// Ends the spin phase now: the next pauses yield (the peer shares this CPU, so spinning
    /// only delays it).
    pub(crate) fn stop_spinning(&mut self) {
        self.polls = self.polls.max(self.policy.spins);
    }

    pub(crate) fn pause(&mut self) -> Due {
        self.polls = self.polls.saturating_add(1);
        if self.polls <= self.policy.spins {
            std::hint::spin_loop();
            return Due::Nothing;
        }
        let now = Instant::now();
        let started = *self.started.get_or_insert(now);
        let waited = now.saturating_duration_since(started);
        if waited >= self.policy.timeout {
            return Due::Deadline(waited);
        }
        if self.polls <= self.policy.spins.saturating_add(self.policy.yields) {
            std::thread::yield_now();
        } else {
            // Never sleep past the deadline by more than one short sleep.
            let left = self.policy.timeout.saturating_sub(waited);
            std::thread::sleep(self.sleep.min(left));
            self.sleep = (self.sleep.saturating_mul(2)).min(self.policy.max_sleep);
        }
        let next = *self
            .next_liveness
            .get_or_insert(now + self.policy.liveness_every);
        if now >= next {
            self.next_liveness = Some(now + self.policy.liveness_every);
            return Due::Liveness;
        }
        Due::Nothing
    }
}

/// The CPU this thread runs on, plus one (0 if the kernel does not say): what a waiter
/// publishes so that its peer can tell when they share a CPU.
pub(crate) fn this_cpu() -> u32 {
    // SAFETY: sched_getcpu takes nothing and only returns a number (vDSO, no side effects).
    let cpu = unsafe { libc::sched_getcpu() };
    u32::try_from(cpu).map_or(0, |c| c.saturating_add(1))
}

/// The inode of this process's pid namespace (0 if /proc does not say): two pids are only
/// comparable when their namespaces match.
pub fn pid_namespace() -> u64 {
    use std::os::unix::fs::MetadataExt;
    static NS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *NS.get_or_init(|| std::fs::metadata("/proc/self/ns/pid").map_or(0, |m| m.ino()))
}

/// Whether process `pid` still exists and is not a zombie. A zombie counts as dead: a rank
/// whose parent (the launcher) has not reaped it yet will never post again. Our own pid is
/// always alive; a process we may not signal (EPERM) exists.
pub fn process_alive(pid: u32) -> bool {
    if pid == std::process::id() {
        return true;
    }
    let Ok(raw) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if raw <= 0 {
        // kill(0 or negative) would address process groups: never a peer.
        return false;
    }
    // SAFETY: signal 0 performs only the existence and permission checks; nothing is sent.
    let rc = unsafe { libc::kill(raw, 0) };
    if rc != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
        return false;
    }
    // kill succeeds on zombies: read the state letter after the command name's last ')'.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_none_or(|state| state != 'Z' && state != 'X'),
        Err(e) => e.kind() != std::io::ErrorKind::NotFound,
    }
}
