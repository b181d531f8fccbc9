#!/usr/bin/env bash
# The registered field comparison (conf/ab/field_cpu.yaml), run or resumed on this machine from the one commit its
# runs are computed by, in a worktree of its own with its own editable install (so the checkout being worked on
# never joins the comparison). On a fresh machine it first restores the finished runs carried in
# docs/results/field_cpu/carry (`dormouse ab carry`, run from this checkout). Keep the test suite off the machine
# meanwhile: the cost table reads each run's tokens/s.
#
#   bash scripts/field_comparison.sh              # ~9-10 h at --jobs 2 on 2 cores (the registration's estimate); rerun to resume
#   python -m dormouse ab carry save field_cpu --root "$WT/runs/ab"   # from the checkout; then commit the carry folder
set -euo pipefail
COMMIT=c07fb04  # the commit the comparison started at (every run records its code fingerprint; a differing one is refused)
REPO=$(cd "$(dirname "$0")/.." && pwd)
WT=${WT:-$REPO/../field-comparison}
VENV=${VENV:-$WT.venv}
[ -d "$WT" ] || git -C "$REPO" worktree add "$WT" "$COMMIT"
[ -x "$VENV/bin/dormouse" ] || { python -m venv --system-site-packages "$VENV" && "$VENV/bin/pip" install -q -e "$WT" --no-deps; }
if [ -d "$REPO/docs/results/field_cpu/carry" ]; then
  (cd "$REPO" && python -m dormouse ab carry restore field_cpu --root "$WT/runs/ab")
fi
cd "$WT"
exec "$VENV/bin/dormouse" ab field_cpu --jobs 2 "$@"
