//! The settings as text: every variable with its value and default (`weft config`), or only
//! those set to something else than their default, one line each as `NCCL_DEBUG=INFO`
//! prints them (`weft config --changed`).

use std::fmt::Write;

use crate::settings::Settings;
use crate::table::{Group, TABLE, WhenUnset};

/// What a variable is when unset, as listings and the doc say it.
pub fn default_text(unset: WhenUnset) -> String {
    match unset {
        WhenUnset::Value(v) => v.to_string(),
        WhenUnset::Means(m) => format!("unset: {m}"),
    }
}

/// Every variable of the table, by group: `*` marks a value other than the default, `!` a
/// value that was ignored.
pub fn all(settings: &Settings) -> String {
    let mut out = String::from(
        "# weft's environment variables: * set to other than the default, ! value ignored\n",
    );
    for group in Group::ALL {
        let _ = writeln!(out, "\n# {}: {}", group.name(), group.title());
        for entry in TABLE.iter().filter(|e| e.info().group == group) {
            let info = entry.info();
            let names = info.names_joined();
            let default = default_text(info.unset);
            match settings.origin(info) {
                Some(o) if o.differs => {
                    let _ = writeln!(
                        out,
                        "* {names} = {} (from {}; default {default})",
                        o.value, o.name
                    );
                }
                Some(o) => {
                    let _ = writeln!(
                        out,
                        "  {names} = {} (from {}, the default)",
                        o.value, o.name
                    );
                }
                None => match settings.bad_value_of(info) {
                    Some(b) => {
                        let _ = writeln!(out, "! {names} = {default} ({b})");
                    }
                    None => {
                        let _ = writeln!(out, "  {names} = {default}");
                    }
                },
            }
        }
    }
    out
}

/// The variables set to something other than their default, as `NCCL_DEBUG=INFO` lists
/// them (`NCCL_SOCKET_IFNAME set by environment to eth0`), then each value ignored.
pub fn changed(settings: &Settings) -> String {
    let mut out = String::new();
    for o in settings.changed() {
        let _ = writeln!(out, "{} set by environment to {}", o.name, o.value);
    }
    for b in settings.bad().iter().filter(|b| b.ignored) {
        let _ = writeln!(out, "{b}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(pairs: &'static [(&'static str, &'static str)]) -> Settings {
        Settings::from_lookup(&|k: &str| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        })
        .unwrap()
    }

    #[test]
    fn the_full_listing_marks_what_differs_and_says_where_it_came_from() {
        let s = settings(&[
            ("NCCL_SOCKET_NTHREADS", "8"),
            ("WEFT_NSOCKS_PERTHREAD", " 1 "),
            ("NCCL_P2P_LEVEL", "FAST"),
            ("NCCL_SOCKET_IFNAME", "^docker"),
        ]);
        let text = all(&s);
        assert!(
            text.contains(
                "\n* WEFT_SOCKET_NTHREADS / NCCL_SOCKET_NTHREADS = 8 (from NCCL_SOCKET_NTHREADS; default 4)\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "\n  WEFT_NSOCKS_PERTHREAD / NCCL_NSOCKS_PERTHREAD = 1 (from WEFT_NSOCKS_PERTHREAD, the default)\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "\n! NCCL_P2P_LEVEL = unset: PXB, or SYS on AMD hosts with at most two GPUs \
                 (NCCL_P2P_LEVEL=\"FAST\" ignored: expected LOC, NVL, PIX, PXB, PHB, SYS or 0..5)\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("\n* WEFT_SOCKET_IFNAME / NCCL_SOCKET_IFNAME = ^docker (from NCCL_SOCKET_IFNAME; default unset: NCCL's order"),
            "{text}"
        );
        assert!(text.contains("\n  WEFT_TRANSPORT = auto\n"), "{text}");
        // One line per variable, under one heading per group.
        let rows = text
            .lines()
            .filter(|l| l.starts_with(['*', '!', ' ']))
            .count();
        assert_eq!(rows, TABLE.len());
        for g in Group::ALL {
            assert!(text.contains(&format!("\n# {}: ", g.name())), "{g:?}");
        }
    }

    #[test]
    fn the_changed_listing_is_nccls() {
        let s = settings(&[
            ("NCCL_SOCKET_NTHREADS", "8"),
            ("WEFT_NSOCKS_PERTHREAD", "1"),
            ("WEFT_ALGO", "oneshot"),
            ("NCCL_P2P_LEVEL", "FAST"),
        ]);
        assert_eq!(
            changed(&s),
            "NCCL_SOCKET_NTHREADS set by environment to 8\n\
             WEFT_ALGO set by environment to oneshot\n\
             NCCL_P2P_LEVEL=\"FAST\" ignored: expected LOC, NVL, PIX, PXB, PHB, SYS or 0..5\n"
        );
        assert_eq!(changed(&settings(&[])), "");
    }
}
