#!/usr/bin/env bash
# Regenerates the documentation into a scratch directory and fails if it
# differs from docs/, or if an example is not `terraform fmt`-formatted.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! terraform fmt -check -recursive examples >/dev/null; then
	echo "examples/ are not formatted: run 'make generate'" >&2
	terraform fmt -check -recursive -diff examples >&2 || true
	exit 1
fi
# tfplugindocs takes the output directory relative to the repository.
tmp=.docs-check
rm -rf "$tmp"
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
go tool tfplugindocs generate --provider-name vmmigration --rendered-website-dir "$tmp/docs" >"$tmp/log" 2>&1 || {
	cat "$tmp/log" >&2
	exit 1
}
if ! diff -ru docs "$tmp/docs"; then
	echo "docs/ is out of date: run 'make generate' and commit the result" >&2
	exit 1
fi
echo "docs/ is up to date"
