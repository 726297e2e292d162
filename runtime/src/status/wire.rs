//! The health query's wire format: one request line, then one line per rank, then `END`.
//!
//! Request: `WEFT-STATUS 1 <comm as 16 hex digits, or *>`. Each rank's line is
//! tab-separated `key=value` fields (values never hold a tab or a newline; free text has
//! them replaced by spaces): `comm`, `rank`, `nranks`, `pid`, `host`, `started`, `done`,
//! `call` (`op:count:dtype:ms`, absent when idle), `waits` (`channel/dir/peer/what/ms`,
//! comma-separated), `failed` and `failed_here` (1: the failure began at this rank),
//! `members` (every rank's status address, comma-separated).
//! Unknown keys are ignored, so that a newer weft can add fields.

use super::board::{CallDesc, RankReport, WaitDesc};

/// The request's first word and version.
pub const REQUEST: &str = "WEFT-STATUS 1";
/// The line after the last rank.
pub const END: &str = "END";

/// Text with no tab, newline or the separators used inside fields.
fn clean(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c == '\t' || c == '\n' || c == '\r' {
                ' '
            } else {
                c
            }
        })
        .collect()
}

/// A rank's line (without its newline).
pub fn encode(r: &RankReport, members: &[String]) -> String {
    let mut f = vec![
        format!("comm={:016x}", r.comm),
        format!("rank={}", r.rank),
        format!("nranks={}", r.nranks),
        format!("pid={}", r.pid),
        format!("host={}", clean(&r.host)),
        format!("started={}", r.started),
        format!("done={}", r.done),
        format!("collectives={}", r.collectives),
    ];
    if let Some((c, ms)) = &r.current {
        f.push(format!(
            "call={}:{}:{}:{ms}",
            clean(&c.op).replace(':', " "),
            c.count,
            clean(&c.dtype).replace(':', " ")
        ));
    }
    if !r.waits.is_empty() {
        let waits: Vec<String> = r
            .waits
            .iter()
            .map(|w| format!("{}/{}/{}/{}/{}", w.channel, w.dir, w.peer, w.what, w.for_ms))
            .collect();
        f.push(format!("waits={}", waits.join(",")));
    }
    if let Some(cause) = &r.failed {
        f.push(format!("failed={}", clean(cause)));
        f.push(format!("failed_here={}", u8::from(r.failed_here)));
    }
    f.push(format!("members={}", members.join(",")));
    f.join("\t")
}

/// A rank's line back, with the members it lists; `None` when a required field is missing
/// or malformed.
pub fn decode(line: &str) -> Option<(RankReport, Vec<String>)> {
    let mut r = RankReport {
        comm: 0,
        rank: u32::MAX,
        nranks: 0,
        pid: 0,
        host: String::new(),
        started: 0,
        done: 0,
        collectives: 0,
        current: None,
        waits: Vec::new(),
        failed: None,
        failed_here: false,
    };
    let mut members = Vec::new();
    for field in line.split('\t') {
        let (k, v) = field.split_once('=')?;
        match k {
            "comm" => r.comm = u64::from_str_radix(v, 16).ok()?,
            "rank" => r.rank = v.parse().ok()?,
            "nranks" => r.nranks = v.parse().ok()?,
            "pid" => r.pid = v.parse().ok()?,
            "host" => r.host = v.to_string(),
            "started" => r.started = v.parse().ok()?,
            "done" => r.done = v.parse().ok()?,
            "collectives" => r.collectives = v.parse().ok()?,
            "call" => {
                let mut p = v.split(':');
                let (op, count, dtype, ms) = (p.next()?, p.next()?, p.next()?, p.next()?);
                r.current = Some((
                    CallDesc {
                        op: op.to_string(),
                        count: count.parse().ok()?,
                        dtype: dtype.to_string(),
                    },
                    ms.parse().ok()?,
                ));
            }
            "waits" => {
                for w in v.split(',').filter(|w| !w.is_empty()) {
                    let p: Vec<&str> = w.split('/').collect();
                    let [channel, dir, peer, what, ms] = p[..] else {
                        return None;
                    };
                    r.waits.push(WaitDesc {
                        channel: channel.parse().ok()?,
                        dir: dir.to_string(),
                        peer: peer.parse().ok()?,
                        what: what.to_string(),
                        for_ms: ms.parse().ok()?,
                    });
                }
            }
            "failed" => r.failed = Some(v.to_string()),
            "failed_here" => r.failed_here = v == "1",
            "members" => {
                members = v
                    .split(',')
                    .filter(|m| !m.is_empty())
                    .map(str::to_string)
                    .collect()
            }
            _ => {}
        }
    }
    (r.rank != u32::MAX && r.rank < r.nranks).then_some((r, members))
}

#[cfg(test)]
mod test {
    use super::*;

    fn sample() -> RankReport {
        RankReport {
            comm: 0x1234_5678_9abc_def0,
            rank: 1,
            nranks: 3,
            pid: 4242,
            host: "node\t7".to_string(),
            started: 15,
            done: 14,
            collectives: 12,
            current: Some((
                CallDesc {
                    op: "all_reduce".to_string(),
                    count: 1 << 20,
                    dtype: "float32".to_string(),
                },
                1300,
            )),
            waits: vec![WaitDesc {
                channel: 0,
                dir: "recv".to_string(),
                peer: 2,
                what: "data".to_string(),
                for_ms: 1250,
            }],
            failed: Some("rank 2: gone\nfor good".to_string()),
            failed_here: true,
        }
    }

    #[test]
    fn a_line_decodes_to_what_was_encoded_with_free_text_cleaned() {
        let members = vec!["10.0.0.1:5000".to_string(), "10.0.0.2:5001".to_string()];
        let line = encode(&sample(), &members);
        assert!(!line.contains('\n'));
        let (back, m) = decode(&line).unwrap();
        let mut want = sample();
        want.host = "node 7".to_string();
        want.failed = Some("rank 2: gone for good".to_string());
        assert_eq!(back, want);
        assert_eq!(m, members);
    }

    #[test]
    fn malformed_lines_are_refused_not_guessed() {
        assert!(decode("").is_none());
        assert!(decode("rank=1").is_none(), "no nranks: rank out of range");
        assert!(decode("rank=x\tnranks=2").is_none());
        assert!(decode("rank=0\tnranks=2\twaits=0/recv/1").is_none());
        assert!(decode("rank=0\tnranks=2\tnewer_field=1").is_some());
    }
}
