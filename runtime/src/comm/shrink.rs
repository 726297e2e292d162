//! Shrink: the ranks that stay, after some left or died, build a communicator of their own
//! (NCCL 2.27's `ncclCommShrink`), for the host communicator here and the GPU one in
//! libnccl.
//!
//! The survivors agree over the parent's bootstrap among themselves only: the first of them
//! starts the new root and sends its id to the others, whose waits never involve an
//! excluded rank (a dead rank's closed connections, or an aborted one's abort, end only the
//! waits on it). The new communicator is then built from scratch, as a split's is.

use super::{CommError, CommOptions, HostComm};
use crate::bootstrap::{BootstrapError, BootstrapOptions, UniqueId};

/// The ranks that stay in parent order, and `me`'s rank among them, when `exclude` leave a
/// communicator of `nranks`; an error naming the argument for a rank out of range, a rank
/// excluded twice, or `me` among the excluded (who must not take part).
pub fn shrink_plan(
    nranks: usize,
    me: usize,
    exclude: &[i64],
) -> Result<(Vec<usize>, usize), String> {
    let mut out = vec![false; nranks];
    for &r in exclude {
        let Some(slot) = usize::try_from(r).ok().and_then(|i| out.get_mut(i)) else {
            return Err(format!(
                "the excluded ranks hold rank {r}, out of range for {nranks} ranks"
            ));
        };
        if *slot {
            return Err(format!("the excluded ranks hold rank {r} twice"));
        }
        *slot = true;
    }
    if out.get(me).copied().unwrap_or(true) {
        return Err(format!(
            "rank {me} is among the excluded ranks: excluded ranks must not call shrink"
        ));
    }
    let survivors: Vec<usize> = (0..nranks).filter(|&r| !out[r]).collect();
    let new_rank = survivors.iter().position(|&r| r == me).unwrap_or(0);
    Ok((survivors, new_rank))
}

/// The id of the survivors' new communicator: made by the first survivor (with `opts`'
/// bootstrap settings) and sent to the others through `broadcast` (the parent's bootstrap,
/// among `survivors` only). `malformed` words the error for an id that does not parse.
pub fn agree_on_id<E: From<BootstrapError>>(
    me: usize,
    survivors: &[usize],
    opts: &BootstrapOptions,
    broadcast: impl FnOnce(usize, &[usize], &[u8]) -> Result<Vec<u8>, E>,
    malformed: impl FnOnce(String) -> E,
) -> Result<UniqueId, E> {
    let Some(&leader) = survivors.first() else {
        return Err(malformed("shrinking away every rank".to_string()));
    };
    let mine = if me == leader {
        UniqueId::new(opts)?.to_bytes().to_vec()
    } else {
        Vec::new()
    };
    let bytes = broadcast(leader, survivors, &mine)?;
    UniqueId::from_bytes(&bytes).map_err(|e| {
        malformed(format!(
            "rank {leader}'s id for the shrunk communicator: {e}"
        ))
    })
}

impl HostComm {
    /// NCCL's shrink for the host communicator: the ranks not in `exclude` (every one of
    /// them calls it; the excluded ones do not, and may be dead) get a new communicator of
    /// their own, ranked in parent order and built with `opts`. Meant for a communicator
    /// that failed because a peer died (any call in progress on it must have ended: raise
    /// its `abort_flag` first, NCCL's revoke); the parent stays as it was (drop it).
    pub fn shrink(&mut self, exclude: &[usize], opts: &CommOptions) -> Result<HostComm, CommError> {
        let exclude: Vec<i64> = exclude.iter().map(|&r| r as i64).collect();
        let (survivors, rank) =
            shrink_plan(self.nranks, self.rank, &exclude).map_err(CommError::InvalidArgument)?;
        let id = agree_on_id(
            self.rank,
            &survivors,
            &opts.bootstrap,
            |root, ranks, data| Ok(self.bootstrap.broadcast(root, ranks, data)?),
            CommError::InvalidArgument,
        )?;
        HostComm::init(&id, rank, survivors.len(), opts)
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn the_survivors_keep_parent_order() {
        assert_eq!(shrink_plan(4, 2, &[1]).unwrap(), (vec![0, 2, 3], 1));
        assert_eq!(shrink_plan(4, 0, &[3, 1]).unwrap(), (vec![0, 2], 0));
        assert_eq!(shrink_plan(2, 1, &[]).unwrap(), (vec![0, 1], 1));
        for (exclude, needle) in [
            (&[4][..], "out of range"),
            (&[-1][..], "out of range"),
            (&[1, 1][..], "twice"),
            (&[0][..], "must not call shrink"),
        ] {
            let e = shrink_plan(4, 0, exclude).unwrap_err();
            assert!(e.contains(needle), "{e}");
        }
    }
}
