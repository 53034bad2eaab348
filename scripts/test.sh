#!/usr/bin/env bash
# Runs every Go test. The acceptance tests of internal/provider are the
# longest package by far (they drive real migrations through the Terraform
# CLI, one at a time, mostly waiting on the simulated cluster, on guests
# and on the Terraform CLI rather than computing); they run as two
# `go test` processes beside the other packages instead of after them,
# each with its own test cluster and about half of the work: the tests
# are dealt longest first (scripts/acctest-seconds, measured by a run with
# TEST_LOG_DIR) to the shard with less so far.
#
# The real guests the tests boot and convert run under TCG, one CPU-bound
# QEMU each (guestslot limits how many at once), and have timeouts inside
# them (systemd's device jobs, virt-v2v's own); with everything else the
# run does on two cores, they got a sixth of a core each and their
# conversions took six times as long as on an idle machine. The tests
# therefore run at nice $TEST_NICE (default 5) and, when this script may
# raise priorities (root), every QEMU thread is moved back to nice 0 as it
# appears: the guests get the CPU first, the rest still about 60% of it.
#
# TEST_LOG_DIR=dir keeps each process's verbose output (-v, with every
# test's duration) in dir and prints only results and failures.
set -euo pipefail
cd "$(dirname "$0")/.."
timeout=${TEST_TIMEOUT:-70m}
acc=github.com/vmmigration/terraform-provider-vmmigration/internal/provider
logdir=${TEST_LOG_DIR:-}
verbose=()
if [[ -n $logdir ]]; then
	mkdir -p "$logdir"
	verbose=(-v)
fi
outs=()
pids=()
favor_pid=
cleanup() {
	[[ -z $favor_pid ]] || kill "$favor_pid" 2>/dev/null || true
	[[ -n $logdir ]] || rm -f "${outs[@]}"
}
trap cleanup EXIT

niced=()
if [[ $(id -u) -eq 0 ]] && command -v renice >/dev/null && command -v pgrep >/dev/null; then
	niced=(nice -n "${TEST_NICE:-5}")
	# Only this run's QEMUs (descendants of this script), every thread:
	# QEMU starts its vCPU threads after its main thread, and a nice value
	# is a thread's.
	ours() {
		local p=$1 stat
		while [[ -n $p && $p -gt 1 ]]; do
			[[ $p -eq $$ ]] && return 0
			# A process may end between pgrep and here: quietly not ours.
			{ stat=$(<"/proc/$p/stat"); } 2>/dev/null || return 1
			# After the command name: state, then the parent's PID.
			stat=${stat##*) }
			p=${stat#* }
			p=${p%% *}
		done
		return 1
	}
	favor_guests() {
		while sleep 1; do
			for p in $(pgrep -x qemu-system-x86 || true); do
				ours "$p" || continue
				for task in /proc/"$p"/task/*; do
					renice -n 0 -p "${task##*/}" >/dev/null 2>&1 || true
				done
			done
		done
	}
	favor_guests &
	favor_pid=$!
fi

tests=$(go test -list '^Test' "$acc" | grep '^Test' || true)
if [[ -z $tests ]]; then
	echo "no tests listed in $acc" >&2
	exit 1
fi
# Seconds per test (unlisted tests count 30), longest first, each to the
# shard with fewer seconds so far.
shards=$(awk 'NR == FNR { if ($1 !~ /^#/ && NF == 2) s[$1] = $2; next }
	{ print (($1 in s) ? s[$1] : 30), $1 }' scripts/acctest-seconds - <<<"$tests" |
	sort -k1,1nr -k2 |
	awk '{ i = (load[0] <= load[1]) ? 0 : 1; load[i] += $1; names[i] = names[i] (names[i] == "" ? "" : "|") $2 }
	END { print names[0]; print names[1] }')
shard=0
while IFS= read -r names; do
	[[ -n $names ]] || continue
	if [[ -n $logdir ]]; then
		out=$logdir/acceptance-$shard.log
	else
		out=$(mktemp)
	fi
	outs+=("$out")
	TF_ACC=1 "${niced[@]}" go test -count=1 "${verbose[@]}" -timeout "$timeout" -run "^($names)\$" "$acc" >"$out" 2>&1 &
	pids+=($!)
	shard=$((shard + 1))
done <<<"$shards"

rest_status=0
if [[ -n $logdir ]]; then
	TF_ACC=1 "${niced[@]}" go test -count=1 -v -timeout "$timeout" $(go list ./... | grep -vx "$acc") >"$logdir/packages.log" 2>&1 || rest_status=$?
	grep -E '^(ok|FAIL|panic:|--- FAIL|\?)' "$logdir/packages.log" || true
else
	TF_ACC=1 "${niced[@]}" go test -count=1 -timeout "$timeout" $(go list ./... | grep -vx "$acc") || rest_status=$?
fi

acc_status=0
for i in "${!pids[@]}"; do
	wait "${pids[$i]}" || acc_status=$?
	if [[ -n $logdir ]]; then
		grep -E '^(ok|FAIL|panic:|--- FAIL)' "${outs[$i]}" || true
	else
		cat "${outs[$i]}"
	fi
done
if ((rest_status != 0 || acc_status != 0)); then
	exit 1
fi
