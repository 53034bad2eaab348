#!/usr/bin/env bash
# Builds the real kube-apiserver and etcd used by the tests into .testbin/
# (ignored by git). A build is skipped when the binary is present and was built
# from the same version, so a warm `make test` costs nothing here; a cold build
# takes 6-8 minutes on 2 cores.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=${TESTBIN_DIR:-$root/.testbin}
mkdir -p "$out"

kube_version=v1.37.2
kube_minor=37
etcd_version=v3.6.16

# build NAME VERSION LDFLAGS: go build tools/NAME into $out/NAME unless the
# stamp file says this version is already there.
build() {
	local name=$1 version=$2 ldflags=$3
	local stamp="$out/$name.version"
	if [[ -x "$out/$name" && -f "$stamp" && "$(cat "$stamp")" == "$version" ]]; then
		echo "test cluster: $name $version already built"
		return
	fi
	echo "test cluster: building $name $version (first time only; several minutes)"
	(cd "$root/tools/$name" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w $ldflags" -o "$out/$name.tmp" .)
	mv "$out/$name.tmp" "$out/$name"
	echo "$version" >"$stamp"
}

# Kubernetes reports v0.0.0-master unless its version variables are stamped.
kv=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	kv+=" -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$kube_minor"
done

build etcd "$etcd_version" ""
build kube-apiserver "$kube_version" "$kv"
