#!/usr/bin/env bash
# The alert rules of deploy/monitoring/, without PostgreSQL (seconds): promtool checks
# alerts.yml and runs its unit tests, alerts.test.yml (series that must fire beside series that
# must not), then every alert is checked for a summary and a runbook link to a heading of
# docs/monitoring.md. The queries file is tested live, with the real exporter, by the
# integration test `monitoring` (tests/integration/tests/monitoring.rs).
# promtool comes with Debian's `prometheus` package (scripts/setup.sh installs it).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v promtool >/dev/null; then
  echo "monitoring-test: promtool not found: install Debian's prometheus package (./scripts/setup.sh does)" >&2
  exit 1
fi
promtool check rules deploy/monitoring/alerts.yml
# Relative to the test file: its rule_files name alerts.yml beside it.
(cd deploy/monitoring && promtool test rules alerts.test.yml)
python3 scripts/doc_check.py runbooks deploy/monitoring/alerts.yml
echo "monitoring-test: alert rules: ok"
