#!/usr/bin/env bash
# The registered depth study (conf/ab/depth_cpu.yaml), run or resumed from the commit it started at
# (scripts/frozen_run.sh says how). Keep the test suite off the machine meanwhile.
#
#   bash scripts/depth_study.sh                 # 8-15 h at --jobs 2 on 2 cores (docs/results/depth_cpu); rerun to resume
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
WT=${WT:-$REPO/../study-depth} exec bash "$REPO/scripts/frozen_run.sh" depth_cpu dbf4baf "$@"
