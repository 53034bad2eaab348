#!/usr/bin/env bash
# Builds a small Debian 12 guest installed the way an ESXi VM is: a 1 GiB raw
# disk with an MBR and one ext4 partition, GRUB for BIOS (i386-pc), and an
# initramfs that holds only the disk drivers a VMware guest needs (ata_piix,
# ata_generic, sd_mod, vmw_pvscsi; no virtio). Booted on virtio it drops to
# the initramfs shell, as real VMware guests do on KubeVirt before
# conversion; booted on IDE or pvscsi it reaches multi-user.target, prints
# VMMIGRATION-GUEST-BOOTED on ttyS0 and runs qemu-guest-agent.
#
# Output: $TESTBIN_DIR/guest/debian12-bios.raw (default .testbin/guest/), with
# a stamp debian12-bios.version holding a digest of this folder: a warm run
# with the same builder returns at once. Runs as root (loop devices, mount,
# chroot); packages come from the Debian archive through apt (mmdebstrap).
# About 40-70 s on 2 cores. Concurrent runs wait for one another.
#
# Prints the image's path as the last line of standard output.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${TESTBIN_DIR:-$root/.testbin}/guest
name=debian12-bios
image=$out/$name.raw
stamp=$out/$name.version
# The root file system's UUID is fixed so the image is the same on every
# machine (and tests can name it).
root_uuid=6d1c3f4e-8a0b-4c55-9a57-0b1d2c3e4f50

mkdir -p "$out"
version="$name $(cd "$here" && cat build.sh rootfs/* | sha256sum | cut -c1-16)"

exec 9>"$out/.lock"
flock 9

if [[ -f "$image" && -f "$stamp" && "$(cat "$stamp")" == "$version" ]]; then
	echo "guest: $name already built ($version)" >&2
	echo "$image"
	exit 0
fi

if [[ $(id -u) -ne 0 ]]; then
	echo "guest: building $name needs root (loop devices, mount, chroot)" >&2
	exit 1
fi
for tool in mmdebstrap sfdisk partx losetup mkfs.ext4; do
	command -v "$tool" >/dev/null || {
		echo "guest: $tool is missing; run scripts/ensure-guest-deps.sh" >&2
		exit 1
	}
done

echo "guest: building $name (first time only; about a minute)" >&2
start=$SECONDS
work=$(mktemp -d "$out/build.XXXXXX")
mnt=$work/mnt
loop=""
cleanup() {
	set +e
	for m in dev/pts dev proc sys ""; do
		mountpoint -q "$mnt/$m" 2>/dev/null && umount "$mnt/$m"
	done
	[[ -n $loop ]] && { partx -d "$loop" 2>/dev/null; losetup -d "$loop"; }
	rm -rf "$work"
}
trap cleanup EXIT

# 1. The root file system, as a tarball. The initramfs settings go in before
# the kernel is installed so its one initramfs is already VMware-style.
mmdebstrap --variant=minbase --mode=root --format=tar \
	--include=linux-image-cloud-amd64,grub-pc,systemd-sysv,udev,kmod,e2fsprogs,qemu-guest-agent,initramfs-tools \
	--setup-hook='mkdir -p "$1/etc/initramfs-tools/conf.d" "$1/etc/initramfs-tools/hooks"' \
	--setup-hook="install -m 0644 '$here/rootfs/initramfs.conf' \"\$1/etc/initramfs-tools/conf.d/vmware-drivers\"" \
	--setup-hook="install -m 0755 '$here/rootfs/initramfs-hook' \"\$1/etc/initramfs-tools/hooks/vmware-drivers\"" \
	--customize-hook="install -m 0644 '$here/rootfs/booted.service' \"\$1/etc/systemd/system/vmmigration-booted.service\"" \
	--customize-hook="install -m 0644 '$here/rootfs/wired.network' \"\$1/etc/systemd/network/10-wired.network\"" \
	--customize-hook='chroot "$1" systemctl enable vmmigration-booted.service systemd-networkd.service' \
	--customize-hook='echo vmmigration-guest >"$1/etc/hostname"' \
	--customize-hook="echo 'UUID=$root_uuid / ext4 errors=remount-ro 0 1' >\"\$1/etc/fstab\"" \
	--customize-hook="install -m 0644 '$here/rootfs/grub-default' \"\$1/etc/default/grub.d/serial.cfg\"" \
	bookworm "$work/root.tar" >&2

# 2. The disk: MBR, one bootable Linux partition from 1 MiB to the end.
truncate -s 1G "$work/disk.raw"
echo 'start=2048, type=83, bootable' | sfdisk -q --label dos "$work/disk.raw"
loop=$(losetup -f --show "$work/disk.raw")
# The host kernel may lack the MSDOS partition parser: add them from userspace.
partx -a "$loop" 2>/dev/null || true
part=${loop}p1
[[ -b $part ]] || { echo "guest: $part did not appear" >&2; exit 1; }
mkfs.ext4 -q -L root -U "$root_uuid" "$part"
mkdir -p "$mnt"
mount "$part" "$mnt"
tar -C "$mnt" -xpf "$work/root.tar" --numeric-owner

# 3. GRUB for BIOS, in a chroot whose private /dev holds only what grub needs,
# with the by-uuid link no udev makes here.
mount -t tmpfs -o mode=0755 dev "$mnt/dev"
for n in null zero random urandom; do
	cp -a "/dev/$n" "$mnt/dev/$n"
done
cp -a "$loop" "$part" "$mnt/dev/"
mkdir -p "$mnt/dev/disk/by-uuid"
ln -s "../../$(basename "$part")" "$mnt/dev/disk/by-uuid/$root_uuid"
mount -t proc proc "$mnt/proc"
mount -t sysfs sys "$mnt/sys"
chroot "$mnt" grub-install --target=i386-pc "$loop" >&2
chroot "$mnt" update-grub >&2
grep -q "root=UUID=$root_uuid" "$mnt/boot/grub/grub.cfg" || {
	echo "guest: grub.cfg does not name the root file system by UUID" >&2
	exit 1
}
umount "$mnt/sys" "$mnt/proc" "$mnt/dev" "$mnt"
partx -d "$loop" 2>/dev/null || true
losetup -d "$loop"
loop=""

mv "$work/disk.raw" "$image"
echo "$version" >"$stamp"
echo "guest: built $image in $((SECONDS - start)) s" >&2
echo "$image"
