#!/usr/bin/env bash
# Builds a small Debian 12 guest installed the way an ESXi VM is: a 1 GiB raw
# disk, an initramfs that holds only the disk drivers a VMware guest needs
# (ata_piix, ata_generic, sd_mod, vmw_pvscsi; no virtio), console on ttyS0
# and qemu-guest-agent. Booted on virtio it drops to the initramfs shell, as
# real VMware guests do on KubeVirt before conversion; booted on IDE (or
# pvscsi, BIOS only) it reaches multi-user.target, prints
# VMMIGRATION-GUEST-BOOTED on ttyS0 and runs the guest agent.
#
#   build.sh [bios]  MBR, one ext4 partition, GRUB for BIOS (i386-pc)
#   build.sh efi     GPT, an EFI system partition (FAT) with GRUB at the
#                    removable-media path EFI/BOOT/BOOTX64.EFI and Debian's
#                    stub EFI/debian/grub.cfg, and the ext4 root
#
# Output: $TESTBIN_DIR/guest/debian12-<variant>.raw (default .testbin/guest/),
# with a stamp debian12-<variant>.version holding a digest of this folder: a
# warm run with the same builder returns at once. Runs as root (loop devices,
# mount, chroot); packages come from the Debian archive through apt
# (mmdebstrap). About 35-70 s on 2 cores. Concurrent runs wait for one another.
#
# Prints the image's path as the last line of standard output.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${TESTBIN_DIR:-$root/.testbin}/guest
variant=${1:-bios}
case $variant in
bios | efi) ;;
*)
	echo "usage: $0 [bios|efi]" >&2
	exit 2
	;;
esac
name=debian12-$variant
image=$out/$name.raw
stamp=$out/$name.version
# The root file system's UUID is fixed so the image is the same on every
# machine (and tests can name it).
root_uuid=6d1c3f4e-8a0b-4c55-9a57-0b1d2c3e4f50
esp_id=5A1E7C0D # the EFI system partition's FAT volume ID, shown as 5A1E-7C0D

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
tools=(mmdebstrap sfdisk partx losetup mkfs.ext4)
[[ $variant == efi ]] && tools+=(mkfs.vfat mcopy mmd)
for tool in "${tools[@]}"; do
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
if [[ $variant == bios ]]; then
	grub=grub-pc
	fstab="UUID=$root_uuid / ext4 errors=remount-ro 0 1"
else
	grub=grub-efi-amd64-bin,grub2-common
	fstab="UUID=$root_uuid / ext4 errors=remount-ro 0 1
UUID=${esp_id:0:4}-${esp_id:4:4} /boot/efi vfat umask=0077,x-systemd.device-timeout=15min 0 1"
fi
printf '%s\n' "$fstab" >"$work/fstab"
mmdebstrap --variant=minbase --mode=root --format=tar \
	--include="linux-image-cloud-amd64,$grub,systemd-sysv,udev,kmod,e2fsprogs,qemu-guest-agent,initramfs-tools" \
	--setup-hook='mkdir -p "$1/etc/initramfs-tools/conf.d" "$1/etc/initramfs-tools/hooks"' \
	--setup-hook="install -m 0644 '$here/rootfs/initramfs.conf' \"\$1/etc/initramfs-tools/conf.d/vmware-drivers\"" \
	--setup-hook="install -m 0755 '$here/rootfs/initramfs-hook' \"\$1/etc/initramfs-tools/hooks/vmware-drivers\"" \
	--customize-hook="install -m 0644 '$here/rootfs/booted.service' \"\$1/etc/systemd/system/vmmigration-booted.service\"" \
	--customize-hook="install -m 0644 '$here/rootfs/wired.network' \"\$1/etc/systemd/network/10-wired.network\"" \
	--customize-hook="install -D -m 0644 '$here/rootfs/slow-machine.conf' \"\$1/etc/systemd/system.conf.d/slow-machine.conf\"" \
	--customize-hook="install -m 0644 '$here/rootfs/udev.conf' \"\$1/etc/udev/udev.conf\"" \
	--customize-hook='chroot "$1" systemctl enable vmmigration-booted.service systemd-networkd.service' \
	--customize-hook='echo vmmigration-guest >"$1/etc/hostname"' \
	--customize-hook="install -m 0644 '$work/fstab' \"\$1/etc/fstab\"" \
	--customize-hook="install -m 0644 '$here/rootfs/grub-default' \"\$1/etc/default/grub.d/serial.cfg\"" \
	bookworm "$work/root.tar" >&2

# 2. The disk. BIOS: MBR, one bootable Linux partition from 1 MiB to the
# end. EFI: GPT, a 128 MiB EFI system partition, then the root.
truncate -s 1G "$work/disk.raw"
if [[ $variant == bios ]]; then
	echo 'label-id: 0x5c7133a2
start=2048, type=83, bootable' | sfdisk -q --label dos "$work/disk.raw"
else
	echo 'label-id: 0A6C1E55-7D2B-4E8F-9C31-2B5D7E9F4A10
start=2048, size=128MiB, type=C12A7328-F81F-11D2-BA4B-00A0C93EC93B, name=esp
type=0FC63DAF-8483-4772-8E79-3D69D8477DE4, name=root' | sfdisk -q --label gpt "$work/disk.raw"
fi
loop=$(losetup -f --show "$work/disk.raw")
# The host kernel may lack the partition parsers: add them from userspace.
partx -a "$loop" 2>/dev/null || true
part=${loop}p1
[[ $variant == efi ]] && part=${loop}p2
[[ -b $part ]] || { echo "guest: $part did not appear" >&2; exit 1; }
mkfs.ext4 -q -L root -U "$root_uuid" "$part"
mkdir -p "$mnt"
mount "$part" "$mnt"
tar -C "$mnt" -xpf "$work/root.tar" --numeric-owner

# 3. GRUB, in a chroot whose private /dev holds only what grub needs,
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
if [[ $variant == bios ]]; then
	chroot "$mnt" grub-install --target=i386-pc "$loop" >&2
else
	# The host cannot mount FAT, which grub-install wants: make GRUB's EFI
	# image with grub-mkimage and copy it in with mtools. It reads the stub
	# grub.cfg next to it (prefix /EFI/debian on the ESP), which hands over
	# to /boot/grub/grub.cfg on the root, as Debian's grub-install sets up.
	esp=${loop}p1
	mkfs.vfat -F 32 -n ESP -i "$esp_id" "$esp" >/dev/null
	mkdir -p "$mnt/boot/grub/x86_64-efi" "$work/esp"
	cp "$mnt"/usr/lib/grub/x86_64-efi/*.mod "$mnt"/usr/lib/grub/x86_64-efi/*.lst "$mnt/boot/grub/x86_64-efi/"
	chroot "$mnt" grub-mkimage -O x86_64-efi -o /tmp/grubx64.efi -p /EFI/debian \
		part_gpt part_msdos fat ext2 normal linux search search_fs_uuid configfile \
		serial terminal echo test gzio efi_gop all_video boot
	cat >"$work/esp/grub.cfg" <<CFG
search.fs_uuid $root_uuid root
set prefix=(\$root)'/boot/grub'
configfile \$prefix/grub.cfg
CFG
	mmd -i "$esp" ::/EFI ::/EFI/BOOT ::/EFI/debian
	mcopy -i "$esp" "$mnt/tmp/grubx64.efi" ::/EFI/BOOT/BOOTX64.EFI
	mcopy -i "$esp" "$mnt/tmp/grubx64.efi" ::/EFI/debian/grubx64.efi
	mcopy -i "$esp" "$work/esp/grub.cfg" ::/EFI/debian/grub.cfg
	rm "$mnt/tmp/grubx64.efi"
fi
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
