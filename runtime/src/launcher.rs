//! Rank and world size from the launcher that started this process: torchrun, Open MPI,
//! PMI (MPICH, Intel MPI, Slurm's PMI) or Slurm itself.
//!
//! [`detect`] is a pure function over an environment lookup so that every case is testable.
//! Launchers are tried most specific first: torchrun (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`,
//! `LOCAL_WORLD_SIZE`), Open MPI (`OMPI_COMM_WORLD_RANK`/`_SIZE`/`_LOCAL_RANK`/`_LOCAL_SIZE`),
//! PMI (`PMI_RANK`, `PMI_SIZE`), Slurm (`SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_LOCALID`,
//! `SLURM_NTASKS_PER_NODE`). Slurm's variables are ignored when another launcher is present,
//! because `srun torchrun ...` legitimately gives one Slurm task per node and several
//! torchrun ranks inside it. Open MPI and PMI describe the same MPI job, so if both are set
//! they must agree.

use std::fmt;

/// Which launcher the values came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Launcher {
    /// Given explicitly (arguments), not from the environment.
    Explicit,
    Torchrun,
    OpenMpi,
    Pmi,
    Slurm,
}

/// Where this process sits in the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchInfo {
    pub rank: usize,
    pub world_size: usize,
    /// Rank among the processes of this node, when the launcher says.
    pub local_rank: Option<usize>,
    /// Processes on this node, when the launcher says.
    pub local_world_size: Option<usize>,
    pub launcher: Launcher,
}

/// Why rank and size could not be determined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LaunchError {
    /// No launcher variables and no arguments.
    NotFound,
    /// A variable holds something that is not a non-negative integer.
    NotANumber { var: &'static str, value: String },
    /// One variable of a pair is set without the other.
    Missing {
        present: &'static str,
        missing: &'static str,
    },
    /// Values contradict each other.
    Inconsistent(String),
}

impl fmt::Display for LaunchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LaunchError::NotFound => write!(
                f,
                "no rank and world size: pass them explicitly or start under torchrun, mpirun or srun \
                 (looked for RANK/WORLD_SIZE, OMPI_COMM_WORLD_RANK/SIZE, PMI_RANK/SIZE, SLURM_PROCID/NTASKS)"
            ),
            LaunchError::NotANumber { var, value } => {
                write!(f, "{var}={value:?} is not a non-negative integer")
            }
            LaunchError::Missing { present, missing } => {
                write!(
                    f,
                    "{present} is set but {missing} is not; the launcher sets both"
                )
            }
            LaunchError::Inconsistent(detail) => write!(f, "inconsistent launch: {detail}"),
        }
    }
}

impl std::error::Error for LaunchError {}

struct Names {
    launcher: Launcher,
    rank: &'static str,
    size: &'static str,
    local_rank: &'static str,
    local_size: &'static str,
}

const LAUNCHERS: [Names; 4] = [
    Names {
        launcher: Launcher::Torchrun,
        rank: "RANK",
        size: "WORLD_SIZE",
        local_rank: "LOCAL_RANK",
        local_size: "LOCAL_WORLD_SIZE",
    },
    Names {
        launcher: Launcher::OpenMpi,
        rank: "OMPI_COMM_WORLD_RANK",
        size: "OMPI_COMM_WORLD_SIZE",
        local_rank: "OMPI_COMM_WORLD_LOCAL_RANK",
        local_size: "OMPI_COMM_WORLD_LOCAL_SIZE",
    },
    Names {
        launcher: Launcher::Pmi,
        rank: "PMI_RANK",
        size: "PMI_SIZE",
        local_rank: "MPI_LOCALRANKID",
        local_size: "MPI_LOCALNRANKS",
    },
    Names {
        launcher: Launcher::Slurm,
        rank: "SLURM_PROCID",
        size: "SLURM_NTASKS",
        local_rank: "SLURM_LOCALID",
        local_size: "SLURM_NTASKS_PER_NODE",
    },
];

fn number(
    get: &impl Fn(&str) -> Option<String>,
    var: &'static str,
) -> Result<Option<usize>, LaunchError> {
    match get(var) {
        None => Ok(None),
        Some(v) if v.trim().is_empty() => Ok(None),
        Some(v) => v
            .trim()
            .parse::<usize>()
            .map(Some)
            .map_err(|_| LaunchError::NotANumber { var, value: v }),
    }
}

fn read_launcher(
    get: &impl Fn(&str) -> Option<String>,
    names: &Names,
) -> Result<Option<LaunchInfo>, LaunchError> {
    let rank = number(get, names.rank)?;
    let size = number(get, names.size)?;
    let (rank, size) = match (rank, size) {
        (None, None) => return Ok(None),
        (Some(r), Some(s)) => (r, s),
        (Some(_), None) => {
            return Err(LaunchError::Missing {
                present: names.rank,
                missing: names.size,
            });
        }
        (None, Some(_)) => {
            return Err(LaunchError::Missing {
                present: names.size,
                missing: names.rank,
            });
        }
    };
    let local_rank = number(get, names.local_rank)?;
    // Slurm writes SLURM_NTASKS_PER_NODE as "4" or, for uneven layouts, "4(x2),3": only a
    // plain number tells this node's count.
    let local_size = if names.launcher == Launcher::Slurm {
        get(names.local_size).and_then(|v| v.trim().parse::<usize>().ok())
    } else {
        number(get, names.local_size)?
    };
    let info = LaunchInfo {
        rank,
        world_size: size,
        local_rank,
        local_world_size: local_size,
        launcher: names.launcher,
    };
    check(&info, names)?;
    Ok(Some(info))
}

fn check(info: &LaunchInfo, names: &Names) -> Result<(), LaunchError> {
    if info.world_size == 0 {
        return Err(LaunchError::Inconsistent(format!("{}=0", names.size)));
    }
    if info.rank >= info.world_size {
        return Err(LaunchError::Inconsistent(format!(
            "{}={} is not below {}={}",
            names.rank, info.rank, names.size, info.world_size
        )));
    }
    if let Some(ls) = info.local_world_size {
        if ls == 0 || ls > info.world_size {
            return Err(LaunchError::Inconsistent(format!(
                "{}={ls} with {}={}",
                names.local_size, names.size, info.world_size
            )));
        }
        if let Some(lr) = info.local_rank.filter(|&lr| lr >= ls) {
            return Err(LaunchError::Inconsistent(format!(
                "{}={lr} is not below {}={ls}",
                names.local_rank, names.local_size
            )));
        }
    }
    Ok(())
}

/// Rank and size from the launcher variables visible through `get`; `Ok(None)` when no
/// launcher set any.
pub fn detect(get: impl Fn(&str) -> Option<String>) -> Result<Option<LaunchInfo>, LaunchError> {
    let mut found = Vec::new();
    for names in &LAUNCHERS {
        if let Some(info) = read_launcher(&get, names)? {
            found.push(info);
        }
    }
    let mpi: Vec<&LaunchInfo> = found
        .iter()
        .filter(|i| matches!(i.launcher, Launcher::OpenMpi | Launcher::Pmi))
        .collect();
    let disagree = match mpi.as_slice() {
        [a, b] => (a.rank != b.rank || a.world_size != b.world_size).then_some((*a, *b)),
        _ => None,
    };
    if let Some((a, b)) = disagree {
        return Err(LaunchError::Inconsistent(format!(
            "Open MPI says rank {} of {}, PMI says rank {} of {}",
            a.rank, a.world_size, b.rank, b.world_size
        )));
    }
    Ok(found.first().copied())
}

/// Explicit arguments if given (both or neither), else [`detect`]. Arguments that contradict
/// a launcher's variables are an error: one of them is stale.
pub fn resolve(
    rank: Option<usize>,
    world_size: Option<usize>,
    get: impl Fn(&str) -> Option<String>,
) -> Result<LaunchInfo, LaunchError> {
    let detected = detect(get)?;
    match (rank, world_size) {
        (None, None) => detected.ok_or(LaunchError::NotFound),
        (Some(rank), Some(world_size)) => {
            if world_size == 0 || rank >= world_size {
                return Err(LaunchError::Inconsistent(format!(
                    "rank {rank} of {world_size} ranks: need 0 <= rank < world size"
                )));
            }
            let contradicting = detected.filter(|d| d.rank != rank || d.world_size != world_size);
            if let Some(d) = contradicting {
                return Err(LaunchError::Inconsistent(format!(
                    "arguments say rank {rank} of {world_size}, {:?} variables say rank {} of {}",
                    d.launcher, d.rank, d.world_size
                )));
            }
            Ok(LaunchInfo {
                rank,
                world_size,
                local_rank: detected.and_then(|d| d.local_rank),
                local_world_size: detected.and_then(|d| d.local_world_size),
                launcher: Launcher::Explicit,
            })
        }
        (Some(_), None) => Err(LaunchError::Missing {
            present: "rank argument",
            missing: "world size argument",
        }),
        (None, Some(_)) => Err(LaunchError::Missing {
            present: "world size argument",
            missing: "rank argument",
        }),
    }
}

/// [`detect`] over the process environment.
pub fn from_env() -> Result<Option<LaunchInfo>, LaunchError> {
    detect(crate::config::lookup::process)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn each_launcher() {
        let t = detect(env(&[
            ("RANK", "5"),
            ("WORLD_SIZE", "12"),
            ("LOCAL_RANK", "1"),
            ("LOCAL_WORLD_SIZE", "4"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(
            t,
            LaunchInfo {
                rank: 5,
                world_size: 12,
                local_rank: Some(1),
                local_world_size: Some(4),
                launcher: Launcher::Torchrun
            }
        );
        let o = detect(env(&[
            ("OMPI_COMM_WORLD_RANK", "3"),
            ("OMPI_COMM_WORLD_SIZE", "7"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "0"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(
            (o.rank, o.world_size, o.local_rank, o.launcher),
            (3, 7, Some(0), Launcher::OpenMpi)
        );
        let p = detect(env(&[("PMI_RANK", "2"), ("PMI_SIZE", "3")]))
            .unwrap()
            .unwrap();
        assert_eq!((p.rank, p.world_size, p.launcher), (2, 3, Launcher::Pmi));
        let s = detect(env(&[
            ("SLURM_PROCID", "9"),
            ("SLURM_NTASKS", "10"),
            ("SLURM_LOCALID", "1"),
            ("SLURM_NTASKS_PER_NODE", "2(x5)"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(
            (s.rank, s.world_size, s.local_rank, s.local_world_size),
            (9, 10, Some(1), None)
        );
        assert_eq!(detect(env(&[])).unwrap(), None);
    }

    #[test]
    fn torchrun_inside_slurm_uses_torchrun() {
        let t = detect(env(&[
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "2"),
            ("RANK", "6"),
            ("WORLD_SIZE", "8"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(
            (t.rank, t.world_size, t.launcher),
            (6, 8, Launcher::Torchrun)
        );
    }

    #[test]
    fn inconsistencies_are_errors() {
        assert!(matches!(
            detect(env(&[("RANK", "8"), ("WORLD_SIZE", "8")])),
            Err(LaunchError::Inconsistent(_))
        ));
        assert_eq!(
            detect(env(&[("RANK", "1")])),
            Err(LaunchError::Missing {
                present: "RANK",
                missing: "WORLD_SIZE"
            })
        );
        assert!(matches!(
            detect(env(&[("PMI_RANK", "x"), ("PMI_SIZE", "2")])),
            Err(LaunchError::NotANumber {
                var: "PMI_RANK",
                ..
            })
        ));
        assert!(matches!(
            detect(env(&[
                ("RANK", "1"),
                ("WORLD_SIZE", "4"),
                ("LOCAL_RANK", "2"),
                ("LOCAL_WORLD_SIZE", "2")
            ])),
            Err(LaunchError::Inconsistent(_))
        ));
        assert!(matches!(
            detect(env(&[
                ("OMPI_COMM_WORLD_RANK", "1"),
                ("OMPI_COMM_WORLD_SIZE", "4"),
                ("PMI_RANK", "2"),
                ("PMI_SIZE", "4")
            ])),
            Err(LaunchError::Inconsistent(_))
        ));
    }

    #[test]
    fn arguments_win_but_must_agree() {
        let none = env(&[]);
        assert_eq!(
            resolve(Some(1), Some(3), none).unwrap().launcher,
            Launcher::Explicit
        );
        assert_eq!(resolve(None, None, env(&[])), Err(LaunchError::NotFound));
        let torch = env(&[("RANK", "1"), ("WORLD_SIZE", "3"), ("LOCAL_RANK", "1")]);
        assert_eq!(
            resolve(Some(1), Some(3), &torch).unwrap().local_rank,
            Some(1)
        );
        assert!(matches!(
            resolve(Some(2), Some(3), &torch),
            Err(LaunchError::Inconsistent(_))
        ));
        assert!(matches!(
            resolve(Some(3), Some(3), env(&[])),
            Err(LaunchError::Inconsistent(_))
        ));
        assert!(matches!(
            resolve(Some(0), None, env(&[])),
            Err(LaunchError::Missing { .. })
        ));
    }
}
