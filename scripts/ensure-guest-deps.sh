#!/usr/bin/env bash
# Installs the Debian packages needed to build, convert and boot real guests
# (tools/guest/build.sh, internal/guestboot, internal/convert's virt-v2v
# support), when they are missing. Safe to run repeatedly: it does nothing on
# a machine that has them. About 45 s and 110 MB of downloads the first time.
set -euo pipefail

pkgs=(
	# booting guests the way a KubeVirt VMI runs them
	qemu-system-x86 ovmf
	# building the VMware-like Debian guest offline
	mmdebstrap fdisk e2fsprogs qemu-utils
	# the EFI variant's system partition, made without mounting FAT
	dosfstools mtools
	# converting guests; virt-v2v needs nbdkit and nbdinfo but Debian's
	# package does not depend on them
	virt-v2v libguestfs-tools guestfs-tools nbdkit libnbd-bin
	# supermin builds the libguestfs appliance from a kernel on the host
	linux-image-cloud-amd64
)

"$(dirname "$0")/apt-install.sh" "guests" "${pkgs[@]}"
