#!/usr/bin/env bash
# Installs the Debian packages the tests and the demo need, when they are
# missing. Safe to run repeatedly; does nothing on a machine that has them.
set -euo pipefail

need=()
command -v qemu-img >/dev/null 2>&1 || need+=(qemu-utils)
command -v terraform >/dev/null 2>&1 || {
	echo "error: the Terraform CLI is not on PATH. Install Terraform 1.5 or later (https://developer.hashicorp.com/terraform/install)." >&2
	exit 1
}
command -v go >/dev/null 2>&1 || {
	echo "error: Go is not on PATH. Install Go 1.26 or later." >&2
	exit 1
}

"$(dirname "$0")/apt-install.sh" "the tests and the demo" "${need[@]}"
