//! docs/environment.md, written from the table (a test fails when the file is stale;
//! `weft config --markdown > docs/environment.md` writes it again).

use std::fmt::Write;

use crate::listing::default_text;
use crate::table::{Group, TABLE};

/// The whole of docs/environment.md.
pub fn markdown() -> String {
    let mut out = String::from(
        "# Environment variables\n\
         \n\
         Every variable weft reads, from one table (`config/src/table.rs`, crate weft-config);\n\
         this page is written from it by `weft config --markdown` and checked against it by\n\
         weft-config's tests. Where NCCL has a variable with the same meaning, weft reads it too,\n\
         after its own `WEFT_` name. A variable set to blanks counts as unset, as in NCCL.\n\
         \n\
         A value a variable does not take is an error naming the variable, the value and what is\n\
         allowed, except for the variables marked *ignored if bad*: as in NCCL, such a value is\n\
         ignored with a warning and the default kept.\n\
         \n\
         `weft config` prints every variable with its value here and its default; `weft config\n\
         --changed` only those set to other than their default, as `NCCL_DEBUG=INFO` lists them.\n\
         At `WEFT_DEBUG=INFO` (or `NCCL_DEBUG=INFO`), communicator init logs that list once.\n\
         Variables that only tests and scripts read (`WEFT_TEST_*`, `WEFT_REQUIRE_NVRTC`,\n\
         `WEFT_REQUIRE_GPU`) are not settings and are not listed.\n",
    );
    for group in Group::ALL {
        let _ = writeln!(out, "\n## {}: {}\n", group.name(), group.title());
        out.push_str("| variable | default | values | meaning |\n| --- | --- | --- | --- |\n");
        for entry in TABLE.iter().filter(|e| e.info().group == group) {
            let info = entry.info();
            let names: Vec<String> = info.names.iter().map(|n| format!("`{n}`")).collect();
            let bad = match info.on_bad {
                crate::table::OnBad::Reject => "",
                crate::table::OnBad::Ignore => " (ignored if bad)",
            };
            let _ = writeln!(
                out,
                "| {} | {} | {}{bad} | {} |",
                names.join(", "),
                cell(&default_text(info.unset)),
                cell(info.allowed),
                cell(info.about)
            );
        }
    }
    out
}

/// Text for a table cell: a `|` would end it.
fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docs_environment_md_is_written_from_the_table() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/environment.md");
        let on_disk = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            on_disk == markdown(),
            "docs/environment.md is stale: write it again with \
             `cargo run -p weft-cli -- config --markdown > docs/environment.md`"
        );
    }

    #[test]
    fn every_variable_has_a_row() {
        let doc = markdown();
        for e in TABLE {
            for n in e.info().names {
                assert!(doc.contains(&format!("`{n}`")), "{n}");
            }
        }
    }
}
