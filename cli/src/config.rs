//! `weft config`: every variable weft reads, with its value here and its default.

use weft_config::{Lookup, Settings, doc, listing};

pub const USAGE: &str = "\
usage: weft config [--changed | --markdown]

  (no option)  every environment variable weft reads, by group, with its value here and its
               default: * marks a value other than the default, ! a value that is ignored
  --changed    only the variables set to other than their default, as NCCL_DEBUG=INFO lists
               them (`NCCL_SOCKET_IFNAME set by environment to eth0`)
  --markdown   the table of every variable, as docs/environment.md has it

A value a variable does not take is an error naming it: each is printed and the exit
status is 2.
";

/// What `weft config` prints for `args` with the variables of `lookup`, or the error text
/// (usage, or every bad value, one per line).
pub fn run(args: &[String], lookup: Lookup<'_>) -> Result<String, String> {
    let mut changed = false;
    let mut markdown = false;
    for a in args {
        match a.as_str() {
            "--changed" => changed = true,
            "--markdown" => markdown = true,
            "-h" | "--help" => return Ok(USAGE.to_string()),
            other => {
                return Err(format!(
                    "weft config: unknown argument {other:?}\n\n{USAGE}"
                ));
            }
        }
    }
    if changed && markdown {
        return Err(format!(
            "weft config: --changed and --markdown exclude each other\n\n{USAGE}"
        ));
    }
    if markdown {
        return Ok(doc::markdown());
    }
    let settings = Settings::from_lookup_or_defaults(lookup);
    if let Err(e) = settings.check() {
        let lines: Vec<String> = e.bad.iter().map(|b| format!("weft config: {b}")).collect();
        return Err(lines.join("\n"));
    }
    Ok(if changed {
        listing::changed(&settings)
    } else {
        listing::all(&settings)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn options_and_errors() {
        let env = |k: &str| (k == "NCCL_SOCKET_NTHREADS").then(|| "8".to_string());
        let all = run(&[], &env).unwrap();
        assert!(
            all.contains("* WEFT_SOCKET_NTHREADS / NCCL_SOCKET_NTHREADS = 8"),
            "{all}"
        );
        assert_eq!(
            run(&args(&["--changed"]), &env).unwrap(),
            "NCCL_SOCKET_NTHREADS set by environment to 8\n"
        );
        assert_eq!(run(&args(&["--markdown"]), &env).unwrap(), doc::markdown());
        assert!(
            run(&args(&["--help"]), &env)
                .unwrap()
                .starts_with("usage: weft config")
        );
        let e = run(&args(&["--loud"]), &env).unwrap_err();
        assert!(
            e.contains("unknown argument \"--loud\"") && e.contains("usage:"),
            "{e}"
        );
        assert!(run(&args(&["--changed", "--markdown"]), &env).is_err());
        let bad = |k: &str| match k {
            "NCCL_SOCKET_NTHREADS" => Some("99".to_string()),
            "WEFT_TRANSPORT" => Some("pigeon".to_string()),
            _ => None,
        };
        assert_eq!(
            run(&[], &bad).unwrap_err(),
            "weft config: NCCL_SOCKET_NTHREADS=\"99\": expected a number from 1 to 16\n\
             weft config: WEFT_TRANSPORT=\"pigeon\": expected auto, shm, net, ib or mesh"
        );
    }
}
