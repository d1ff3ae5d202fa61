#!/usr/bin/env bash
# Regenerate the result folders notebooks 01 and 03 read (notebooks/results/), from the repository
# root, with the package installed:  bash notebooks/regenerate_results.sh
# About 1.5 minutes (01) and 3 x 1-3 minutes (03) on 2 cores. Then re-execute the notebooks:
#   python -m pytest tests/test_notebooks.py -m "" --update-notebooks
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# 01: bursty on four serving designs, fixed H=128 vs no_sync, 10 seeds x 600 s
wadiloco sweep notebooks/sweeps/01_designs.yaml --out "$tmp/01" --workers 2 --no-progress --no-figures
mkdir -p notebooks/results/01_designs
cp "$tmp"/01/{summary.csv,runs.csv,provenance.json} notebooks/results/01_designs/

# 03: the capacity at 90% attainment as one field varies (4 seeds x 300 s, tol 0.02)
common=(--policy fixed --param H=128 --set fleet.hosts_per_island=1 --seeds 4 --horizon 300 --tol 0.02 --workers 2
        --no-progress)
cotenant=(--set engine.profile=b200_vllm0102_eager
          --set 'cotenant={profile_entry: matmul_6144x20, timetable: {kind: merges, window_s: 8}}')
whatif() {
  local name=$1; shift
  wadiloco whatif scenarios/bursty.yaml "${common[@]}" "$@" --out "$tmp/$name"
  mkdir -p "notebooks/results/03_whatif/$name"
  cp "$tmp/$name"/{whatif.csv,whatif.json} "notebooks/results/03_whatif/$name/"
}
whatif cotenant_window "${cotenant[@]}" --vary cotenant.timetable.window_s=2,8,16
whatif cotenant_wan "${cotenant[@]}" --vary fleet.interisland_gbps=5,25,100
whatif v0_serialize --set engine.step=sequential --vary merge.serialize_gbps=0.7,5.6,44.8
