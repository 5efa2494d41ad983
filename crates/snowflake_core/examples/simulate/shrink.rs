//! Shrinking a failing schedule: delta debugging (ddmin) over its events, each candidate run
//! again from the same seed (configuration and background draws), kept while it still fails
//! with the same kind of violation.

use crate::check::Violation;
use crate::faults::Event;

/// The smallest schedule found that still fails like `kind`, its violation, and how many
/// runs it took. At most `max_runs` runs.
pub fn shrink(
    events: &[Event],
    kind: &str,
    max_runs: usize,
    run: impl Fn(&[Event]) -> Result<(), Violation>,
) -> (Vec<Event>, Option<Violation>, usize) {
    let mut current = events.to_vec();
    let mut found = None;
    let mut runs = 0;
    let mut parts = 2;
    while current.len() >= 2 && runs < max_runs {
        let chunk = current.len().div_ceil(parts);
        let mut reduced = false;
        for index in 0..parts {
            let (from, to) = (index * chunk, ((index + 1) * chunk).min(current.len()));
            if from >= to {
                continue;
            }
            let candidate: Vec<Event> = current[..from].iter().chain(&current[to..]).copied().collect();
            runs += 1;
            if let Err(violation) = run(&candidate) {
                if class(violation.kind) == class(kind) {
                    current = candidate;
                    found = Some(violation);
                    reduced = true;
                    break;
                }
            }
            if runs >= max_runs {
                break;
            }
        }
        if reduced {
            parts = (parts - 1).max(2);
        } else {
            if parts >= current.len() {
                break;
            }
            parts = (parts * 2).min(current.len());
        }
    }
    (current, found, runs)
}

/// Kinds that are one check: an ID at or below an earlier one is a duplicate or an order
/// violation depending only on whether it hits an issued range.
fn class(kind: &str) -> &str {
    match kind {
        "duplicate" | "order" => "ids",
        other => other,
    }
}
