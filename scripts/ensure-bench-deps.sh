#!/usr/bin/env bash
# Installs the Debian packages scripts/bench.sh needs, when they are missing:
# a real OpenSSH server and client (the simulated host and the baseline),
# GNU time (peak RSS, CPU), iproute2 (namespaces, veth, tbf), util-linux
# (unshare) and diffutils (cmp). Safe to run repeatedly.
set -euo pipefail

need=()
[[ -x /usr/sbin/sshd ]] || need+=(openssh-server)
command -v ssh >/dev/null 2>&1 || need+=(openssh-client)
[[ -x /usr/bin/time ]] || need+=(time)
command -v tc >/dev/null 2>&1 || need+=(iproute2)
command -v unshare >/dev/null 2>&1 || need+=(util-linux)
command -v cmp >/dev/null 2>&1 || need+=(diffutils)
[[ -x /usr/bin/python3 ]] || need+=(python3-minimal)

"$(dirname "$0")/apt-install.sh" "the benchmark" "${need[@]}"
