#!/usr/bin/env bash
# Installs the Debian packages that build and check the worker image
# (scripts/build-image.sh, scripts/check-image.sh), when they are missing:
# mmdebstrap makes the root file system, umoci packs it as an OCI image,
# runc runs the image's commands, jq reads its manifest. No registry and no
# container engine are needed. Safe to run repeatedly.
set -euo pipefail

pkgs=(mmdebstrap umoci runc jq)

need=()
for p in "${pkgs[@]}"; do
	status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
	[[ $status == installed ]] || need+=("$p")
done

if ((${#need[@]} == 0)); then
	exit 0
fi

echo "installing Debian packages for the worker image: ${need[*]}" >&2
sudo=""
[[ $(id -u) -eq 0 ]] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo timeout 300 apt-get update -qq
$sudo timeout 600 apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
