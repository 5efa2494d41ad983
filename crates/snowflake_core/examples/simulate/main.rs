//! A deterministic simulation of the durable reservation's protocol: servers, clocks, disks,
//! WAL and faults in virtual time, driving the real rules of `snowflake_core` (`generator`'s
//! claims, `resume`'s plans), never a copy of them, so that a mutation of the core fails here.
//!
//!     cargo run --release -p snowflake_core --example simulate -- [--seconds N | --minutes N]
//!         [--seed N [--verbose] [--shrink]] [--events N] [--keep-going] [--quiet] [--unfix f2|f3|f8]
//!
//! Without `--seed`, seeds are drawn from a random base (printed first) until the time budget
//! ends, then one summary line. One seed is one run, byte for byte: no threads, no sleeps, no
//! clock inside a run (only this driver reads `Instant`, between runs, for the budget).
//! `--unfix f2`, `f3` or `f8` runs the shard moves' procedure without that finding's fix
//! (docs/reliability.md), which the checks must then catch.

mod check;
mod faults;
mod rng;
mod shrink;
mod world;

use check::Violation;
use faults::{Event, TICK_MS};
use std::process::ExitCode;
use std::time::Instant;
use world::{Stats, Unfix, World};

struct Args {
    budget_s: f64,
    seed: Option<u64>,
    events: usize,
    quiet: bool,
    verbose: bool,
    shrink: bool,
    stop_at_first: bool,
    unfix: Unfix,
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        budget_s: 10.0,
        seed: None,
        events: 200,
        quiet: false,
        verbose: false,
        shrink: false,
        stop_at_first: true,
        unfix: Unfix::default(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value =
            |name: &str| -> Result<String, String> { it.next().ok_or(format!("{name} needs a value")) };
        let number = |text: String| text.parse::<f64>().map_err(|e| format!("{text}: {e}"));
        match arg.as_str() {
            "--seconds" => args.budget_s = number(value("--seconds")?)?,
            "--minutes" => args.budget_s = 60.0 * number(value("--minutes")?)?,
            "--seed" => args.seed = Some(value("--seed")?.parse().map_err(|e| format!("--seed: {e}"))?),
            "--events" => args.events = value("--events")?.parse().map_err(|e| format!("--events: {e}"))?,
            "--quiet" => args.quiet = true,
            "--verbose" => args.verbose = true,
            "--shrink" => args.shrink = true,
            "--stop-at-first" => args.stop_at_first = true,
            "--keep-going" => args.stop_at_first = false,
            "--unfix" => match value("--unfix")?.as_str() {
                "f2" => args.unfix.f2 = true,
                "f3" => args.unfix.f3 = true,
                "f8" => args.unfix.f8 = true,
                other => {
                    return Err(format!(
                        "--unfix {other}: the fixes the model can leave out are f2, f3 and f8"
                    ))
                }
            },
            "-h" | "--help" => {
                return Err("usage: simulate [--seconds N | --minutes N] [--seed N [--verbose] [--shrink]] \
                            [--events N] [--stop-at-first | --keep-going] [--quiet] [--unfix f2|f3|f8]"
                    .into())
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(args)
}

/// One run. A panic (an assertion of the core, or of the model, under a mutation) is a
/// violation too.
fn run(seed: u64, events: &[Event], verbose: bool, unfix: Unfix) -> (Result<(), Violation>, Stats) {
    let outcome = std::panic::catch_unwind(|| {
        let mut world = World::new(seed, verbose, unfix);
        let result = world.run(events);
        (result, world.stats)
    });
    outcome.unwrap_or_else(|payload| {
        let message = payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|text| text.to_string()))
            .unwrap_or_default();
        (Err(Violation { kind: "panic", message, at_ms: -1 }), Stats::default())
    })
}

/// Prints a failure and its shrunk schedule.
fn report(seed: u64, events: &[Event], violation: &Violation, shrink_and_trace: bool, unfix: Unfix) {
    println!(
        "simulate: FAILED seed {seed}: {} at t={} ms: {}",
        violation.kind, violation.at_ms, violation.message
    );
    let (shrunk, last, runs) =
        shrink::shrink(events, violation.kind, 3_000, |candidate| run(seed, candidate, false, unfix).0);
    println!(
        "simulate: shrunk to {} of {} events in {runs} runs (replay: --seed {seed}; shrunk trace: --seed {seed} \
         --shrink --verbose){}:",
        shrunk.len(),
        events.len(),
        last.map_or(String::new(), |v| format!(", failing at t={} ms: {}", v.at_ms, v.message))
    );
    let mut at = 0;
    for event in &shrunk {
        at += event.gap_ticks as i64 * TICK_MS;
        println!("    t={at:>7} ms  {:?}", event.kind);
    }
    if shrink_and_trace {
        println!("simulate: the shrunk run, traced:");
        let _ = run(seed, &shrunk, true, unfix);
    }
}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("simulate: {message}");
            return ExitCode::from(2);
        }
    };
    // Panics are reported as violations, with their message; no backtrace per shrink step.
    std::panic::set_hook(Box::new(|_| {}));
    if let Some(seed) = args.seed {
        let events = faults::schedule(seed, args.events);
        let (result, stats) = run(seed, &events, args.verbose && !args.shrink, args.unfix);
        return match result {
            Ok(()) => {
                println!("simulate: seed {seed}: ok, {} events; {}", events.len(), stats.line());
                ExitCode::SUCCESS
            }
            Err(violation) => {
                report(seed, &events, &violation, args.shrink && args.verbose, args.unfix);
                ExitCode::FAILURE
            }
        };
    }
    let base = rng::random_base();
    println!("simulate: seeds drawn from {base}");
    let started = Instant::now();
    let (mut runs, mut events_run, mut failed) = (0u64, 0u64, 0u64);
    let mut first_failure: Option<(f64, u64)> = None;
    let mut total = Stats::default();
    while started.elapsed().as_secs_f64() < args.budget_s {
        let seed = base.wrapping_add(runs);
        let events = faults::schedule(seed, args.events);
        let (result, stats) = run(seed, &events, false, args.unfix);
        runs += 1;
        events_run += events.len() as u64;
        total.add(&stats);
        if let Err(violation) = result {
            failed += 1;
            let at = started.elapsed().as_secs_f64();
            if first_failure.is_none() {
                first_failure = Some((at, seed));
                report(seed, &events, &violation, false, args.unfix);
            } else if !args.quiet {
                println!(
                    "simulate: FAILED seed {seed}: {} at t={} ms: {}",
                    violation.kind, violation.at_ms, violation.message
                );
            }
            if args.stop_at_first {
                break;
            }
        }
    }
    let secs = started.elapsed().as_secs_f64().max(1e-9);
    println!("simulate: coverage: {}", total.line());
    println!(
        "simulate: {runs} runs, {events_run} events in {secs:.1} s ({:.0} runs/s, {:.0} events/s), {failed} failed",
        runs as f64 / secs,
        events_run as f64 / secs
    );
    if let Some((at, seed)) = first_failure {
        println!("simulate: first failure after {at:.1} s, seed {seed}");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
