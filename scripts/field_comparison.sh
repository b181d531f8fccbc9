#!/usr/bin/env bash
# The registered field comparison (conf/ab/field_cpu.yaml), run or resumed from the commit it started at
# (scripts/frozen_run.sh says how). Keep the test suite off the machine meanwhile: the cost table reads each run's
# tokens/s.
#
#   bash scripts/field_comparison.sh            # ~9-10 h at --jobs 2 on 2 cores (the registration's estimate); rerun to resume
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
WT=${WT:-$REPO/../field-comparison} exec bash "$REPO/scripts/frozen_run.sh" field_cpu c07fb04 "$@"
