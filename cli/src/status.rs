//! `weft status`: the job health query (issue 26). Asks every rank of every communicator
//! of the given processes what it is doing, and names the rank that holds each job up
//! (`weft_runtime::status`).

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Duration;

use weft_runtime::status::{QUERY_DEADLINE, ask, discovery_dir, local_servers, query};

const USAGE: &str = "\
usage: weft status [ADDR ...] [--json] [--deadline MS]

Asks every rank of each communicator what it is doing (the call in progress, the calls
done, which peer each waiting channel waits on) and names the rank that holds the job up:
one that does not answer (stopped, dead, hung outside weft), one that failed, one that has
not begun the call the others are in, one the others wait on.

  ADDR           a process's status server (host:port; each weft process logs it at
                 NCCL_DEBUG=INFO); without one, every weft process of this user on this
                 host (their addresses are in $XDG_RUNTIME_DIR/weft-status, else
                 /tmp/weft-status-<uid>); each communicator found is then asked whole, on
                 every host
  --json         one JSON object per communicator, one per line
  --deadline MS  how long each process has to answer (default 1500)
";

pub fn main(args: &[String]) -> ExitCode {
    match run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("weft status: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(args: &[String]) -> Result<ExitCode, String> {
    let mut addrs: Vec<String> = Vec::new();
    let mut json = false;
    let mut deadline = QUERY_DEADLINE;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--json" => json = true,
            "--deadline" => {
                let v = it.next().ok_or("--deadline needs milliseconds")?;
                let ms: u64 = v
                    .parse()
                    .map_err(|_| format!("--deadline {v}: milliseconds, such as 1500"))?;
                deadline = Duration::from_millis(ms.max(1));
            }
            "-h" | "--help" => {
                print!("{USAGE}");
                return Ok(ExitCode::SUCCESS);
            }
            other if other.starts_with('-') => {
                return Err(format!("unknown option {other:?}\n\n{USAGE}"));
            }
            addr => addrs.push(addr.to_string()),
        }
    }
    if addrs.is_empty() {
        addrs = local_servers();
        if addrs.is_empty() {
            return Err(format!(
                "no weft process of this user runs on this host (nothing live in {}); name \
                 one with ADDR (its NCCL_DEBUG=INFO log says `status of this process's ranks \
                 at ...`)",
                discovery_dir().display()
            ));
        }
    }
    // Every communicator the processes hold, with its members' addresses.
    let mut comms: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    let mut errors = Vec::new();
    for addr in &addrs {
        match ask(addr, None, deadline) {
            Ok(ranks) => {
                for (r, members) in ranks {
                    comms.entry(r.comm).or_insert(members);
                }
            }
            Err(e) => errors.push(e),
        }
    }
    for e in &errors {
        eprintln!("weft status: {e}");
    }
    if comms.is_empty() {
        return Err("no communicator found in the processes asked".to_string());
    }
    for (comm, members) in comms {
        let report = query(comm, &members, deadline);
        if json {
            println!("{}", report.to_json());
        } else {
            println!("{report}\n");
        }
    }
    Ok(ExitCode::SUCCESS)
}
