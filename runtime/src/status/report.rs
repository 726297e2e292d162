//! Asking every rank of a communicator (each process's status server, in parallel, each
//! with a deadline) and naming the rank that holds the job up.

use std::collections::BTreeMap;
use std::fmt;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use super::board::RankReport;
use super::wire;

/// The most bytes read from one server's answer.
const MAX_ANSWER: u64 = 1 << 20;

/// A rank's report with every rank's status address, as a server sends it.
pub type Line = (RankReport, Vec<String>);

/// The ranks asked at one address, and its answer.
type Answer = (Vec<u32>, Result<Vec<Line>, String>);

/// What one status server said: its ranks' lines (every communicator's, or one's), with
/// the members each lists.
pub fn ask(addr: &str, comm: Option<u64>, deadline: Duration) -> Result<Vec<Line>, String> {
    let end = Instant::now() + deadline;
    let late = || format!("{addr}: no answer within {deadline:?}");
    let sock: SocketAddr = addr
        .to_socket_addrs()
        .map_err(|e| format!("{addr}: {e}"))?
        .next()
        .ok_or_else(|| format!("{addr}: no address"))?;
    let stream = TcpStream::connect_timeout(&sock, deadline).map_err(|e| match e.kind() {
        std::io::ErrorKind::ConnectionRefused => {
            format!("{addr} refuses connections: its process is gone")
        }
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => late(),
        _ => format!("{addr}: {e}"),
    })?;
    // Every read and write gets what is left of the one deadline, so a server that
    // trickles its answer cannot stretch it.
    let time_left = |stream: &TcpStream| -> Result<(), String> {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(late());
        }
        stream
            .set_read_timeout(Some(left))
            .map_err(|e| e.to_string())?;
        stream
            .set_write_timeout(Some(left))
            .map_err(|e| e.to_string())
    };
    time_left(&stream)?;
    let want = comm.map_or("*".to_string(), |c| format!("{c:016x}"));
    (&stream)
        .write_all(format!("{} {want}\n", wire::REQUEST).as_bytes())
        .map_err(|e| format!("{addr}: {e}"))?;
    let mut out = Vec::new();
    let mut reader = BufReader::new(&stream).take(MAX_ANSWER);
    loop {
        time_left(&stream)?;
        let mut line = String::new();
        let n = reader.read_line(&mut line).map_err(|e| match e.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => late(),
            _ => format!("{addr}: {e}"),
        })?;
        if n == 0 {
            break;
        }
        let line = line.trim_end_matches('\n');
        if line == wire::END {
            return Ok(out);
        }
        if let Some(rank) = wire::decode(line) {
            out.push(rank);
        }
    }
    Err(format!(
        "{addr}: the answer ended (or passed {MAX_ANSWER} bytes) before {}",
        wire::END
    ))
}

/// Every rank of one communicator, as far as they answered.
#[derive(Debug, Clone)]
pub struct JobReport {
    pub comm: u64,
    pub nranks: u32,
    /// By rank: the rank's report, or why there is none (with its status address).
    pub ranks: Vec<Result<RankReport, String>>,
    /// How long the query took.
    pub took: Duration,
}

/// Asks every member of communicator `comm` (`members[r]`: rank r's status address) for
/// its status, all at once, each within `deadline`. A process holding several ranks is
/// asked once.
pub fn query(comm: u64, members: &[String], deadline: Duration) -> JobReport {
    let started = Instant::now();
    let mut by_addr: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
    for (r, m) in members.iter().enumerate().filter(|(_, m)| !m.is_empty()) {
        by_addr.entry(m.as_str()).or_default().push(r as u32);
    }
    let answers: Vec<Answer> = std::thread::scope(|scope| {
        let asks: Vec<_> = by_addr
            .iter()
            .map(|(addr, ranks)| {
                let ranks = ranks.clone();
                let addr = addr.to_string();
                scope.spawn(move || (ranks, ask(&addr, Some(comm), deadline)))
            })
            .collect();
        asks.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| (Vec::new(), Err("the query thread panicked".into())))
            })
            .collect()
    });
    let nranks = members.len() as u32;
    let mut ranks: Vec<Result<RankReport, String>> = members
        .iter()
        .map(|m| {
            Err(if m.is_empty() {
                format!("{NO_SERVER} (WEFT_STATUS=0 there, or it could not start)")
            } else {
                format!("no report from {m}")
            })
        })
        .collect();
    for (asked, answer) in answers {
        match answer {
            Ok(lines) => {
                for r in &asked {
                    let found = lines.iter().find(|(l, _)| l.rank == *r && l.comm == comm);
                    if let (Some(slot), Some((l, _))) = (ranks.get_mut(*r as usize), found) {
                        *slot = Ok(l.clone());
                    } else if let Some(slot) = ranks.get_mut(*r as usize) {
                        *slot = Err(format!(
                            "its process at {} no longer has this communicator",
                            members[*r as usize]
                        ));
                    }
                }
            }
            Err(why) => {
                for r in &asked {
                    if let Some(slot) = ranks.get_mut(*r as usize) {
                        *slot = Err(why.clone());
                    }
                }
            }
        }
    }
    JobReport {
        comm,
        nranks,
        ranks,
        took: started.elapsed(),
    }
}

/// What a rank without a status server shows: never taken for a silent (stopped) rank.
const NO_SERVER: &str = "no status server";
/// What a rank set aside by [`JobReport::set_aside`] shows: never a culprit either.
const SET_ASIDE: &str = "set aside";

/// How long a call or a wait must have lasted before the report calls it stuck.
pub const STUCK_AFTER: Duration = Duration::from_secs(1);

/// The rank that holds the job up, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Culprit {
    pub rank: u32,
    pub why: String,
}

impl JobReport {
    /// Names the rank that holds the others up: one that did not answer (stopped, dead, or
    /// hung outside weft) before anything else, then one where a failure began (not one a
    /// neighbour passed on), then one that has not
    /// begun the call the others have been in for [`STUCK_AFTER`], then one that others
    /// have waited on that long while it waits on nobody. `None` when every rank answered
    /// and none is behind or waited on that long (a job that runs).
    pub fn culprit(&self) -> Option<Culprit> {
        let stuck = STUCK_AFTER.as_millis() as u64;
        let waited_on = |rank: u32| {
            self.ranks
                .iter()
                .filter_map(|r| r.as_ref().ok())
                .any(|r| r.waits.iter().any(|w| w.peer == rank && w.for_ms >= stuck))
        };
        let silent: Vec<(u32, &String)> = self
            .ranks
            .iter()
            .enumerate()
            .filter_map(|(r, rep)| rep.as_ref().err().map(|e| (r as u32, e)))
            .filter(|(_, e)| !e.starts_with(NO_SERVER) && !e.starts_with(SET_ASIDE))
            .collect();
        if let Some((rank, why)) = silent
            .iter()
            .find(|(r, _)| waited_on(*r))
            .or_else(|| silent.first())
        {
            let why = if why.contains("process is gone") {
                format!("it did not answer ({why})")
            } else {
                format!("it did not answer ({why}): stopped, dead, or hung outside weft")
            };
            return Some(Culprit { rank: *rank, why });
        }
        let reports: Vec<&RankReport> = self.ranks.iter().filter_map(|r| r.as_ref().ok()).collect();
        // A failure that began at a rank, not one a neighbour passed on.
        if let Some(r) = reports.iter().find(|r| r.failed.is_some() && r.failed_here) {
            return Some(Culprit {
                rank: r.rank,
                why: format!(
                    "it failed first: {}",
                    r.failed.as_deref().unwrap_or_default()
                ),
            });
        }
        // Collectives only: every rank makes the same ones (point-to-point groups differ).
        let furthest = reports.iter().map(|r| r.collectives).max().unwrap_or(0);
        // Behind only if the ranks ahead have been in their call for a while: in a job
        // that runs, ranks are a call apart all the time.
        let ahead_since = reports
            .iter()
            .filter(|r| r.collectives == furthest)
            .filter_map(|r| r.current.as_ref().map(|(_, ms)| *ms))
            .min()
            .unwrap_or(0);
        if let Some(r) = reports
            .iter()
            .filter(|r| r.collectives < furthest && ahead_since >= stuck)
            .min_by_key(|r| (r.collectives, r.rank))
        {
            return Some(Culprit {
                rank: r.rank,
                why: format!(
                    "it has not begun collective #{furthest}, which others are in (it began {})",
                    r.collectives
                ),
            });
        }
        reports
            .iter()
            .filter(|r| waited_on(r.rank) && r.waits.is_empty())
            .min_by_key(|r| r.rank)
            .map(|r| Culprit {
                rank: r.rank,
                why: "others wait on it, and it waits on no one (busy, or between calls)".into(),
            })
    }

    /// The same report with `rank` out of the running for culprit, whatever it said
    /// (`why`: the reason shown): a neighbour known to have been alive when it passed a
    /// failure on, whose process may have exited since, is not the root of it.
    pub fn set_aside(mut self, rank: usize, why: &str) -> JobReport {
        if let Some(r) = self.ranks.get_mut(rank) {
            *r = Err(format!("{SET_ASIDE}: {why}"));
        }
        self
    }

    /// The report as JSON (one object; `culprit` null when there is none).
    pub fn to_json(&self) -> String {
        let esc = |s: &str| {
            let mut o = String::with_capacity(s.len() + 2);
            o.push('"');
            for c in s.chars() {
                match c {
                    '"' => o.push_str("\\\""),
                    '\\' => o.push_str("\\\\"),
                    c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
                    c => o.push(c),
                }
            }
            o.push('"');
            o
        };
        let ranks: Vec<String> = self
            .ranks
            .iter()
            .enumerate()
            .map(|(i, r)| match r {
                Err(why) => format!("{{\"rank\":{i},\"answered\":false,\"error\":{}}}", esc(why)),
                Ok(r) => {
                    let call = match &r.current {
                        Some((c, ms)) => format!(
                            "{{\"op\":{},\"count\":{},\"dtype\":{},\"for_ms\":{ms}}}",
                            esc(&c.op),
                            c.count,
                            esc(&c.dtype)
                        ),
                        None => "null".to_string(),
                    };
                    let waits: Vec<String> = r
                        .waits
                        .iter()
                        .map(|w| {
                            format!(
                                "{{\"channel\":{},\"dir\":{},\"peer\":{},\"what\":{},\"for_ms\":{}}}",
                                w.channel,
                                esc(&w.dir),
                                w.peer,
                                esc(&w.what),
                                w.for_ms
                            )
                        })
                        .collect();
                    format!(
                        "{{\"rank\":{},\"answered\":true,\"pid\":{},\"host\":{},\"started\":{},\
                         \"done\":{},\"collectives\":{},\"call\":{call},\"waits\":[{}],\"failed\":{},\
                         \"failed_here\":{}}}",
                        r.rank,
                        r.pid,
                        esc(&r.host),
                        r.started,
                        r.done,
                        r.collectives,
                        waits.join(","),
                        r.failed.as_deref().map_or("null".to_string(), esc),
                        r.failed_here
                    )
                }
            })
            .collect();
        let culprit = match self.culprit() {
            Some(c) => format!("{{\"rank\":{},\"why\":{}}}", c.rank, esc(&c.why)),
            None => "null".to_string(),
        };
        format!(
            "{{\"comm\":\"{:016x}\",\"nranks\":{},\"took_ms\":{},\"ranks\":[{}],\"culprit\":{culprit}}}",
            self.comm,
            self.nranks,
            self.took.as_millis(),
            ranks.join(",")
        )
    }
}

impl fmt::Display for JobReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "communicator {:016x}, {} ranks (asked in {} ms):",
            self.comm,
            self.nranks,
            self.took.as_millis()
        )?;
        for (i, r) in self.ranks.iter().enumerate() {
            match r {
                Err(why) => writeln!(f, "  rank {i}: NO ANSWER: {why}")?,
                Ok(r) => {
                    write!(f, "  rank {i} (pid {} on {}): ", r.pid, r.host)?;
                    match &r.current {
                        Some((c, ms)) => write!(f, "in call #{} ({c}) for {ms} ms", r.started)?,
                        None => write!(f, "idle after {} calls", r.done)?,
                    }
                    for w in &r.waits {
                        write!(
                            f,
                            "; channel {} waits on rank {} ({} {}) for {} ms",
                            w.channel, w.peer, w.dir, w.what, w.for_ms
                        )?;
                    }
                    if let Some(cause) = &r.failed {
                        write!(f, "; FAILED: {cause}")?;
                    }
                    writeln!(f)?;
                }
            }
        }
        match self.culprit() {
            Some(c) => write!(f, "holding the job up: rank {}: {}", c.rank, c.why),
            None => write!(
                f,
                "no rank holds the job up (none silent or failed, no call or wait stuck for {} s)",
                STUCK_AFTER.as_secs()
            ),
        }
    }
}

#[cfg(test)]
mod test {
    use super::super::board::{CallDesc, WaitDesc};
    use super::*;

    fn rank(r: u32, started: u64, waits_on: &[u32]) -> RankReport {
        RankReport {
            comm: 7,
            rank: r,
            nranks: 3,
            pid: 100 + r,
            host: "h".into(),
            started,
            done: started.saturating_sub(1),
            collectives: started,
            current: Some((
                CallDesc {
                    op: "all_reduce".into(),
                    count: 8,
                    dtype: "float32".into(),
                },
                1500,
            )),
            waits: waits_on
                .iter()
                .map(|&p| WaitDesc {
                    channel: 0,
                    dir: "recv".into(),
                    peer: p,
                    what: "data".into(),
                    for_ms: 1200,
                })
                .collect(),
            failed: None,
            failed_here: false,
        }
    }

    fn job(ranks: Vec<Result<RankReport, String>>) -> JobReport {
        JobReport {
            comm: 7,
            nranks: ranks.len() as u32,
            ranks,
            took: Duration::from_millis(3),
        }
    }

    #[test]
    fn a_silent_rank_that_others_wait_on_is_named_first() {
        let j = job(vec![
            Ok(rank(0, 5, &[1])),
            Ok(rank(1, 5, &[2])),
            Err("10.0.0.3:40000: no answer within 1s".into()),
        ]);
        let c = j.culprit().unwrap();
        assert_eq!(c.rank, 2);
        assert!(c.why.contains("did not answer"), "{}", c.why);
        let text = j.to_string();
        assert!(text.contains("rank 2: NO ANSWER"), "{text}");
        assert!(text.contains("holding the job up: rank 2"), "{text}");
        assert!(
            j.to_json().contains("\"culprit\":{\"rank\":2"),
            "{}",
            j.to_json()
        );
    }

    #[test]
    fn a_rank_behind_the_others_is_named_then_the_one_waited_on() {
        let j = job(vec![
            Ok(rank(0, 6, &[1])),
            Ok(rank(1, 5, &[])),
            Ok(rank(2, 6, &[0])),
        ]);
        assert_eq!(j.culprit().unwrap().rank, 1);
        let j = job(vec![
            Ok(rank(0, 6, &[2])),
            Ok(rank(1, 6, &[0])),
            Ok(rank(2, 6, &[])),
        ]);
        let c = j.culprit().unwrap();
        assert_eq!(c.rank, 2, "{}", c.why);
        let j = job(vec![
            Ok(rank(0, 6, &[])),
            Ok(rank(1, 6, &[])),
            Ok(rank(2, 6, &[])),
        ]);
        assert_eq!(j.culprit(), None);
    }

    #[test]
    fn a_job_that_runs_has_no_culprit() {
        // Ranks a call apart, waiting on each other for microseconds: normal.
        let mut ranks = vec![rank(0, 6, &[1]), rank(1, 5, &[]), rank(2, 6, &[0])];
        for r in &mut ranks {
            if let Some((_, ms)) = &mut r.current {
                *ms = 3;
            }
            for w in &mut r.waits {
                w.for_ms = 2;
            }
        }
        let j = job(ranks.into_iter().map(Ok).collect());
        assert_eq!(j.culprit(), None, "{j}");
        assert!(j.to_string().contains("no rank holds the job up"));
    }

    #[test]
    fn point_to_point_groups_make_no_rank_look_behind() {
        // Rank 1 made two more send/recv groups than the others: the same collectives.
        let mut ranks = vec![rank(0, 6, &[]), rank(1, 8, &[]), rank(2, 6, &[])];
        for r in &mut ranks {
            r.collectives = 5;
        }
        let j = job(ranks.into_iter().map(Ok).collect());
        assert_eq!(j.culprit(), None, "{j}");
    }

    #[test]
    fn a_rank_without_a_status_server_is_not_taken_for_a_stopped_one() {
        let j = query(
            7,
            &[String::new(), String::new()],
            Duration::from_millis(100),
        );
        assert!(
            j.ranks
                .iter()
                .all(|r| r.as_ref().is_err_and(|e| e.starts_with(NO_SERVER)))
        );
        assert_eq!(j.culprit(), None, "{j}");
    }

    #[test]
    fn a_silent_client_holds_the_server_up_for_no_one() {
        let board = super::super::Board::new(0x5eed, 0, 1);
        let addr = match super::super::start("127.0.0.1".parse().unwrap()) {
            Ok(Some(a)) => a.to_string(),
            other => panic!("no status server: {other:?}"),
        };
        super::super::register(&board, vec![addr.clone()]);
        // Connected, says nothing, reads nothing.
        let _silent = TcpStream::connect(&addr).unwrap();
        let asked = Instant::now();
        let lines = ask(&addr, Some(0x5eed), Duration::from_secs(1)).unwrap();
        assert!(
            asked.elapsed() < Duration::from_millis(300),
            "{:?}",
            asked.elapsed()
        );
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0].0.comm, 0x5eed);
        // Every communicator: answered to a client of this host.
        assert!(!ask(&addr, None, Duration::from_secs(1)).unwrap().is_empty());
    }

    #[test]
    fn json_escapes_free_text() {
        let mut r = rank(0, 1, &[]);
        r.failed = Some("a \"quoted\"\ncause".into());
        let j = job(vec![Ok(r)]);
        let json = j.to_json();
        assert!(
            json.contains(r#""failed":"a \"quoted\"\u000acause""#),
            "{json}"
        );
    }
}
