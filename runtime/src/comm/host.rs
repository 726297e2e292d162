//! The host communicator: one rank's channels and point-to-point connections over host
//! memory, run by the CPU executor, and what happens when a call fails.
//!
//! Init is in `setup`, the collectives in `collectives`, send/receive groups in `p2p`;
//! this file holds the type, what it tells about itself, its lifecycle (barrier,
//! exchange, finalize) and its failure: any error in a call aborts the communicator (every
//! connection is marked aborted, so the peers fail within microseconds too) and later calls
//! return [`CommError::Failed`]. When a peer process of this host has died, the error
//! names it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::connect::{TransportKind, Transports};
use super::error::CommError;
use super::peers::Peer;
use crate::bootstrap::Bootstrap;
use crate::conn::{AbortFlag, AbortSource, ConnError, FifoRecvEnd, FifoSendEnd, process_alive};
use crate::exec::{ExecError, Executor, lock};
use crate::status::{QUERY_DEADLINE, StatusView};

/// One rank's communicator over host memory.
#[derive(Debug)]
pub struct HostComm {
    pub(super) rank: usize,
    pub(super) nranks: usize,
    // Dropped first: the connection ends, so that the transports below see them closed.
    pub(super) executor: Executor,
    pub(super) p2p: P2pConns,
    pub(super) transports: Transports,
    pub(super) peers: Vec<Peer>,
    pub(super) rings: Vec<Vec<u32>>,
    /// Transport of each channel's (send, recv) connection; `None` on a single rank.
    pub(super) channel_kinds: Vec<Option<(TransportKind, TransportKind)>>,
    pub(super) step_bytes: usize,
    pub(super) abort: AbortFlag,
    pub(super) failed: Option<String>,
    pub(super) bootstrap: Bootstrap,
    /// This rank's side of the health query.
    pub(super) status: StatusView,
}

/// The point-to-point connections built so far, by peer: built on first use, in a
/// handshake with that peer (`HostComm::group`).
#[derive(Debug, Default)]
pub(super) struct P2pConns {
    pub(super) send: HashMap<u32, Arc<Mutex<FifoSendEnd>>>,
    pub(super) recv: HashMap<u32, Arc<Mutex<FifoRecvEnd>>>,
}

impl P2pConns {
    /// Marks every connection aborted, so that a peer blocked in a send or receive with
    /// this rank fails at once.
    fn abort(&self) {
        for end in self.send.values() {
            lock(end).abort();
        }
        for end in self.recv.values() {
            lock(end).abort();
        }
    }

    /// Closes every connection.
    fn close(&mut self) {
        self.send.clear();
        self.recv.clear();
    }
}

impl HostComm {
    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn nranks(&self) -> usize {
        self.nranks
    }

    pub fn nchannels(&self) -> usize {
        self.rings.len()
    }

    /// The ring of each channel.
    pub fn rings(&self) -> &[Vec<u32>] {
        &self.rings
    }

    /// The transport of each channel's connections: (to the next rank, from the previous);
    /// `None` on a communicator of one rank, which has no connections.
    pub fn channel_transports(&self) -> &[Option<(TransportKind, TransportKind)>] {
        &self.channel_kinds
    }

    /// Bytes per FIFO step (the largest message one post carries).
    pub fn step_bytes(&self) -> usize {
        self.step_bytes
    }

    /// The pid of each rank.
    pub fn peer_pids(&self) -> Vec<u32> {
        self.peers.iter().map(|p| p.settings.pid).collect()
    }

    /// This rank's side of the health query (`crate::status`): ask every rank of the
    /// communicator what it is doing, from any thread, even while a call of this rank is
    /// stuck.
    pub fn status(&self) -> StatusView {
        self.status.clone()
    }

    /// A flag that aborts this communicator from any thread: every wait ends at its next
    /// check and the call in progress fails.
    pub fn abort_flag(&self) -> AbortFlag {
        self.abort.clone()
    }

    /// Waits until every rank has called it (over the bootstrap network).
    pub fn barrier(&mut self) -> Result<(), CommError> {
        self.usable()?;
        Ok(self.bootstrap.barrier()?)
    }

    /// Every rank's `mine`, by rank, over the bootstrap network (control data such as
    /// timings or host names; not for bulk data). Collective: every rank must call it.
    pub fn exchange(&mut self, mine: &[u8]) -> Result<Vec<Vec<u8>>, CommError> {
        self.usable()?;
        Ok(self.bootstrap.all_gather(mine)?)
    }

    /// Ends the communicator in step with the others (NCCL's `ncclCommFinalize`): closes
    /// every connection, then waits until every rank has closed its own, so that no
    /// transport sees a peer vanish while it still expects data. Collective; the
    /// communicator accepts no operation afterwards. Dropping without it is fine too: the
    /// peers then see connections closed at whatever point each was.
    pub fn finalize(&mut self) -> Result<(), CommError> {
        self.usable()?;
        self.executor.close_connections();
        self.p2p.close();
        self.failed = Some("the communicator was finalized".to_string());
        Ok(self.bootstrap.barrier()?)
    }

    /// The first failure, if any: a failed communicator takes no more calls.
    pub(super) fn usable(&self) -> Result<(), CommError> {
        match &self.failed {
            Some(first) => Err(CommError::Failed(first.clone())),
            None => Ok(()),
        }
    }

    /// Records a failure: names a dead peer of this host when there is one. Where the error
    /// only says that a neighbour gave up (it closed or aborted its end), the rank at the
    /// root of it may still be dying (a killed process takes a moment to exit): it is
    /// looked for a little longer, so that every rank names the dead one, not the neighbour
    /// that failed because of it.
    pub(super) fn failure(&mut self, err: ExecError) -> CommError {
        self.abort.abort();
        // The executor marked the ring connections aborted; the point-to-point ones too,
        // so that a peer blocked in a send or receive with us fails at once as well (before
        // the search below, which may take a moment).
        self.p2p.abort();
        let me = self.peers.get(self.rank).copied();
        // The neighbour that passed a failure on was alive when it did: if it has exited
        // since (its own error handled), another dead peer is the root, and is named first.
        let passed_on = cascades(&err);
        let passer = match &err {
            ExecError::Conn(e) if passed_on => Some(e.conn().peer as usize),
            _ => None,
        };
        let find_dead = || {
            let mut dead = self.peers.iter().enumerate().filter(|(r, p)| {
                *r != self.rank
                    && me.is_some_and(|m| m.same_host(p))
                    && !process_alive(p.settings.pid)
            });
            let first = dead.next()?;
            if Some(first.0) != passer {
                return Some(first);
            }
            Some(dead.next().unwrap_or(first))
        };
        let mut dead = find_dead();
        if dead.is_none() && passed_on {
            let deadline = Instant::now() + CASCADE_GRACE;
            while dead.is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(2));
                dead = find_dead();
            }
        }
        let timed_out = matches!(&err, ExecError::Conn(ConnError::Timeout { .. }));
        let err = match dead {
            Some((rank, p)) => CommError::PeerDied {
                rank,
                pid: p.settings.pid,
                cause: err,
            },
            // At a deadline, the whole job's picture: which rank holds it up.
            None if timed_out => {
                let report = self.status.query(QUERY_DEADLINE);
                log::error!(
                    "weft: rank {}: the job at this rank's deadline: {report}",
                    self.rank
                );
                CommError::Stuck {
                    cause: err,
                    holder: report.culprit().map(|c| (c.rank as usize, c.why)),
                }
            }
            // A neighbour gave up and no peer of this host died: ask the others where it
            // began (a peer on another host whose process is gone does not answer; one
            // whose own call failed first says so), so that every rank names the root of
            // it, not the neighbour that passed it on.
            None if passed_on => {
                let report = self.status.query(QUERY_DEADLINE);
                // An abort (SHM carries one) comes from a rank that was alive then: not the
                // root, even if it has exited since. (Over NET an abort is a closed
                // connection, as a death is: a survivor that exits within moments of its
                // own failure can then be taken for the root.)
                let report = match (&err, passer) {
                    (ExecError::Conn(ConnError::Aborted { .. }), Some(p)) => {
                        report.set_aside(p, "it aborted alive, passing a failure on")
                    }
                    _ => report,
                };
                let holder = report
                    .culprit()
                    .filter(|c| c.rank as usize != self.rank)
                    .map(|c| (c.rank as usize, c.why));
                match holder {
                    Some(holder) => CommError::Stuck {
                        cause: err,
                        holder: Some(holder),
                    },
                    None => CommError::Exec(err),
                }
            }
            None => CommError::Exec(err),
        };
        let text = err.to_string();
        // Where it began: not a neighbour's failure passed on, nor a deadline (a symptom:
        // the query names what held this rank up).
        self.status.board.failed(&text, !passed_on && !timed_out);
        self.failed.get_or_insert(text);
        err
    }
}

/// How long a failure that a neighbour passed on waits for the root of it (a dying peer
/// process of this host) to show.
const CASCADE_GRACE: Duration = Duration::from_millis(200);

/// Whether `err` only says that a neighbour gave up (closed or aborted its end of a
/// connection), or that a NET connection to it failed (its proxy saw the peer's end close,
/// most often because the peer's process is dying), not what went wrong first. A killed
/// peer's sockets close a moment before its process shows as gone: CI saw a NET failure
/// name no rank when the search below ran once (2026-11-28).
fn cascades(err: &ExecError) -> bool {
    matches!(
        err,
        ExecError::Conn(
            ConnError::PeerClosed { .. }
                | ConnError::Failed { .. }
                | ConnError::Aborted {
                    by: AbortSource::Peer,
                    ..
                }
        )
    )
}

impl Drop for HostComm {
    fn drop(&mut self) {
        if self.failed.is_some() {
            self.executor.abort_connections();
        }
    }
}
