//! `weft`: look at a machine and measure it.
//!
//! - `weft perf <collective> [options]`: nccl-tests' measurements on weft's CPU executor,
//!   with local rank processes (`--ranks N`) or as one rank of a larger job (`--id`).
//! - `weft unique-id`: prints a fresh unique id and serves its rendezvous, for `--id`.
//! - `weft topo [options]`: the machine's topology, paths and channels (`topo`).
//! - `weft kernels [options]`: compiles the CUDA kernels into the on-disk cache ahead of time.
//! - `weft config [--changed]`: every environment variable weft reads, its value and default.
//! - `weft status [ADDR]`: what every rank of a running job is doing, and which holds it up.

mod args;
mod config;
mod kernels;
mod perf;
mod perf_cuda;
mod perf_host;
mod spawn;
mod status;
mod topo;

use std::process::ExitCode;

use weft_config::DebugLevel;

const USAGE: &str = "\
usage: weft <command> [options]

commands:
  perf <all-reduce|reduce-scatter|all-gather|broadcast|reduce|sendrecv> [options]
        measure a collective the way nccl-tests does (weft perf --help for options)
  topo [options]
        the machine's topology as NCCL sees it: devices, paths, channels, NCCL's XML dumps
        (weft topo --help for options)
  kernels [--arch 9.0] [--dtype float]
        compile weft's CUDA kernels into the kernel cache ahead of time (no GPU needed)
  config [--changed]
        every environment variable weft reads, its value here and its default; --changed:
        only those set to other than their default, as NCCL_DEBUG=INFO lists them
  status [ADDR ...] [--json]
        ask every rank of a running job what it is doing and name the rank that holds it
        up (weft status --help)
  unique-id
        print a unique id for `weft perf --id` and serve its rendezvous until every rank
        has checked in
  help  this text
";

fn main() -> ExitCode {
    init_logging();
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let Some((command, rest)) = argv.split_first() else {
        eprint!("{USAGE}");
        return ExitCode::from(2);
    };
    match command.as_str() {
        "perf" => perf::main(rest),
        "unique-id" => unique_id(),
        "topo" => topo(rest),
        "kernels" => kernels::main(rest),
        "config" => config(rest),
        "status" => status::main(rest),
        "help" | "--help" | "-h" => {
            print!("{USAGE}");
            ExitCode::SUCCESS
        }
        other => {
            eprintln!("weft: unknown command {other:?}\n\n{USAGE}");
            ExitCode::from(2)
        }
    }
}

fn topo(args: &[String]) -> ExitCode {
    match topo::run_topo(args) {
        Ok(out) => {
            for note in &out.notes {
                eprintln!("# {note}");
            }
            print!("{}", out.text);
            for path in &out.written {
                eprintln!("# wrote {}", path.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            // TopoCliError's message starts with "weft topo: " itself.
            eprintln!("{e}");
            ExitCode::from(2)
        }
    }
}

fn config(args: &[String]) -> ExitCode {
    match config::run(args, &weft_config::lookup::process) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(2)
        }
    }
}

fn unique_id() -> ExitCode {
    let opts = weft_runtime::bootstrap::BootstrapOptions::from_settings(
        &weft_config::Settings::from_env_or_defaults(),
    );
    match weft_runtime::bootstrap::BootstrapRoot::start(&opts) {
        Ok((id, root)) => {
            println!("{}", id.to_hex());
            // Flush before blocking: a caller reading our stdout needs the id now.
            use std::io::Write;
            let _ = std::io::stdout().flush();
            match root.wait() {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("weft unique-id: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Err(e) => {
            eprintln!("weft unique-id: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `WEFT_DEBUG` (or `NCCL_DEBUG`) = `WARN` (default), `INFO`, `DEBUG` or `TRACE`, to stderr.
fn init_logging() {
    // Read quietly: a bad value is reported by whoever reads the settings after this
    // logger is in place.
    let settings = weft_config::Settings::from_lookup_or_defaults(&weft_config::lookup::process);
    let level = match settings.debug.level {
        Some(DebugLevel::Info) => log::LevelFilter::Info,
        Some(DebugLevel::Trace) => log::LevelFilter::Trace,
        Some(DebugLevel::Debug) => log::LevelFilter::Debug,
        Some(DebugLevel::Version | DebugLevel::Warn | DebugLevel::Abort) | None => {
            log::LevelFilter::Warn
        }
    };
    static LOGGER: StderrLog = StderrLog;
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(level);
    }
}

/// Log lines as NCCL prints them: `host:pid:tid [rank] LEVEL message`, without the
/// clutter; the rank comes from the role of the process.
struct StderrLog;

impl log::Log for StderrLog {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &log::Record<'_>) {
        if self.enabled(record.metadata()) {
            eprintln!(
                "{}: weft {} {}",
                std::process::id(),
                record.level(),
                record.args()
            );
        }
    }

    fn flush(&self) {}
}
