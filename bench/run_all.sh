#!/usr/bin/env bash
# Run every benchmark in bench/ (bench_*.py), one after another, with the project's venv.
# Usage: bench/run_all.sh [PYTHON]     (default: the project's .venv/bin/python, else python3)
# Exit status: the number of benchmarks that failed (0 when all ran).
set -u
here="$(cd "$(dirname "$0")" && pwd)"
py="${1:-}"
if [ -z "$py" ]; then
  for cand in "$here/../.venv/bin/python"; do
    if [ -x "$cand" ]; then py="$cand"; break; fi
  done
fi
py="${py:-python3}"
failed=0
for bench in "$here"/bench_*.py; do
  name="$(basename "$bench")"
  echo "=== $name ($(date -u +%H:%M:%S), load: $(cut -d' ' -f1-3 /proc/loadavg))"
  start=$(date +%s)
  if (cd "$here/.." && "$py" "$bench"); then
    echo "=== $name: ok in $(( $(date +%s) - start )) s"
  else
    echo "=== $name: FAILED (exit $?) after $(( $(date +%s) - start )) s"
    failed=$((failed + 1))
  fi
done
echo "=== $failed benchmark(s) failed"
exit "$failed"
