#!/usr/bin/env bash
# Hardware-aware search figures of the README, in one command, on a QUIET machine (load < 1):
# the NB201 latency table (1 thread), its validation on 100 whole networks, the calibration fitted
# on those measurements, and the latency-aware searches (2 targets x 3 seeds, the unconstrained
# search, the budget-only selection) with the Pareto figure.
#   bash experiments/benchmarks/hardware_quiet.sh [OUT]        (default outputs/hardware)
set -euo pipefail
OUT=${1:-outputs/hardware}
mkdir -p "$OUT" docs/img
uptime
python3 -m nas.cli.profile --space nb201 --threads 1 -q -o "$OUT/nb201-cpu.json"
python3 experiments/benchmarks/latency_table.py --space nb201 --n 100 --threads 1 \
  --table "$OUT/nb201-cpu.json" --out "$OUT/validation.json"
python3 -m nas.cli.profile --from "$OUT/nb201-cpu.json" --measurements "$OUT/validation.json" \
  -o "$OUT/nb201-cpu-cal.json"
python3 experiments/benchmarks/nb201_latency_search.py --table "$OUT/nb201-cpu-cal.json" \
  --targets 8 12 --seeds 0 1 2 --jobs 2 --max-items 1600 --out "$OUT/search" \
  --figure docs/img/nb201_latency_pareto.png
uptime
