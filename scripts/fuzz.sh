#!/usr/bin/env bash
# Runs every Fuzz* target of the module for a bounded number of executions
# each (default 20000x). A count rather than a duration: Go 1.26's fuzz
# coordinator can report a spurious "context deadline exceeded" when a
# duration expires while a worker is busy (go.dev/issue/75804).
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${1:-20000x}
found=0
while IFS= read -r pkg; do
	for target in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
		found=1
		echo "fuzz: $pkg $target ($fuzztime)"
		go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg" >/tmp/fuzz.$$.log 2>&1 || {
			cat /tmp/fuzz.$$.log
			rm -f /tmp/fuzz.$$.log
			exit 1
		}
		# The fuzzing time itself, without compilation: each target should
		# stay well under 10 s at 20000x on two cores.
		grep -E '^ok ' /tmp/fuzz.$$.log | awk '{print "fuzz:   " $NF}' || true
	done
done < <(grep -rl --include='*_test.go' '^func Fuzz' . | xargs -r -n1 dirname | sort -u | sed 's|^\.|github.com/vmmigration/terraform-provider-vmmigration|')
rm -f /tmp/fuzz.$$.log
[[ $found == 1 ]] && echo "fuzz: all targets passed" || echo "fuzz: no targets"
