#!/usr/bin/env bash
# The README's main command: a demo against the bundled simulators.
set -euo pipefail
cd "$(dirname "$0")/.."
export CHECKPOINT_DISABLE=1 TF_IN_AUTOMATION=1
exec go run ./cmd/vmmigration-demo "$@"
