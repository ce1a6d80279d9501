#!/usr/bin/env bash
# Install, build, and run every test (GoogleTest, lit + FileCheck, layering),
# then the fuzz targets for a bounded time (MT_FUZZ_SECONDS per target,
# default 15; 0 skips them).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/bootstrap.sh"
# The tests against Hugging Face's own client need torch and transformers
# (pinned, in a venv of their own); without them those tests are
# unsupported, and this says so.
if ! "$root/scripts/export-venv.sh" > /dev/null; then
  echo "test.sh: warning: scripts/export-venv.sh failed; the from_pretrained" \
       "round trips will be reported unsupported" >&2
fi
ctest --test-dir "$root/build" --output-on-failure -j "$(nproc)"
seconds=${MT_FUZZ_SECONDS:-15}
if [ "$seconds" != 0 ]; then
  "$root/scripts/fuzz.sh" "$seconds"
fi
