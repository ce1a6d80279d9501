#!/usr/bin/env bash
# Install, build, and run every test (GoogleTest, lit + FileCheck, layering).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/bootstrap.sh"
ctest --test-dir "$root/build" --output-on-failure -j "$(nproc)"
