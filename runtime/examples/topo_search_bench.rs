//! Channel search time on the DGX-H100-like fixture (8 GPUs on an NVSwitch, 8 NICs, two
//! sockets): median of 20 runs of each step, in release.
//!
//! ```text
//! cargo run --release -p weft-runtime --example topo_search_bench
//! ```
//!
//! Rows: the single-host search `weft topo` runs (ring, tree, NVLS), and the inter-node
//! search (ring and tree through the NICs, as for 2+ hosts), each with and without path
//! computation; the issue's target is under 50 ms for the whole search.

use std::hint::black_box;
use std::time::{Duration, Instant};
use weft_core::search::{Pattern, SearchOptions, compute};
use weft_core::topo::system_xml::parse_topology;
use weft_core::topo::{PathOptions, compute_paths};

const DGX: &str = include_str!("../../tests/fixtures/topo/dgx-h100.xml");
const RUNS: usize = 20;

fn median(mut f: impl FnMut()) -> Duration {
    let mut times: Vec<Duration> = (0..RUNS)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    times.sort();
    times[RUNS / 2]
}

fn main() {
    let (topo, _) = parse_topology(DGX).expect("fixture loads");
    let paths = compute_paths(&topo, &PathOptions::default());
    let search = |inter: bool| {
        let ring = compute(&topo, &paths, 0, Pattern::Ring, &SearchOptions::ring(inter));
        let tree = compute(
            &topo,
            &paths,
            1,
            Pattern::BalancedTree,
            &SearchOptions::tree(inter, ring.nchannels()),
        );
        let nvls = compute(&topo, &paths, 3, Pattern::Nvls, &SearchOptions::nvls(inter));
        (ring, tree, nvls)
    };
    for inter in [false, true] {
        let (r, t, n) = search(inter);
        println!(
            "# {} host(s): ring: {} (step budget exhausted: {})",
            if inter { "2" } else { "1" },
            r.summary(),
            r.budget_exhausted
        );
        println!("#              tree: {}", t.summary());
        println!("#              nvls: {}", n.summary());
    }
    let rows = [
        (
            "parse XML",
            median(|| drop(black_box(parse_topology(black_box(DGX))))),
        ),
        (
            "compute paths",
            median(|| drop(black_box(compute_paths(&topo, &PathOptions::default())))),
        ),
        (
            "ring only, 1 host",
            median(|| {
                black_box(compute(
                    &topo,
                    &paths,
                    0,
                    Pattern::Ring,
                    &SearchOptions::ring(false),
                ));
            }),
        ),
        (
            "tree only, 1 host",
            median(|| {
                black_box(compute(
                    &topo,
                    &paths,
                    1,
                    Pattern::BalancedTree,
                    &SearchOptions::tree(false, 12),
                ));
            }),
        ),
        (
            "nvls only, 1 host",
            median(|| {
                black_box(compute(
                    &topo,
                    &paths,
                    3,
                    Pattern::Nvls,
                    &SearchOptions::nvls(false),
                ));
            }),
        ),
        (
            "search 1 host (ring+tree+nvls)",
            median(|| drop(black_box(search(false)))),
        ),
        (
            "search 2 hosts (ring+tree+nvls)",
            median(|| drop(black_box(search(true)))),
        ),
        (
            "parse + paths + search, 1 host",
            median(|| {
                let (t, _) = parse_topology(DGX).expect("fixture loads");
                let p = compute_paths(&t, &PathOptions::default());
                let ring = compute(&t, &p, 0, Pattern::Ring, &SearchOptions::ring(false));
                let tree = compute(
                    &t,
                    &p,
                    1,
                    Pattern::BalancedTree,
                    &SearchOptions::tree(false, ring.nchannels()),
                );
                let nvls = compute(&t, &p, 3, Pattern::Nvls, &SearchOptions::nvls(false));
                black_box((ring, tree, nvls));
            }),
        ),
    ];
    println!("| step (dgx-h100.xml, median of {RUNS}) | time |");
    println!("| --- | --- |");
    for (what, d) in rows {
        println!("| {what} | {:.3} ms |", d.as_secs_f64() * 1e3);
    }
}
