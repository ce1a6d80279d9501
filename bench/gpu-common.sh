# Shared by bench/gpu-check.sh and bench/gpu-bench.sh (sourced, not run).
#
# The GPU machine's device tool brings back at most 8 files from $OUT: each
# script writes its summary and results there and packs its logs into one
# archive, NAME-logs.tar.gz, when it ends (whichever way it ends).
# Sets: root, bin, gpu, dest (where the results go: $OUT, else out/gpu),
# logs (a temporary folder of logs), device; and the functions below.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
bin=build-cuda/bin
gpu=build-cuda/gpu
dest=${OUT:-$root/out/gpu}
device=${DEVICE:-cuda}
mkdir -p "$dest"
[ -x "$bin/mtrun" ] && [ -f "$gpu/cases.txt" ] || {
  echo "$(basename "$0"): run scripts/gpu-prepare.sh first (and carry build-cuda/bin, build-cuda/gpu)" >&2
  exit 1
}
logs=$(mktemp -d)
# NAME: the prefix of this script's files in $dest.
gpu_begin() {
  name=$1
  summary="$dest/$name.txt"
  : > "$summary"
  trap 'tar -C "$logs" -czf "$dest/$name-logs.tar.gz" . 2>/dev/null; rm -rf "$logs"' EXIT
  result "machine: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null), $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(date -u '+%F %H:%M UTC')"
}
result() { echo "$1" | tee -a "$summary"; }
# The script stays under BUDGET seconds (each script sets its default, for
# a device call of at most 600 s): a stage that would not fit in what is
# left is skipped and says so, and each command's timeout is cut to what is
# left.
left() { echo $((budget - SECONDS)); }
cap() { local want=$1 rest; rest=$(left); [ "$rest" -lt "$want" ] && want=$rest; [ "$want" -lt 1 ] && want=1; echo "$want"; }
fits() { [ "$(left)" -ge "$1" ] || { result "$2: skipped (${1}s needed, $(left)s of the budget left)"; return 1; }; }
