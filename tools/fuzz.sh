#!/usr/bin/env bash
# Longer fuzzing run: every harness for SECONDS (default 600) each, seeded from the committed
# corpus; new inputs go to .fuzz/<harness>/, the log to .fuzz/<harness>.log, a finding to
# .fuzz/crash-* (see docs/fuzzing.md). Exit code 1 if any harness found something.
# Usage: tools/fuzz.sh [SECONDS] [HARNESS...]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-600}"
shift || true
harnesses=("$@")
[ ${#harnesses[@]} -gt 0 ] || harnesses=(request sync_reply agent_value rest_query)
mkdir -p .fuzz
status=0
for harness in "${harnesses[@]}"; do
    if ! .venv/bin/python -m tests.fuzz.run "$harness" --seconds "$seconds" \
            --work ".fuzz/$harness" --artifacts .fuzz >".fuzz/$harness.log" 2>&1; then
        echo "$harness: FINDING, see .fuzz/$harness.log"
        status=1
    fi
    grep -E "^(fuzzing|Done|stat::number_of_executed|stat::new_units)" ".fuzz/$harness.log" || true
done
exit "$status"
