//! `weft topo` until the `weft` binary dispatches to it: prints what
//! `weft::topo::run_topo` returns.
//!
//! ```text
//! cargo run -p weft-driver --example weft_topo -- --file tests/fixtures/topo/dgx-h100.xml
//! ```

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match weft::topo::run_topo(&args) {
        Ok(out) => {
            for n in &out.notes {
                eprintln!("{n}");
            }
            print!("{}", out.text);
        }
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    }
}
