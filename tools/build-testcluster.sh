#!/usr/bin/env bash
# Builds the real kube-apiserver, kube-controller-manager, kube-scheduler,
# etcd, CDI upload server and KubeVirt admission webhooks used by the tests
# into .testbin/ (ignored by git). A build is skipped when the binary is
# present and was built from the same version, so a warm
# `make test` costs nothing here; a cold build takes 6-8 minutes on 2 cores for
# the cluster, 10-14 more for the upload server (measured at 13.6 min with the
# cluster building beside it) and about 5 more for the admission webhooks.
# kube-controller-manager and kube-scheduler (Options.Controllers) reuse the
# API server's compiled packages: measured with a build cache warm from
# kube-apiserver, 166 s for the controller manager and then 22 s for the
# scheduler (188 s for the script, everything else already built).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=${TESTBIN_DIR:-$root/.testbin}
mkdir -p "$out"

kube_version=v1.37.2
kube_minor=37
etcd_version=v3.6.16
# CDI's upload server: the version required in tools/cdi-uploadserver/go.mod.
cdi_version=v1.65.0
# KubeVirt's admission webhooks: the version required in
# tools/kubevirt-admission/go.mod, and after "+" the revision of the server
# around them (testcluster.KubeVirtAdmissionVersion).
kubevirt_version=v1.7.0+2

# build NAME VERSION LDFLAGS [PACKAGE]: go build PACKAGE (default: the module's
# own main package) in tools/NAME into $out/NAME unless the stamp file says this
# version is already there.
build() {
	local name=$1 version=$2 ldflags=$3 pkg=${4:-.}
	local stamp="$out/$name.version"
	if [[ -x "$out/$name" && -f "$stamp" && "$(cat "$stamp")" == "$version" ]]; then
		echo "test cluster: $name $version already built"
		return
	fi
	echo "test cluster: building $name $version (first time only; several minutes)"
	local start=$SECONDS
	(cd "$root/tools/$name" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w $ldflags" -o "$out/$name.tmp" "$pkg")
	mv "$out/$name.tmp" "$out/$name"
	echo "$version" >"$stamp"
	echo "test cluster: built $name in $((SECONDS - start)) s"
}

# Kubernetes reports v0.0.0-master unless its version variables are stamped.
kv=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	kv+=" -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$kube_minor"
done

# The test guests (tools/guest/build.sh: package downloads, mmdebstrap, disk
# image work) mostly wait on the network and the disk: they are built beside
# the compiles, which keep both cores busy, instead of later inside the
# tests. A failure here is only reported: the tests build again and say why.
guest_pid=""
if [[ $(id -u) == 0 ]] && command -v mmdebstrap >/dev/null; then
	echo "test cluster: building the test guests in the background (log: $out/guest-build.log)"
	(TESTBIN_DIR=$out "$root/tools/guest/build.sh" bios && TESTBIN_DIR=$out "$root/tools/guest/build.sh" efi) \
		>"$out/guest-build.log" 2>&1 &
	guest_pid=$!
fi

build etcd "$etcd_version" ""
build kube-apiserver "$kube_version" "$kv"
# The controller manager and scheduler share most of their packages with the
# API server, so they compile mostly from its cache (see the header).
build kube-controller-manager "$kube_version" "$kv"
build kube-scheduler "$kube_version" "$kv"
# The sum database has no entry for a few of CDI's dependencies; their sums are
# in tools/cdi-uploadserver/go.sum, checked there instead (this build only).
GONOSUMDB=github.com/gophercloud/utils,github.com/openshift,github.com/rhobs,github.com/kubernetes-csi/lib-volume-populator \
	build cdi-uploadserver "$cdi_version" "" kubevirt.io/containerized-data-importer/cmd/cdi-uploadserver
build kubevirt-admission "$kubevirt_version" ""

if [[ -n $guest_pid ]]; then
	if wait "$guest_pid"; then
		echo "test cluster: test guests ready"
	else
		echo "test cluster: building the test guests failed (the tests will try again):" >&2
		tail -n 20 "$out/guest-build.log" >&2
	fi
fi
