//! The job health query (issue 26, item 3): while a job runs, ask every rank of a
//! communicator what it is doing, and name the rank that holds the others up.
//!
//! NCCL users' most common complaint is a hang with no way to find the rank at fault (NCCL
//! answered with its RAS query in 2.24). Here each rank keeps a [`Board`]: the calls it
//! began and completed, the call in progress, and every wait on a peer that has outlasted
//! its spin phase (channel, peer, data or credit, for how long). Each process runs one
//! status server (`server`) on the bootstrap's interface; at init the ranks of a
//! communicator exchange their servers' addresses, so any of them, or `weft status` from
//! any host, can ask all of them at once ([`query`]): a rank whose process does not answer
//! within the deadline (stopped, dead, hung outside weft) is named first, then one that
//! failed, one that has not begun the call the others are in, one the others wait on.
//! A rank whose wait reaches its deadline runs the query before it reports the timeout, so
//! its error comes with the whole job's picture.

mod board;
mod report;
mod server;
mod wire;

pub use board::{Board, CallDesc, CallGuard, Probe, RankReport, WaitDesc, WaitGuard, host_name};
pub use report::{Culprit, JobReport, Line, STUCK_AFTER, ask, query};
pub use server::{discovery_dir, local_servers, register, start};

use std::sync::Arc;
use std::time::Duration;

use crate::bootstrap::{Bootstrap, BootstrapError};

/// How long the query waits for each process: the bar is a stopped rank named
/// within 2 seconds.
pub const QUERY_DEADLINE: Duration = Duration::from_millis(1500);

/// One rank's side of the query: its board and every rank's status address, which
/// [`StatusView::query`] asks. Cheap to clone; usable from any thread while the
/// communicator is in a call.
#[derive(Debug, Clone)]
pub struct StatusView {
    pub board: Arc<Board>,
    pub members: Vec<String>,
}

impl StatusView {
    /// This rank's board and the members' addresses, after the communicator's ranks
    /// exchanged them (`members[r]`: rank r's status server; empty where it has none).
    pub fn new(board: Arc<Board>, members: Vec<String>) -> StatusView {
        register(&board, members.clone());
        StatusView { board, members }
    }

    /// Asks every rank of the communicator (see [`query`]).
    pub fn query(&self, deadline: Duration) -> JobReport {
        query(self.board.comm, &self.members, deadline)
    }
}

/// This rank's side of the health query (`crate::status`): the process's status server
/// (started with its first communicator, on the bootstrap's interface), a board for this
/// rank, and every rank's server address; the communicator's id is rank 0's random number.
/// A server that cannot start costs a warning, never the communicator.
pub fn join(
    bootstrap: &mut Bootstrap,
    rank: usize,
    nranks: usize,
) -> Result<StatusView, BootstrapError> {
    let id = if rank == 0 {
        let secret = crate::bootstrap::random_secret()?;
        u64::from_le_bytes(secret[..8].try_into().unwrap_or_default())
    } else {
        0
    };
    let addr = match start(bootstrap.listen_addr().ip()) {
        Ok(Some(a)) => a.to_string(),
        Ok(None) => String::new(),
        Err(e) => {
            log::warn!("weft: {e}; the health query (weft status) will not reach rank {rank}");
            String::new()
        }
    };
    let mut blob = id.to_be_bytes().to_vec();
    blob.extend_from_slice(addr.as_bytes());
    let all = bootstrap.all_gather_for(&blob, "init's all_gather of the status servers")?;
    let comm = all
        .first()
        .and_then(|b| b.get(..8))
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_be_bytes);
    let members = all
        .iter()
        .map(|b| String::from_utf8_lossy(b.get(8..).unwrap_or_default()).into_owned())
        .collect();
    let board = Board::new(comm, rank as u32, nranks as u32);
    Ok(StatusView::new(board, members))
}
