//! NCCL 2.28's device API (`nccl_device.h`): its host calls, refused.
//!
//! The device API lets a program's own kernels reach peers' memory through NCCL-managed
//! windows (`ncclDevComm`, LSA barriers, LL all-to-all). weft does not provide it, but
//! programs link these symbols whether or not they call them: PyTorch 2.11's
//! `libtorch_cuda.so` fails to load against a libnccl without `ncclDevCommDestroy` (seen on
//! an H100, 2026-11-25). So every host function of NCCL 2.28's `nccl_device` headers exists
//! (scripts/nccl-api-test.sh checks it): those that return `ncclResult_t` return
//! `ncclInvalidUsage` with the reason in `ncclGetLastError()`. The team queries answer for
//! what weft does provide: the world team is the communicator's ranks; since weft gives no
//! rank load-store access through the device API, the LSA team is this rank alone and the
//! rail team (the world divided by the LSA team) is the world. weft's `nccl.h` does not
//! declare them (NCCL declares them in `nccl_device.h`, which weft does not ship).

use std::ffi::{c_int, c_void};

use super::NcclComm;
use crate::boundary::run;
use crate::comm;
use crate::result::{ApiError, NcclResult};

/// `ncclTeam_t`, passed by value (`nccl_device/core.h`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct NcclTeam {
    pub n_ranks: c_int,
    pub rank: c_int,
    pub stride: c_int,
}

impl NcclTeam {
    /// What a team query returns for a communicator it cannot find (the error recorded).
    const NONE: NcclTeam = NcclTeam {
        n_ranks: 0,
        rank: 0,
        stride: 0,
    };
}

/// `team(comm)` for a live communicator; [`NcclTeam::NONE`] and the error in
/// `ncclGetLastError()` otherwise.
fn team_of(entry: &str, comm: NcclComm, team: impl FnOnce(&comm::Comm) -> NcclTeam) -> NcclTeam {
    let mut out = NcclTeam::NONE;
    run(entry, || {
        let c = comm::lookup(comm as usize)?;
        out = team(&c);
        Ok(())
    });
    out
}

fn world(c: &comm::Comm) -> NcclTeam {
    NcclTeam {
        n_ranks: c_int::try_from(c.nranks).unwrap_or(c_int::MAX),
        rank: c_int::try_from(c.rank).unwrap_or(c_int::MAX),
        stride: 1,
    }
}

/// The communicator's ranks, as NCCL's world team.
#[unsafe(no_mangle)]
pub extern "C" fn ncclTeamWorld(comm: NcclComm) -> NcclTeam {
    team_of("ncclTeamWorld", comm, world)
}

/// This rank alone: weft gives no peer load-store access through the device API.
#[unsafe(no_mangle)]
pub extern "C" fn ncclTeamLsa(comm: NcclComm) -> NcclTeam {
    team_of("ncclTeamLsa", comm, |_| NcclTeam {
        n_ranks: 1,
        rank: 0,
        stride: 1,
    })
}

/// The world divided by the LSA team (NCCL: its outer factor), which is one rank: the world.
#[unsafe(no_mangle)]
pub extern "C" fn ncclTeamRail(comm: NcclComm) -> NcclTeam {
    team_of("ncclTeamRail", comm, world)
}

/// The world rank of `rank` of `team`, a team of this rank's (world rank = this rank's +
/// the distance in the team times its stride); -1 for a communicator weft does not know.
#[unsafe(no_mangle)]
pub extern "C" fn ncclTeamRankToWorld(comm: NcclComm, team: NcclTeam, rank: c_int) -> c_int {
    let mut out = -1;
    run("ncclTeamRankToWorld", || {
        let c = comm::lookup(comm as usize)?;
        let me = i64::try_from(c.rank).unwrap_or(i64::MAX);
        let world = me + (i64::from(rank) - i64::from(team.rank)) * i64::from(team.stride);
        out = c_int::try_from(world).unwrap_or(-1);
        Ok(())
    });
    out
}

/// The LSA rank of `rank` of `team`: this rank is LSA rank 0 of its one-rank LSA team, so
/// the distance from it in the team times its stride (0 for this rank itself).
#[unsafe(no_mangle)]
pub extern "C" fn ncclTeamRankToLsa(comm: NcclComm, team: NcclTeam, rank: c_int) -> c_int {
    let mut out = -1;
    run("ncclTeamRankToLsa", || {
        comm::lookup(comm as usize)?;
        let lsa = (i64::from(rank) - i64::from(team.rank)) * i64::from(team.stride);
        out = c_int::try_from(lsa).unwrap_or(-1);
        Ok(())
    });
    out
}

/// Refused (records why); 0 slots.
#[unsafe(no_mangle)]
pub extern "C" fn ncclLLA2ACalcSlots(_max_elts: c_int, _max_elt_size: c_int) -> c_int {
    run("ncclLLA2ACalcSlots", || device_api("ncclLLA2ACalcSlots"));
    0
}

/// Refused. No pointer is read.
#[unsafe(no_mangle)]
pub extern "C" fn ncclLLA2ACreateRequirement(
    _n_blocks: c_int,
    _n_slots: c_int,
    _out_handle: *mut c_void,
    _out_requirement: *mut c_void,
) -> NcclResult {
    run("ncclLLA2ACreateRequirement", || {
        device_api("ncclLLA2ACreateRequirement")
    })
}

fn device_api(call: &str) -> Result<(), ApiError> {
    Err(ApiError::unsupported(&format!(
        "{call} (NCCL's device API, nccl_device.h)"
    )))
}

/// Refused: weft has no device communicators. No pointer is read.
#[unsafe(no_mangle)]
pub extern "C" fn ncclDevCommCreate(
    _comm: NcclComm,
    _requirements: *const c_void,
    _out_dev_comm: *mut c_void,
) -> NcclResult {
    run("ncclDevCommCreate", || device_api("ncclDevCommCreate"))
}

/// Refused, as [`ncclDevCommCreate`] never made one. No pointer is read.
#[unsafe(no_mangle)]
pub extern "C" fn ncclDevCommDestroy(_comm: NcclComm, _dev_comm: *const c_void) -> NcclResult {
    run("ncclDevCommDestroy", || device_api("ncclDevCommDestroy"))
}

/// Refused. No pointer is read.
#[unsafe(no_mangle)]
pub extern "C" fn ncclLsaBarrierCreateRequirement(
    _team: NcclTeam,
    _n_barriers: c_int,
    _out_handle: *mut c_void,
    _out_requirement: *mut c_void,
) -> NcclResult {
    run("ncclLsaBarrierCreateRequirement", || {
        device_api("ncclLsaBarrierCreateRequirement")
    })
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::result::NCCL_INVALID_USAGE;

    #[test]
    fn every_device_api_call_is_refused_with_its_name() {
        let team = NcclTeam {
            n_ranks: 2,
            rank: 0,
            stride: 1,
        };
        let calls: [(&str, &dyn Fn() -> NcclResult); 4] = [
            ("ncclDevCommCreate", &|| {
                ncclDevCommCreate(std::ptr::null_mut(), std::ptr::null(), std::ptr::null_mut())
            }),
            ("ncclDevCommDestroy", &|| {
                ncclDevCommDestroy(std::ptr::null_mut(), std::ptr::null())
            }),
            ("ncclLsaBarrierCreateRequirement", &|| {
                ncclLsaBarrierCreateRequirement(team, 1, std::ptr::null_mut(), std::ptr::null_mut())
            }),
            ("ncclLLA2ACreateRequirement", &|| {
                ncclLLA2ACreateRequirement(1, 1, std::ptr::null_mut(), std::ptr::null_mut())
            }),
        ];
        for (name, call) in calls {
            assert_eq!(call(), NCCL_INVALID_USAGE, "{name}");
            let last = crate::boundary::this_threads_last_error();
            assert!(last.contains(name) && last.contains("device API"), "{last}");
        }
        assert_eq!(ncclLLA2ACalcSlots(64, 16), 0);
    }

    #[test]
    fn teams_answer_for_a_live_communicator_and_refuse_an_unknown_one() {
        let c = comm::register(std::sync::Arc::new(comm::Comm::new(
            2,
            4,
            0,
            crate::config::CommSettings::default(),
        )));
        let h = c as NcclComm;
        let w = ncclTeamWorld(h);
        assert_eq!((w.n_ranks, w.rank, w.stride), (4, 2, 1));
        let lsa = ncclTeamLsa(h);
        assert_eq!((lsa.n_ranks, lsa.rank, lsa.stride), (1, 0, 1));
        let rail = ncclTeamRail(h);
        assert_eq!((rail.n_ranks, rail.rank), (4, 2));
        assert_eq!(ncclTeamRankToWorld(h, w, 3), 3);
        assert_eq!(ncclTeamRankToWorld(h, lsa, 0), 2);
        assert_eq!(ncclTeamRankToLsa(h, lsa, 0), 0);
        let unknown = ncclTeamWorld(std::ptr::null_mut());
        assert_eq!(unknown.n_ranks, 0);
        assert!(
            crate::boundary::this_threads_last_error().contains("ncclTeamWorld"),
            "{}",
            crate::boundary::this_threads_last_error()
        );
        assert_eq!(ncclTeamRankToWorld(std::ptr::null_mut(), w, 1), -1);
    }
}
