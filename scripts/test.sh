#!/usr/bin/env bash
# Runs every Go test. The acceptance tests of internal/provider are the
# longest package by far (they drive real migrations through the Terraform
# CLI, one at a time); they run as their own `go test` beside the other
# packages instead of after them, each with its own test cluster, so that
# the suite takes about as long as that one package.
set -euo pipefail
cd "$(dirname "$0")/.."
timeout=${TEST_TIMEOUT:-60m}
acc=github.com/vmmigration/terraform-provider-vmmigration/internal/provider
out=$(mktemp)
trap 'rm -f "$out"' EXIT

TF_ACC=1 go test -count=1 -timeout "$timeout" "$acc" >"$out" 2>&1 &
acc_pid=$!

rest_status=0
TF_ACC=1 go test -count=1 -timeout "$timeout" $(go list ./... | grep -vx "$acc") || rest_status=$?

acc_status=0
wait "$acc_pid" || acc_status=$?
cat "$out"
if ((rest_status != 0 || acc_status != 0)); then
	exit 1
fi
