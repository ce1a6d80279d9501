#!/usr/bin/env bash
# Install, build, and run every test (GoogleTest, lit + FileCheck, layering),
# then the fuzz targets for a bounded time (MT_FUZZ_SECONDS per target,
# default 15; 0 skips them).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/bootstrap.sh"
ctest --test-dir "$root/build" --output-on-failure -j "$(nproc)"
seconds=${MT_FUZZ_SECONDS:-15}
if [ "$seconds" != 0 ]; then
  "$root/scripts/fuzz.sh" "$seconds"
fi
