#!/usr/bin/env bash
# apt-install.sh WHAT PACKAGE...: installs those of the Debian packages
# that dpkg does not list as installed, saying what for (WHAT). The one
# install step of the ensure-*-deps scripts. Safe to run repeatedly; does
# nothing when every package is there.
set -euo pipefail

what=$1
shift
need=()
for p in "$@"; do
	status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
	[[ $status == installed ]] || need+=("$p")
done
if ((${#need[@]} == 0)); then
	exit 0
fi

echo "installing Debian packages for $what: ${need[*]}" >&2
sudo=""
[[ $(id -u) -eq 0 ]] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo timeout 300 apt-get update -qq
$sudo timeout 600 apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
