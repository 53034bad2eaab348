#!/usr/bin/env bash
# Builds the image the pods of cluster execution run, without a registry or a
# container engine: the worker binary (CGO_ENABLED=0, stamped with VERSION as
# the provider is), a Debian 12 root file system with the packages listed in
# image/packages made by mmdebstrap, both packed by umoci as an OCI image
# layout.
#
#   VERSION=1.2.0 scripts/build-image.sh     (make image VERSION=1.2.0)
#
# Output: the OCI layout .image/oci (IMAGE_DIR overrides .image), tagged
# VERSION (default dev). Its manifest digest (sha256:...) is the last line
# of standard output; pin that in the cluster, not the tag. Copy it to a
# registry with `skopeo copy oci:.image/oci:VERSION docker://REGISTRY/...`.
#
# The image has two layers: Debian (packages, the user vmmigration, uid and
# gid 107 as KubeVirt's and CDI's pods use, apt lists and caches removed),
# and the worker binary at /usr/local/bin/vmmigration-worker. The Debian
# layer is kept in the layout under the tag base-<digest of its inputs> and
# made again only when image/packages, image/dpkg-excludes, the mirror, the
# recipe below or SOURCE_DATE_EPOCH change; a new worker only adds a new
# small layer. A run whose inputs are all unchanged returns at once.
#
# Reproducibility: SOURCE_DATE_EPOCH (default: the time of the last commit
# that changed image/) fixes every timestamp in the layers and the config.
# The same inputs and the same archive content give the same digest; the
# archive moves on, so pin it with IMAGE_MIRROR, e.g.
#   IMAGE_MIRROR=http://snapshot.debian.org/archive/debian/20250520T000000Z
# (no security or updates suites are added then).
#
# Installs mmdebstrap, umoci and jq from Debian when absent. The cold build
# downloads about 170 MiB (375 packages); mmdebstrap runs as root, or rootless
# in a user namespace where subordinate ids are set up (not tried).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
out=${IMAGE_DIR:-$root/.image}
layout=$out/oci
version=${VERSION:-dev}
suite=bookworm
mirror=${IMAGE_MIRROR:-}
go=${GO:-go}

# What the image says about itself and how it starts. Kept in step with the
# Containerfile, which scripts/check-image.sh compares with the built image.
uid=107
entrypoint=/usr/local/bin/vmmigration-worker
module=$(sed -n 's/^module //p' "$root/go.mod")
source_url=https://${module}

if ! [[ $version =~ ^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$ ]]; then
	echo "image: VERSION=$version is not a valid image tag ([A-Za-z0-9_][A-Za-z0-9._-]*)" >&2
	exit 2
fi

"$here/ensure-image-deps.sh"

mkdir -p "$out"
exec 9>"$out/.lock"
flock 9

revision=$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)
if [[ $revision != unknown && -n $(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null) ]]; then
	revision+=-dirty
fi
epoch=${SOURCE_DATE_EPOCH:-$(git -C "$root" log -1 --format=%ct -- image/ 2>/dev/null || true)}
epoch=${epoch:-1735689600} # 2025-01-01, outside a git checkout
export SOURCE_DATE_EPOCH=$epoch
created=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)

# The package list without comments or blank lines.
packages() {
	sed -e 's/#.*//' -e 's/[[:space:]]//g' "$root/image/packages" | grep -v '^$'
}
for p in $(packages); do
	[[ $p =~ ^[a-z0-9][a-z0-9+.-]+$ ]] || {
		echo "image: image/packages: '$p' is not a Debian package name" >&2
		exit 1
	}
done

# build_base writes the Debian layer's tarball to $1. Its text is part of the
# layer's key: change it and the layer is made again.
build_base() {
	local tar=$1 include
	include=$(packages | paste -sd, -)
	# apt's timeouts bound each download; the whole run is bounded too.
	# Their settings file is removed so the image's apt has its defaults.
	# resolv.conf and hostname come from the host and from the pod: none
	# in the image. The user vmmigration is added once the essential
	# packages are in, before the others, whose system users then take
	# other ids; its home is where libguestfs may keep its cache when
	# /var/tmp is not writable. supermin makes the appliance's own
	# initramfs: the kernel package's (16 MB) is never used.
	timeout 1800 mmdebstrap --variant=apt --format=tar \
		--aptopt='Acquire::http::Timeout "60"' --aptopt='Acquire::Retries "3"' \
		--setup-hook='mkdir -p "$1/etc/dpkg/dpkg.cfg.d"' \
		--setup-hook="install -m 0644 '$root/image/dpkg-excludes' \"\$1/etc/dpkg/dpkg.cfg.d/vmmigration-image\"" \
		--include="$include" \
		--customize-hook='rm -f "$1/etc/apt/apt.conf.d/99mmdebstrap" "$1/etc/resolv.conf" "$1/etc/hostname"' \
		--essential-hook="if awk -F: '\$3 == $uid' \"\$1/etc/passwd\" \"\$1/etc/group\" | grep .; then echo 'uid or gid $uid is taken' >&2; exit 1; fi" \
		--essential-hook="echo 'vmmigration:x:$uid:$uid:vmmigration worker:/var/lib/vmmigration:/usr/sbin/nologin' >>\"\$1/etc/passwd\"" \
		--essential-hook="echo 'vmmigration:x:$uid:' >>\"\$1/etc/group\"" \
		--essential-hook="install -d -m 0750 -o $uid -g $uid \"\$1/var/lib/vmmigration\"" \
		--customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/var/cache/ldconfig/aux-cache' \
		--customize-hook='rm -f "$1"/boot/initrd.img-*' \
		"$suite" "$tar" ${mirror:+"$mirror"} </dev/null >&2
}

# worker_layer writes a tarball holding only the worker binary $1, with
# fixed owners and times, to $2.
worker_layer() {
	local bin=$1 tar=$2 dir
	dir=$(dirname "$tar")/worker-root
	rm -rf "$dir"
	install -D -m 0755 "$bin" "$dir${entrypoint}"
	chmod 0755 "$dir/usr" "$dir/usr/local" "$dir/usr/local/bin"
	tar -C "$dir" --sort=name --mtime="@$epoch" --owner=0 --group=0 --numeric-owner \
		--format=posix --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
		-cf "$tar" usr
	rm -rf "$dir"
}

# configure sets the image's configuration on tag $1.
configure() {
	umoci config --image "$layout:$1" \
		--config.entrypoint "$entrypoint" \
		--config.user "$uid:$uid" \
		--config.workingdir / \
		--config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
		--config.env LIBGUESTFS_BACKEND=direct \
		--config.label "org.opencontainers.image.title=vmmigration-worker" \
		--config.label "org.opencontainers.image.description=Copies ESXi disks into claims and converts them with virt-v2v-in-place for terraform-provider-vmmigration" \
		--config.label "org.opencontainers.image.version=$version" \
		--config.label "org.opencontainers.image.source=$source_url" \
		--config.label "org.opencontainers.image.revision=$revision" \
		--config.label "org.opencontainers.image.created=$created" \
		--created "$created" --history.created "$created" \
		--history.created_by "scripts/build-image.sh: config"
}

digest_of() {
	jq -r --arg tag "$1" '.manifests[] | select(.annotations["org.opencontainers.image.ref.name"] == $tag) | .digest' "$layout/index.json"
}

start=$SECONDS
work=$out/work
rm -rf "$work"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT

# 1. The worker, built as a release is (see .goreleaser.yml).
echo "image: building vmmigration-worker $version" >&2
(cd "$root" && CGO_ENABLED=0 GOOS=linux GOARCH=amd64 $go build -trimpath \
	-ldflags "-s -w -X main.version=$version" -o "$work/vmmigration-worker" ./cmd/vmmigration-worker)
worker_sum=$(sha256sum "$work/vmmigration-worker" | cut -d' ' -f1)

base_key=$( (
	cat "$root/image/packages" "$root/image/dpkg-excludes"
	declare -f build_base
	echo "$suite $mirror $epoch $uid"
) | sha256sum | cut -c1-16)
base_tag=base-$base_key
image_key=$( (
	echo "$base_key $worker_sum $version $revision $source_url $epoch $uid $entrypoint"
	declare -f worker_layer configure
) | sha256sum | cut -d' ' -f1)

stamp=$out/oci.$version.stamp
if [[ -f $stamp && $(cat "$stamp") == "$image_key" && -f $layout/index.json && -n $(digest_of "$version") ]]; then
	echo "image: $layout:$version is up to date" >&2
	digest_of "$version"
	exit 0
fi
rm -f "$stamp"

[[ -f $layout/index.json ]] || umoci init --layout "$layout"
tags=$(umoci ls --layout "$layout")

# 2. The Debian layer, when no layer was made from the same inputs.
if ! grep -qx "$base_tag" <<<"$tags"; then
	echo "image: building the Debian layer ($suite${mirror:+ from $mirror}; first time only, a few minutes)" >&2
	t=$SECONDS
	TMPDIR=$work build_base "$work/base.tar"
	echo "image: root file system made in $((SECONDS - t)) s, $(($(stat -c %s "$work/base.tar") >> 20)) MiB" >&2
	t=$SECONDS
	umoci new --image "$layout:$base_tag"
	umoci raw add-layer --image "$layout:$base_tag" --history.created "$created" \
		--history.created_by "mmdebstrap --variant=apt $suite: $(packages | paste -sd' ' -)" "$work/base.tar"
	stat -c %s "$work/base.tar" >"$out/$base_tag.size"
	rm -f "$work/base.tar"
	echo "image: Debian layer packed in $((SECONDS - t)) s" >&2
	# Older Debian layers go; their blobs with them (umoci gc below).
	for old in $(grep -x 'base-.*' <<<"$tags" || true); do
		umoci rm --image "$layout:$old"
		rm -f "$out/$old.size"
	done
fi

# 3. The worker layer on top, tagged VERSION, and the configuration.
worker_layer "$work/vmmigration-worker" "$work/worker.tar"
grep -qx "$version" <<<"$tags" && umoci rm --image "$layout:$version"
umoci raw add-layer --image "$layout:$base_tag" --tag "$version" --history.created "$created" \
	--history.created_by "COPY vmmigration-worker $entrypoint" "$work/worker.tar"
configure "$version"
umoci gc --layout "$layout"

digest=$(digest_of "$version")
manifest=$layout/blobs/sha256/${digest#sha256:}
packed=$(jq '[.layers[].size] | add' "$manifest")
unpacked=$(($(cat "$out/$base_tag.size" 2>/dev/null || echo 0) + $(stat -c %s "$work/worker.tar")))
echo "$image_key" >"$stamp"
echo "image: $layout:$version built in $((SECONDS - start)) s: layers $((packed >> 20)) MiB compressed, $((unpacked >> 20)) MiB unpacked" >&2
echo "image: pin it as ...@$digest" >&2
echo "$digest"
