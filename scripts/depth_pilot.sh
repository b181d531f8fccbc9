#!/usr/bin/env bash
# The pilot registered in conf/ab/depth_cpu.yaml: the pre-norm baseline at each of the study's depths
# (model.max_iter 2, 4, 8), trained with the loss on the last readout only (train.readout=last), on the
# embedded corpus. Two runs at a time, one thread each, as `dormouse ab depth_cpu --jobs 2` runs them.
# What it must show: at the deepest point bpb@k still falls from k = 7 to k = 8 (the baseline uses its last
# iteration). Its eval set is smaller than the study's (32 KiB, every 500 steps): it is a pilot, not a verdict.
#
#   bash scripts/depth_pilot.sh            # writes runs/depth_pilot/iter-{2,4,8}/ (about 6 min on 2 cores)
set -euo pipefail
out=${1:-runs/depth_pilot}
pilot() {
  OMP_NUM_THREADS=1 dormouse train model.use_prenorm=true model.d_model=64 model.n_heads=4 data.seq_len=128 \
    train.batch_size=16 train.eval_every=500 data.eval_bytes=32768 train.warmup=100 train.device=cpu \
    train.readout=last model.max_iter="$1" run.dir="$out" run.name="iter-$1"
}
pilot 8 & pilot 4; pilot 2; wait
grep -h "^done" "$out"/iter-*/train.log || true
