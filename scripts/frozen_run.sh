#!/usr/bin/env bash
# Run or resume a long registered comparison or study on this machine from the one commit its runs are computed by,
# in a worktree of its own with its own editable install (so the checkout being worked on never joins it). On a
# fresh machine it first restores the finished runs carried in docs/results/NAME/carry (`dormouse ab carry`, run
# from this checkout). Every run records its code fingerprint, and a run from other code is refused.
#
#   bash scripts/frozen_run.sh NAME COMMIT [dormouse ab options]     # WT: the worktree (default ../frozen-NAME)
#   python -m dormouse ab carry save NAME --root "$WT/runs/ab"        # from the checkout; then commit the carry folder
set -euo pipefail
NAME=$1
COMMIT=$2
shift 2
REPO=$(cd "$(dirname "$0")/.." && pwd)
WT=${WT:-$REPO/../frozen-$NAME}
VENV=${VENV:-$WT.venv}
[ -d "$WT" ] || git -C "$REPO" worktree add "$WT" "$COMMIT"
[ -x "$VENV/bin/dormouse" ] || { python -m venv --system-site-packages "$VENV" && "$VENV/bin/pip" install -q -e "$WT" --no-deps; }
if [ -d "$REPO/docs/results/$NAME/carry" ]; then
  (cd "$REPO" && python -m dormouse ab carry restore "$NAME" --root "$WT/runs/ab")
fi
cd "$WT"
exec "$VENV/bin/dormouse" ab "$NAME" --jobs 2 "$@"
