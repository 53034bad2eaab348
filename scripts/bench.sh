#!/usr/bin/env bash
# Disk read benchmark over a real, shaped link: OpenSSH `ssh host cat`
# (baseline) against the provider's two ways of reading a disk, dd chunks
# (Client.ReadRange) and the host-side sparse reader (Client.ReadRangeSparse).
#
# A network namespace joined by a veth pair shaped with tbf to 1 Gbit/s in
# both directions plays the ESXi host: a real OpenSSH sshd runs inside it,
# chrooted into a tree laid out like ESXi's (/vmfs/volumes/<ds>/<vm>/
# <disk>-flat.vmdk, /bin/python, /bin/dd, /bin/cat). The datastore holds a
# dense disk of random data and a thin disk with data in 64 runs.
#
# Prints, per disk and method: MB/s of logical disk bytes, the ratio to the
# baseline, bytes on the wire, client CPU seconds per GiB and peak RSS, host
# CPU seconds per GiB. Nothing asserts timings; each copy is checked
# byte-for-byte against its source.
#
# It then runs the product's journaled copy (transfer.Copy) with one stream
# and with several (BENCH_STREAMS, default "2 4"), each on its own SSH
# connection, and prints their ratio to one stream.
#
# Last, it migrates whole VMs (scripts/bench/migrate) from the same real
# sshd into a real kube-apiserver with the simulated KubeVirt and CDI: a VM
# like the one users measured (2 GiB dense + 8 GiB thin with 512 MiB of
# data) cold, the same VM warm while its guest writes 5% of its data, and a
# wave of BENCH_WAVE VMs (default 4, each 512 MiB dense + 8 GiB thin with 5%
# data) on the one host. The simulated ESXi host (internal/esxisim) writes
# the VMs' files into the chroot's /vmfs/volumes and keeps the host's state:
# the chroot's vim-cmd and vmware are scripts/bench/esxitool, a static
# binary handing each command line to it over a Unix socket in the chroot,
# and it writes the chroot's /etc/vmware/hostd/vmInventory.xml. Logins
# (the client key, the host key pinned by fingerprint), execs, the shell,
# cat, dd, stat and /bin/python are sshd's and Debian's. It prints per disk
# the copy rate against `ssh cat` of the same file, the provider's CPU
# seconds per GiB and peak RSS, the cold downtime against the ideal
# (allocated bytes / the link's rate as `ssh cat` sees it) and the warm
# downtime as a share of the cold, all in the same run; then one more cold
# migration, "sim-cold", from the simulator's own SSH server behind the
# same link, on a line of its own, for comparison only. Then cluster
# execution, with the real kube-controller-manager and kube-scheduler and a
# simulated node running the Jobs' pods (the worker binary as the image):
# the same VM cold ("cluster-cold", its dense copy against `ssh cat`, its
# downtime against the link), and a wave of BENCH_MODE_WAVE small VMs
# (default 40) from the two hosts in local execution, then as many in
# cluster execution: the runner's CPU seconds, bytes read and peak RSS in
# each, and the most copy pods seen running at once per host.
#
# Needs root. BENCH_SMOKE=1 uses tiny files (a couple of minutes).
# BENCH_COPIES=0 skips the stream comparison, BENCH_VM=0 the migrations,
# BENCH_ONLY=cluster all but cluster execution's.
# BENCH_RATE sets the link's rate (default 1gbit). BENCH_PYTHON=none gives
# the host no /bin/python, as ESXi 6.x: the provider reads through dd.
# Everything it creates (namespace, links, sshd, files) is removed on exit,
# also on failure.
set -euo pipefail

if [[ $(id -u) -ne 0 ]]; then
	echo "bench.sh: needs root (network namespaces, tc, chroot)" >&2
	exit 1
fi
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$repo/scripts/ensure-bench-deps.sh"

smoke=${BENCH_SMOKE:-0}
MiB=$((1 << 20))
if [[ $smoke == 1 ]]; then
	dense_size=$((16 * MiB))
	thin_size=$((256 * MiB))
	run_len=$((64 * 1024)) # 64 runs of 64 KiB = 4 MiB of data
else
	dense_size=$((2048 * MiB))
	thin_size=$((8192 * MiB))
	run_len=$((8 * MiB)) # 64 runs of 8 MiB = 512 MiB of data
fi
runs=64
# BENCH_RATE shapes the link (tc rate, default 1gbit); BENCH_STREAMS lists
# the stream counts compared with one stream.
rate=${BENCH_RATE:-1gbit}
streams_list=${BENCH_STREAMS:-2 4}
# BENCH_ROUNDS repeats the stream comparison, interleaved, so that a busy
# machine's drift shows; BENCH_READS=0 skips the read methods (cat, dd,
# sparse) and measures only the copies.
rounds=${BENCH_ROUNDS:-1}
reads=${BENCH_READS:-1}
copies=${BENCH_COPIES:-1}
vms=${BENCH_VM:-1}
wave=${BENCH_WAVE:-4}
# BENCH_MODE_WAVE: VMs of the wave migrated in each execution, local then
# cluster, spread over the two hosts (the real sshd and the simulator's).
mode_wave=${BENCH_MODE_WAVE:-40}
[[ $smoke == 1 ]] && mode_wave=${BENCH_MODE_WAVE:-2}
python=${BENCH_PYTHON:-python3}

ns=vmmbench$$
veth=vmmb$$
veth_peer=vmmp$$
net=10.250.$(($$ % 200 + 20))
host_ip=$net.1
esxi_ip=$net.2
work=""
sshd_pid=""
made_run_sshd=""

cleanup() {
	set +e
	[[ -n $sshd_pid ]] && kill "$sshd_pid" 2>/dev/null && wait "$sshd_pid" 2>/dev/null
	ip link del "$veth" 2>/dev/null
	ip netns del "$ns" 2>/dev/null
	[[ -n $work ]] && rm -rf --one-file-system "$work"
	[[ -n $made_run_sshd ]] && rmdir /run/sshd 2>/dev/null
	return 0
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# sshd insists that every component of the chroot is root-owned and not
# writable by others: /var/lib qualifies, /tmp and /var/tmp do not.
work=$(mktemp -d /var/lib/vmm-bench.XXXXXX)
chmod 755 "$work"
root=$work/root
ds=$root/vmfs/volumes/datastore1/bench
mkdir -p "$ds" "$root"/{usr,dev,bin,tmp} "$work/sshd" "$work/out"
ln -s usr/lib "$root/lib"
ln -s usr/lib64 "$root/lib64"
for b in sh bash cat dd; do ln -s "/usr/bin/$b" "$root/bin/$b"; done
# ESXi 7/8: /bin/python is Python 3. BENCH_PYTHON=none leaves it out, as
# on ESXi 6.x: every read then goes through dd, zeros on the wire.
if [[ $python == none ]]; then
	echo "== host without /bin/python (BENCH_PYTHON=none, as ESXi 6.x): reads through dd, zeros cross the link"
else
	ln -s /usr/bin/python3 "$root/bin/python"
fi

echo "== creating disks ($((dense_size / MiB)) MiB dense, $((thin_size / MiB)) MiB thin with $((runs * run_len / MiB)) MiB of data)"
dense=$ds/dense-flat.vmdk
thin=$ds/thin-flat.vmdk
head -c "$dense_size" /dev/urandom >"$dense"
truncate -s "$thin_size" "$thin"
stride=$((thin_size / runs))
for ((i = 0; i < runs; i++)); do
	dd if=/dev/urandom of="$thin" bs=$((run_len < MiB ? run_len : MiB)) count=$((run_len < MiB ? 1 : run_len / MiB)) \
		seek=$((i * stride / (run_len < MiB ? run_len : MiB))) conv=notrunc status=none
done
sync

echo "== building the reader and the migration driver"
(cd "$repo" && go build -o "$work/diskread" ./scripts/bench/diskread && go build -o "$work/migrate" ./scripts/bench/migrate &&
	go build -o "$work/vmmigration-worker" ./cmd/vmmigration-worker &&
	CGO_ENABLED=0 go build -o "$root/bin/esxitool" ./scripts/bench/esxitool)
# The host's control commands, answered by the simulator (see esxitool).
for b in vim-cmd vmware; do ln -s esxitool "$root/bin/$b"; done

echo "== network namespace $ns, veth $veth <-> $veth_peer, tbf $rate both ways"
ip netns add "$ns"
ip link add "$veth" type veth peer name "$veth_peer" netns "$ns"
ip addr add "$host_ip/30" dev "$veth"
ip link set "$veth" up
ip netns exec "$ns" ip addr add "$esxi_ip/30" dev "$veth_peer"
ip netns exec "$ns" ip link set "$veth_peer" up
ip netns exec "$ns" ip link set lo up
tc qdisc add dev "$veth" root tbf rate "$rate" burst 256kb latency 10ms
ip netns exec "$ns" tc qdisc add dev "$veth_peer" root tbf rate "$rate" burst 256kb latency 10ms

echo "== sshd on $esxi_ip:22 (chroot $root)"
ssh-keygen -q -t ecdsa -b 256 -N '' -f "$work/sshd/host_key"
ssh-keygen -q -t ecdsa -b 256 -N '' -f "$work/sshd/client_key"
cp "$work/sshd/client_key.pub" "$work/sshd/authorized_keys"
echo "$esxi_ip $(cat "$work/sshd/host_key.pub")" >"$work/known_hosts"
cat >"$work/sshd/sshd_config" <<EOF
ListenAddress $esxi_ip:22
HostKey $work/sshd/host_key
PidFile none
AuthorizedKeysFile $work/sshd/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
ChrootDirectory $root
Ciphers aes128-gcm@openssh.com,aes256-gcm@openssh.com,aes256-ctr,chacha20-poly1305@openssh.com
MaxSessions 10
MaxStartups 100
LogLevel ERROR
EOF
if [[ ! -d /run/sshd ]]; then
	mkdir -p /run/sshd
	made_run_sshd=1
fi
# A private mount namespace gives the chroot /usr and /dev; the mounts
# vanish with sshd. Every step execs, so $! is sshd's pid.
ip netns exec "$ns" unshare -m --propagation private sh -c \
	"mount --bind /usr '$root/usr' && mount --bind /dev '$root/dev' && exec /usr/sbin/sshd -D -e -f '$work/sshd/sshd_config'" &
sshd_pid=$!

ssh_opts=(-F /dev/null -i "$work/sshd/client_key" -o UserKnownHostsFile="$work/known_hosts"
	-o StrictHostKeyChecking=yes -o BatchMode=yes -o Ciphers=aes128-gcm@openssh.com)
for ((i = 0; i < 50; i++)); do
	ssh "${ssh_opts[@]}" -o ConnectTimeout=1 "root@$esxi_ip" true 2>/dev/null && break
	sleep 0.2
done
ssh "${ssh_opts[@]}" "root@$esxi_ip" true

clk=$(getconf CLK_TCK)
# Host CPU: sshd collects the CPU time of every finished connection
# (session shell, cat/dd/python and the per-connection sshd) in its
# children's times.
host_ticks() { awk '{print $16 + $17}' "/proc/$sshd_pid/stat"; }
wire_bytes() { cat "/sys/class/net/$veth/statistics/rx_bytes"; }

results=()
# measure NAME DISK SIZE CMD...: runs CMD (which writes $work/out/copy),
# checks the copy against DISK and records the figures.
measure() {
	local name=$1 disk=$2 size=$3
	shift 3
	rm -f "$work/out/copy"
	local w0 h0 w1 h1
	w0=$(wire_bytes)
	h0=$(host_ticks)
	if ! /usr/bin/time -f '%e %U %S %M' -o "$work/time" "$@" >"$work/measure.log" 2>&1; then
		cat "$work/measure.log" >&2
		echo "bench.sh: $name of $(basename "$disk") failed" >&2
		exit 1
	fi
	sleep 0.5 # let the connection's sshd exit and be reaped
	w1=$(wire_bytes)
	h1=$(host_ticks)
	if ! cmp -s "$disk" "$work/out/copy"; then
		echo "bench.sh: $name: the copy of $(basename "$disk") differs from the source" >&2
		exit 1
	fi
	local e u s m
	read -r e u s m <"$work/time"
	results+=("$(basename "$disk" -flat.vmdk) $name $size $e $u $s $m $((w1 - w0)) $((h1 - h0))")
	printf '   %-6s %-7s %8.2f s\n' "$(basename "$disk" -flat.vmdk)" "$name" "$e"
	# The journaled copy says where its time went (transfer.Stages).
	grep '^stages' "$work/measure.log" | sed 's/^/      /' || true
	rm -f "$work/out/copy"
}

diskread=("$work/diskread" -addr "$esxi_ip" -key "$work/sshd/client_key" -known-hosts "$work/known_hosts" -out "$work/out/copy")

echo "== reading (one stream, 64 MiB chunks for dd and sparse)"
for disk in "$dense" "$thin"; do
	[[ $reads == 1 ]] || break
	size=$(stat -c %s "$disk")
	cat "$disk" >/dev/null # page cache, like a warm datastore
	measure cat "$disk" "$size" sh -c 'ssh "$@" >'"'$work/out/copy'" _ "${ssh_opts[@]}" "root@$esxi_ip" cat "${disk#"$root"}"
	measure dd "$disk" "$size" "${diskread[@]}" -path "${disk#"$root"}" -size "$size" -mode dd
	[[ $python == none ]] ||
		measure sparse "$disk" "$size" "${diskread[@]}" -path "${disk#"$root"}" -size "$size" -mode sparse
done

echo "== the product's journaled copy (transfer.Copy, 64 MiB chunks): 1 stream against ${streams_list// /, } streams, each on its own connection"
for disk in "$dense" "$thin"; do
	[[ $copies == 1 ]] || break
	size=$(stat -c %s "$disk")
	cat "$disk" >/dev/null
	for ((round = 0; round < rounds; round++)); do
		for n in 1 $streams_list; do
			measure "copy$n" "$disk" "$size" "${diskread[@]}" -path "${disk#"$root"}" -size "$size" -mode copy -streams "$n"
		done
	done
done

echo
printf '%-6s %-7s %9s %8s %10s %11s %10s %13s\n' disk method MB/s x-cat wire-MiB client-s/GiB client-RSS host-cpu-s/GiB
declare -A base
for r in "${results[@]}"; do
	read -r disk name size e u s m w h <<<"$r"
	mbs=$(awk -v b="$size" -v e="$e" 'BEGIN{printf "%.1f", b / e / 1e6}')
	[[ $name == cat ]] && base[$disk]=$mbs
	[[ -n ${base[$disk]:-} ]] || base[$disk]=$mbs # no cat measured (BENCH_READS=0): ratios to the first method
	awk -v disk="$disk" -v name="$name" -v mbs="$mbs" -v base="${base[$disk]}" -v size="$size" \
		-v u="$u" -v s="$s" -v m="$m" -v w="$w" -v h="$h" -v clk="$clk" 'BEGIN{
		gib = size / 1073741824
		printf "%-6s %-7s %9s %7.2fx %10.1f %11.2f %7.0f MiB %13.2f\n", disk, name, mbs, mbs / base,
			w / 1048576, (u + s) / gib, m / 1024, h / clk / gib }'
done

echo
echo "streams: MB/s of the journaled copy with N streams over one stream, same run, same link ($rate)"
declare -A one
for r in "${results[@]}"; do
	read -r disk name size e _ <<<"$r"
	[[ $name == copy* ]] || continue
	mbs=$(awk -v b="$size" -v e="$e" 'BEGIN{printf "%.1f", b / e / 1e6}')
	[[ $name == copy1 ]] && one[$disk]=$mbs
	awk -v disk="$disk" -v name="$name" -v mbs="$mbs" -v one="${one[$disk]}" 'BEGIN{
		printf "%-6s %-7s %9s MB/s %7.2fx one stream\n", disk, name, mbs, mbs / one }'
done

# The goal for a dense disk: its journaled copy, with streams_per_disk's
# default of 2, at 0.9x `ssh cat` or better, both measured above.
dense_name=$(basename "$dense" -flat.vmdk)
cat_mbs="" copy_mbs=""
for r in "${results[@]}"; do
	read -r disk name size e _ <<<"$r"
	[[ $disk == "$dense_name" ]] || continue
	mbs=$(awk -v b="$size" -v e="$e" 'BEGIN{printf "%.1f", b / e / 1e6}')
	[[ $name == cat ]] && cat_mbs=$mbs
	[[ $name == copy2 ]] && copy_mbs=$mbs
done
if [[ -n $cat_mbs && -n $copy_mbs ]]; then
	awk -v c="$cat_mbs" -v m="$copy_mbs" 'BEGIN{ r = m / c
		printf "dense disk, journaled copy with 2 streams: %.1f MB/s = %.2fx `ssh cat` (goal >= 0.9x: %s)\n", m, r, (r >= 0.9 ? "meets" : "MISSES") }'
fi

if [[ $vms == 1 ]]; then
	echo
	echo "== whole-VM migrations from the real sshd on $esxi_ip:22 into a real kube-apiserver (sim-cold: the ESXi simulator's own SSH server on $esxi_ip:2222, same namespace and link)"
	smoke_flag=()
	[[ $smoke == 1 ]] && smoke_flag=(-smoke)
	# BENCH_CPUPROFILE=file writes the provider's CPU profile of the cold
	# migration (go tool pprof).
	[[ -n ${BENCH_CPUPROFILE:-} ]] && smoke_flag+=(-cpuprofile "$BENCH_CPUPROFILE")
	# BENCH_WARM_CPUPROFILE=file: the same for the warm migration's cutover.
	[[ -n ${BENCH_WARM_CPUPROFILE:-} ]] && smoke_flag+=(-warm-cpuprofile "$BENCH_WARM_CPUPROFILE")
	# BENCH_WAVE_CPUPROFILE=file: the runner's, for the cluster execution wave.
	[[ -n ${BENCH_WAVE_CPUPROFILE:-} ]] && smoke_flag+=(-wave-cpuprofile "$BENCH_WAVE_CPUPROFILE")
	# BENCH_ONLY=cluster migrates only in cluster execution (its cold and
	# warm VMs and its wave), after the `ssh cat` baseline.
	[[ ${BENCH_ONLY:-} == cluster ]] && smoke_flag+=(-only-cluster)
	mkdir -p "$work/migrate.d"
	"$work/migrate" run -work "$work/migrate.d" -root "$root/vmfs/volumes" -listen "$esxi_ip:2222" \
		-sshd "$esxi_ip:22" -sshd-key "$work/sshd/client_key" -sshd-host-key "$work/sshd/host_key.pub" \
		-sshd-pid "$sshd_pid" -chroot "$root" \
		-netns-exec "ip netns exec $ns" -ssh-cat "ssh ${ssh_opts[*]} root@$esxi_ip" -wave "$wave" "${smoke_flag[@]}" \
		-worker "$work/vmmigration-worker" -mode-wave "$mode_wave"
fi
