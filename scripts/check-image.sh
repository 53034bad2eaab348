#!/usr/bin/env bash
# Runs the worker image that scripts/build-image.sh made, the way a pod runs
# it, without a container engine: `umoci unpack` into a runtime bundle, then
# each command with `runc run` as the image's user. Where runc cannot run a
# container (no root, no cgroups), the commands run in a chroot of the
# unpacked root file system instead; the output says which.
#
#   VERSION=1.2.0 scripts/check-image.sh     (make image-check VERSION=1.2.0)
#
# Checks: the image's entrypoint, user and environment are the Containerfile's;
# the worker reports VERSION; it runs as uid 107, not root; qemu-img,
# virt-v2v-in-place, nbdkit and nbdinfo start; and (runc only; skip with
# IMAGE_CHECK_APPLIANCE=0) libguestfs-test-tool boots libguestfs's helper VM
# from the image's kernel as uid 107, under TCG as in a pod without /dev/kvm
# (under a minute here). IMAGE_CHECK_RUNTIME=chroot skips runc.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
out=${IMAGE_DIR:-$root/.image}
layout=$out/oci
version=${VERSION:-dev}
appliance=${IMAGE_CHECK_APPLIANCE:-1}

"$here/ensure-image-deps.sh"

[[ -f $layout/index.json ]] || {
	echo "check: no image at $layout; run make image first" >&2
	exit 1
}
config_of() {
	local m
	m=$(jq -r --arg tag "$version" '.manifests[] | select(.annotations["org.opencontainers.image.ref.name"] == $tag) | .digest' "$layout/index.json")
	[[ -n $m ]] || {
		echo "check: $layout has no tag $version" >&2
		exit 1
	}
	jq -r .config.digest "$layout/blobs/sha256/${m#sha256:}" | sed 's,^sha256:,'"$layout"'/blobs/sha256/,'
}
config=$(config_of)

fail=0
check() { # check WHAT GOT WANT
	if [[ $2 == "$3" ]]; then
		echo "check: $1: ok ($2)"
	else
		echo "check: $1: got '$2', want '$3'" >&2
		fail=1
	fi
}

# 1. The image's configuration against the Containerfile's.
cf=$root/Containerfile
check "entrypoint as in the Containerfile" "$(jq -c .config.Entrypoint "$config")" \
	"$(sed -n 's/^ENTRYPOINT[[:space:]]*//p' "$cf" | jq -c .)"
check "user as in the Containerfile" "$(jq -r .config.User "$config")" "$(sed -n 's/^USER[[:space:]]*//p' "$cf")"
for env in $(sed -n 's/^ENV[[:space:]]*//p' "$cf"); do
	check "environment $env as in the Containerfile" "$(jq -r --arg e "$env" '.config.Env | index($e) | if . == null then "absent" else "set" end' "$config")" set
done

# 2. The unpacked image, run.
work=$(mktemp -d "$out/check.XXXXXX")
ids=()
cleanup() {
	set +e
	for id in "${ids[@]}"; do runc delete -f "$id" >/dev/null 2>&1; done
	[[ -n ${IMAGE_CHECK_KEEP:-} ]] && cp "$work/test-tool.log" "$out/test-tool.log" 2>/dev/null; rm -rf "$work"
}
trap cleanup EXIT
bundle=$work/bundle
t=$SECONDS
umoci unpack --image "$layout:$version" "$bundle" >/dev/null
echo "check: unpacked in $((SECONDS - t)) s, root file system $(du -sm "$bundle/rootfs" | cut -f1) MiB"
uid=$(jq -r '.process.user.uid' "$bundle/config.json")
gid=$(jq -r '.process.user.gid' "$bundle/config.json")
path=$(jq -r '.process.env[] | select(startswith("PATH="))' "$bundle/config.json")

# in_runc ARGS... runs ARGS in the bundle as the image's user, with the
# image's environment plus IMAGE_RUN_ENV, no terminal, for at most
# run_timeout seconds (runc passes the timeout's SIGTERM on).
cp "$bundle/config.json" "$work/config.json"
n=0
run_timeout=120
in_runc() {
	local id=vmmigration-image-check-$$-$((n += 1)) args env rc=0
	args=$(printf '%s\n' "$@" | jq -R . | jq -s .)
	env=$(printf '%s\n' ${IMAGE_RUN_ENV:-} | jq -R . | jq -s 'map(select(. != ""))')
	jq --argjson a "$args" --argjson e "$env" '.process.terminal = false | .process.args = $a | .process.env += $e' \
		"$work/config.json" >"$bundle/config.json"
	ids+=("$id")
	timeout "$run_timeout" runc run --bundle "$bundle" "$id" </dev/null || rc=$?
	runc delete -f "$id" >/dev/null 2>&1 || true
	return $rc
}
in_chroot() {
	env -i "$path" LIBGUESTFS_BACKEND=direct ${IMAGE_RUN_ENV:-} chroot --userspec="$uid:$gid" "$bundle/rootfs" "$@" </dev/null
}

runtime=chroot
if [[ ${IMAGE_CHECK_RUNTIME:-} == chroot ]]; then
	[[ $(id -u) -eq 0 ]] || {
		echo "check: chroot needs root" >&2
		exit 1
	}
elif [[ $(id -u) -eq 0 ]] && probe=$(in_runc /bin/true 2>&1); then
	runtime=runc
else
	echo "check: runc cannot run the bundle here${probe:+: $probe}; using chroot" >&2
	[[ $(id -u) -eq 0 ]] || {
		echo "check: chroot needs root too" >&2
		exit 1
	}
fi
run() { "in_$runtime" "$@"; }
echo "check: running the image's commands with $runtime"

check "worker version" "$(run /usr/local/bin/vmmigration-worker version)" "vmmigration-worker $version"
check "user" "$(run /usr/bin/id -u)" 107
check "worker usage exit code" "$(run /usr/local/bin/vmmigration-worker >/dev/null 2>&1; echo $?)" 64
for cmd in "qemu-img --version" "virt-v2v-in-place --version" "nbdkit --version" "nbdinfo --version"; do
	# shellcheck disable=SC2086
	if v=$(run $cmd 2>&1 | head -1) && [[ -n $v ]]; then
		echo "check: $cmd: ok ($v)"
	else
		echo "check: $cmd failed: $v" >&2
		fail=1
	fi
done

if [[ $appliance == 1 && $runtime == runc ]]; then
	t=$SECONDS
	echo "check: libguestfs-test-tool as uid 107 (TCG; about a minute)"
	if IMAGE_RUN_ENV="LIBGUESTFS_BACKEND_SETTINGS=force_tcg HOME=/var/lib/vmmigration" run_timeout=900 \
		in_runc /usr/bin/libguestfs-test-tool >"$work/test-tool.log" 2>&1 &&
		grep -q '===== TEST FINISHED OK =====' "$work/test-tool.log"; then
		accel=$(grep -o -m1 'accel=[a-z]*,' "$work/test-tool.log" | tr -d , || true)
		euid=$(grep -o -m1 'euid=[0-9]*' "$work/test-tool.log" || true)
		echo "check: libguestfs appliance: ok ($((SECONDS - t)) s; ${accel:-accel=?}, ${euid:-euid=?})"
	else
		tail -40 "$work/test-tool.log" >&2
		echo "check: libguestfs appliance failed after $((SECONDS - t)) s" >&2
		fail=1
	fi
elif [[ $appliance == 1 ]]; then
	echo "check: libguestfs appliance not checked (needs runc)"
fi

if ((fail)); then
	echo "check: $layout:$version FAILED ($runtime)" >&2
	exit 1
fi
echo "check: $layout:$version ok ($runtime)"
