//! Host FIFO connections: the step/credit protocol of `weft_core::fifo` over memory that two
//! parties share.
//!
//! The SHM transport puts a connection's memory in a file under /dev/shm mapped by two
//! processes; the NET transport keeps it in one process, with the proxy thread as the other
//! end. Either way the memory is a [`FifoRegion`] (header of counters, then the slots, see
//! [`layout`]) and each party holds one end:
//!
//! - [`FifoSendEnd`]: `acquire` (wait for credit) -> [`SendSlot`] -> write `buf()` -> `post(bytes)`;
//! - [`FifoRecvEnd`]: `acquire` (wait for data) -> [`RecvSlot`] -> read `data()` -> `release()`.
//!
//! - LL (`ll_send` / `ll_recv`, [`ll`]): small messages as 8-byte lines of data and flag in
//!   the connection's LL buffer, no tail.
//!
//! `try_acquire` never blocks (for a proxy thread that polls many connections). Blocking waits
//! end on data, on the shared [`AbortFlag`], on the peer closing, aborting or dying, or on the
//! [`WaitPolicy`] deadline, each with a [`ConnError`] that names the connection.
//!
//! ```
//! use weft_runtime::conn::{ConnId, Direction, FifoLayout, Waiter, local_pair};
//!
//! let conn = ConnId { transport: "local", rank: 0, peer: 1, channel: 0, dir: Direction::Send };
//! let (mut send, mut recv) = local_pair(FifoLayout::default(), conn, Waiter::default())?;
//! let producer = std::thread::spawn(move || -> Result<(), weft_runtime::conn::ConnError> {
//!     for i in 0..100u32 {
//!         let mut slot = send.acquire()?; // waits for credit
//!         slot.buf()[..4].copy_from_slice(&i.to_le_bytes());
//!         slot.post(4)?; // size, then tail (Release)
//!     }
//!     Ok(())
//! });
//! for i in 0..100u32 {
//!     let slot = recv.acquire()?; // waits for data (tail, Acquire)
//!     assert_eq!(slot.data(), &i.to_le_bytes()[..]);
//!     slot.release()?; // credit back (head, Release)
//! }
//! producer.join().unwrap()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod endpoint;
mod error;
pub mod layout;
pub mod ll;
mod memory;
mod region;
mod wait;

#[cfg(test)]
mod ll_test;
#[cfg(test)]
mod test;

pub use endpoint::{FifoRecvEnd, FifoSendEnd, RecvSlot, SendSlot, Waiter};
pub use error::{AbortSource, ConnError, ConnId, Direction, WaitFor};
pub use layout::{DEFAULT_LL_LINES, DEFAULT_STEP_BYTES, FifoLayout, LayoutError};
pub use memory::{FifoMemory, HeapMemory};
pub use region::FifoRegion;
pub use wait::{AbortFlag, DEFAULT_TIMEOUT, WaitPolicy, pid_namespace, process_alive};

/// A connection inside this process: both ends over one heap region (the NET transport's
/// executor/proxy pair, and tests). Both ends share `waiter`'s policy and abort flag.
pub fn local_pair(
    layout: FifoLayout,
    conn: ConnId,
    waiter: Waiter,
) -> Result<(FifoSendEnd, FifoRecvEnd), LayoutError> {
    let region = FifoRegion::local(layout)?;
    let send = region.send_end(conn, waiter.clone());
    let recv = region.recv_end(conn, waiter);
    Ok((send, recv))
}
