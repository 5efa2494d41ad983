//! A deterministic simulation of the registry's protocol (docs/registry.md): servers that claim
//! shards from one registry, each with a clock of its own (up to 30 s apart, stepped both ways),
//! under the faults the registry is for: two servers configured with one shard, a data
//! directory copied and started beside its original, a holder killed (its claim runs out), a
//! holder's standby promoted with its old primary left running, a machine paused past the
//! claim's lease, the registry down, answers lost. It drives the real rules of
//! `snowflake_core::registry` (`verdict`, `resume_floor`, `ceiling_within_mark`, `mark_due`,
//! `mark_to_record`, `ceiling_while_down`), never a copy of them, and checks every run: no ID
//! given twice, a shard's IDs above every earlier holder's once it changes hands, and every
//! shard issued again within the claim's lease once the faults stop.
//!
//!     cargo run --release -p snowflake_core --example registry -- [--seconds N]
//!         [--seed N [--verbose]] [--stop-at-first | --keep-going] [--quiet]
//!
//! Without `--seed`, seeds are drawn from a random base (printed first) until the budget ends,
//! in the output format of `simulate` (which `scripts/simulate.sh --registry --mutations` reads).
//! One seed is one run, byte for byte: no threads, no sleeps, no clock inside a run.
//!
//! What it leaves to others: inside one server, the reservation is reduced to what the
//! registry bounds (IDs from the clock, above the floor, below a ceiling recorded durably before
//! it is published); the reservation's own protocol (WAL, the record file, crash recovery,
//! promotions' guards) is `simulate`'s. A promoted standby here resumes from a copy of its
//! primary's record that may lag by seconds and has no guard of its own: the mark alone must
//! keep it above the old primary.

#[path = "../simulate/rng.rs"]
mod rng;
mod world;

use std::process::ExitCode;
use std::time::Instant;
use world::World;

struct Args {
    budget_s: f64,
    seed: Option<u64>,
    verbose: bool,
    stop_at_first: bool,
    quiet: bool,
}

fn parse() -> Result<Args, String> {
    let mut args = Args { budget_s: 10.0, seed: None, verbose: false, stop_at_first: true, quiet: false };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "--seconds" => {
                let text = value("--seconds")?;
                args.budget_s = text.parse().map_err(|e| format!("--seconds {text}: {e}"))?;
            }
            "--seed" => {
                let text = value("--seed")?;
                args.seed = Some(text.parse().map_err(|e| format!("--seed {text}: {e}"))?);
            }
            "--verbose" => args.verbose = true,
            "--stop-at-first" => args.stop_at_first = true,
            "--keep-going" => args.stop_at_first = false,
            "--quiet" => args.quiet = true,
            other => {
                return Err(format!(
                    "unknown argument {other}; usage: registry [--seconds N] [--seed N [--verbose]] \
                     [--stop-at-first | --keep-going] [--quiet]"
                ))
            }
        }
    }
    Ok(args)
}

/// One run; a panic (an assertion of the model under a mutation) is a failure too.
fn run(seed: u64, verbose: bool) -> Result<world::Stats, String> {
    std::panic::catch_unwind(|| World::new(seed, verbose).run()).unwrap_or_else(|payload| {
        let message = payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|text| text.to_string()))
            .unwrap_or_default();
        Err(format!("panic: {message}"))
    })
}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("registry: {message}");
            return ExitCode::from(2);
        }
    };
    std::panic::set_hook(Box::new(|_| {}));
    if let Some(seed) = args.seed {
        return match run(seed, args.verbose) {
            Ok(stats) => {
                println!("registry: seed {seed}: ok; {}", stats.line());
                ExitCode::SUCCESS
            }
            Err(message) => {
                println!("registry: FAILED seed {seed}: {message} (traced: --seed {seed} --verbose)");
                ExitCode::FAILURE
            }
        };
    }
    let base = rng::random_base();
    println!("registry: seeds drawn from {base}");
    let started = Instant::now();
    let mut total = world::Stats::default();
    let (mut runs, mut failed) = (0u64, 0u64);
    let mut first_failure: Option<(f64, u64)> = None;
    while started.elapsed().as_secs_f64() < args.budget_s {
        let seed = base.wrapping_add(runs);
        runs += 1;
        match run(seed, false) {
            Ok(stats) => total.add(&stats),
            Err(message) => {
                failed += 1;
                if first_failure.is_none() || !args.quiet {
                    println!("registry: FAILED seed {seed}: {message} (traced: --seed {seed} --verbose)");
                }
                first_failure.get_or_insert((started.elapsed().as_secs_f64(), seed));
                if args.stop_at_first {
                    break;
                }
            }
        }
    }
    let secs = started.elapsed().as_secs_f64().max(1e-9);
    println!("registry: coverage: {}", total.line());
    println!("registry: {runs} runs in {secs:.1} s ({:.0} runs/s), {failed} failed", runs as f64 / secs);
    if let Some((at, seed)) = first_failure {
        println!("registry: first failure after {at:.1} s, seed {seed}");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
