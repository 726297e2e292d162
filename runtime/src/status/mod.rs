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

pub use board::{Board, CallDesc, CallGuard, RankReport, WaitDesc, WaitGuard, host_name};
pub use report::{Culprit, JobReport, Line, STUCK_AFTER, ask, query};
pub use server::{discovery_dir, register, start};

use std::sync::Arc;
use std::time::Duration;

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
