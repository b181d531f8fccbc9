#!/usr/bin/env bash
# The registered depth study (conf/ab/depth_cpu.yaml), run or resumed on this machine from the one commit its
# runs are computed by, in a worktree of its own with its own editable install (so the checkout being worked on
# never joins the study). On a fresh machine it first restores the finished runs carried in
# docs/results/depth_cpu/carry (`dormouse ab carry`, run from this checkout). Keep the test suite off the machine
# meanwhile.
#
#   bash scripts/depth_study.sh                 # 8-15 h at --jobs 2 on 2 cores (docs/results/depth_cpu); rerun to resume
#   python -m dormouse ab carry save depth_cpu --root "$WT/runs/ab"   # from the checkout; then commit the carry folder
set -euo pipefail
COMMIT=dbf4baf  # the commit the study started at (every run records its code fingerprint; a differing one is refused)
REPO=$(cd "$(dirname "$0")/.." && pwd)
WT=${WT:-$REPO/../study-depth}
VENV=${VENV:-$WT.venv}
[ -d "$WT" ] || git -C "$REPO" worktree add "$WT" "$COMMIT"
[ -x "$VENV/bin/dormouse" ] || { python -m venv --system-site-packages "$VENV" && "$VENV/bin/pip" install -q -e "$WT" --no-deps; }
if [ -d "$REPO/docs/results/depth_cpu/carry" ]; then
  (cd "$REPO" && python -m dormouse ab carry restore depth_cpu --root "$WT/runs/ab")
fi
cd "$WT"
exec "$VENV/bin/dormouse" ab depth_cpu --jobs 2 "$@"
