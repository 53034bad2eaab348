package preflight

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
)

type fakeCluster struct {
	namespaces     map[string]bool
	storageClasses map[string]bool
	vms, dvs       map[string]string // name -> owner label
	remaining      int64
	limited        bool
	populated      bool
	err            error
}

func (f fakeCluster) NamespaceExists(_ context.Context, ns string) (bool, error) {
	return f.namespaces[ns], f.err
}
func (f fakeCluster) StorageClassExists(_ context.Context, n string) (bool, error) {
	return f.storageClasses[n], nil
}
func (f fakeCluster) VirtualMachineOwner(_ context.Context, _, n string) (bool, string, error) {
	o, ok := f.vms[n]
	return ok, o, nil
}
func (f fakeCluster) DataVolumeOwner(_ context.Context, _, n string) (bool, string, error) {
	o, ok := f.dvs[n]
	return ok, o, nil
}
func (f fakeCluster) StorageQuotaRemaining(context.Context, string, string) (int64, bool, error) {
	return f.remaining, f.limited, nil
}
func (f fakeCluster) StorageClassPopulated(context.Context, string) (bool, error) {
	return f.populated, nil
}

func goodVM() esxi.VM {
	return esxi.VM{
		VMID: 7, Name: "web-01", GuestOS: "ubuntu64Guest", Firmware: esxi.FirmwareBIOS,
		PowerState: esxi.PoweredOn, ToolsRunning: true, ToolsStatus: "toolsOk",
		Disks: []esxi.Disk{{Device: "scsi0:0", DataPath: "/vmfs/volumes/ds1/web-01/web-01-flat.vmdk", CapacityBytes: 10 << 30}},
		NICs:  []esxi.NIC{{Device: "ethernet0", NetworkName: "VM Network", MAC: "00:50:56:aa:bb:cc"}},
	}
}

// chainOf is the chain the inventory builds for a 3-link disk (seSparse
// over vmfsSparse over a thin base), with its base descriptor missing or
// the middle link's CID changed when asked.
func chainOf(missingBase, cidChanged bool) *esxi.DiskChain {
	const dir = "/vmfs/volumes/ds1/web-01/"
	mib := int64(1 << 20)
	descs := map[string]esxi.Descriptor{
		dir + "web-01-000002.vmdk": {CID: "0000000b", ParentCID: "0000000a", CreateType: "seSparse", ParentFileNameHint: "web-01-000001.vmdk",
			Extents: []esxi.Extent{{Sectors: 20480, FileName: "web-01-000002-sesparse.vmdk"}}},
		dir + "web-01-000001.vmdk": {CID: "0000000a", ParentCID: "00000009", CreateType: "vmfsSparse", ParentFileNameHint: "web-01.vmdk",
			Extents: []esxi.Extent{{Sectors: 20480, FileName: "web-01-000001-delta.vmdk"}}},
		dir + "web-01.vmdk": {CID: "00000009", ParentCID: "ffffffff", CreateType: "vmfs", DDB: map[string]string{"thinprovisioned": "1"},
			Extents: []esxi.Extent{{Sectors: 20480, FileName: "web-01-flat.vmdk"}}},
	}
	if missingBase {
		descs[dir+"web-01.vmdk"] = esxi.Descriptor{}
	}
	if cidChanged {
		d := descs[dir+"web-01-000001.vmdk"]
		d.CID = "0000000c"
		descs[dir+"web-01-000001.vmdk"] = d
	}
	sizes := map[string]esxi.FileSize{
		dir + "web-01-000002-sesparse.vmdk": {Bytes: mib, AllocatedBytes: -1},
		dir + "web-01-000001-delta.vmdk":    {Bytes: mib, AllocatedBytes: -1},
		dir + "web-01-flat.vmdk":            {Bytes: mib, AllocatedBytes: -1},
	}
	ch := esxi.BuildDiskChain(dir+"web-01-000002.vmdk", descs, sizes)
	return &ch
}

// onChain makes the VM's first disk run on ch.
func onChain(v *esxi.VM, ch *esxi.DiskChain) {
	d := &v.Disks[0]
	d.OnSnapshotDelta, d.Chain, d.DescriptorPath = true, ch, "/vmfs/volumes/ds1/web-01/web-01-000002.vmdk"
}

func goodDest() Destination {
	return Destination{Namespace: "apps", Name: "web-01", StorageClass: "fast", PowerOffPolicy: PolicyGraceful,
		NetworkMap: map[string]string{"VM Network": PodNetwork}, Owner: "apps.web-01"}
}

func goodCluster() fakeCluster {
	return fakeCluster{namespaces: map[string]bool{"apps": true}, storageClasses: map[string]bool{"fast": true}}
}

func TestRun(t *testing.T) {
	tests := []struct {
		name    string
		vm      func(*esxi.VM)
		dest    func(*Destination)
		cluster func(*fakeCluster)
		// failed lists "id/severity: message prefix" of every failed check.
		failed []string
	}{
		{name: "all pass"},
		{
			name: "snapshots no disk runs on",
			vm: func(v *esxi.VM) {
				v.Snapshots = []esxi.Snapshot{{Name: "before upgrade", Children: []esxi.Snapshot{{Name: "after"}}}}
			},
		},
		{
			name: "complete chain is reported, not blocked",
			vm: func(v *esxi.VM) {
				v.Snapshots = []esxi.Snapshot{{Name: "before upgrade"}}
				onChain(v, chainOf(false, false))
			},
			failed: []string{`snapshot_chain/warning: VM "web-01" runs on snapshots: scsi0:0 runs on a 3-link chain (seSparse over vmfsSparse over a thin base), 3 MiB of files. Every file of each chain is copied (3 MiB in all) and flattened into one disk holding what the guest sees now; the snapshots stay on the source, untouched.`},
		},
		{
			name: "missing parent blocks",
			vm: func(v *esxi.VM) {
				onChain(v, chainOf(true, false))
			},
			failed: []string{`snapshot_chain/blocker: VM "web-01" runs on snapshot chains that cannot be read consistently: scsi0:0 (/vmfs/volumes/ds1/web-01/web-01-000002.vmdk): /vmfs/volumes/ds1/web-01/web-01.vmdk: parent of /vmfs/volumes/ds1/web-01/web-01-000001.vmdk: descriptor could not be read or parsed. A missing parent must be restored`},
		},
		{
			name: "CID mismatch blocks",
			vm: func(v *esxi.VM) {
				onChain(v, chainOf(false, true))
			},
			failed: []string{`snapshot_chain/blocker: VM "web-01" runs on snapshot chains that cannot be read consistently: scsi0:0 (/vmfs/volumes/ds1/web-01/web-01-000002.vmdk): /vmfs/volumes/ds1/web-01/web-01-000002.vmdk: parentCID=0000000a but its parent /vmfs/volumes/ds1/web-01/web-01-000001.vmdk has CID=0000000c`},
		},
		{
			name:   "running on delta without its chain",
			vm:     func(v *esxi.VM) { v.Disks[0].OnSnapshotDelta = true },
			failed: []string{`snapshot_chain/blocker: VM "web-01" runs on snapshot chains that cannot be read consistently: scsi0:0: runs on a snapshot delta whose chain was not read.`},
		},
		{
			name: "independent disk left out of the snapshot of a running VM",
			vm: func(v *esxi.VM) {
				onChain(v, chainOf(false, false))
				v.Disks = append(v.Disks, esxi.Disk{Device: "scsi0:2", Independent: true, Mode: "independent-persistent", DataPath: "y", CapacityBytes: 1})
			},
			failed: []string{`snapshot_chain/blocker: VM "web-01" runs on snapshots, but its independent disk(s) scsi0:2 (independent-persistent) are excluded from them and keep changing while the VM runs. Power the VM off`,
				`disks_supported/blocker: VM "web-01" has disks a cold copy cannot move: scsi0:2 is independent-persistent.`},
		},
		{
			name: "rdm and independent",
			vm: func(v *esxi.VM) {
				v.Disks = append(v.Disks, esxi.Disk{Device: "scsi0:1", RDM: true, DataPath: "x", CapacityBytes: 1},
					esxi.Disk{Device: "scsi0:2", Independent: true, Mode: "independent-persistent", DataPath: "y", CapacityBytes: 1})
			},
			failed: []string{`disks_supported/blocker: VM "web-01" has disks a cold copy cannot move: scsi0:1 is a raw device mapping; scsi0:2 is independent-persistent.`},
		},
		{
			name:   "unmapped nic",
			dest:   func(d *Destination) { d.NetworkMap = map[string]string{} },
			failed: []string{`nics_mapped/blocker: NICs without a destination network: ethernet0 on "VM Network". Add each source network to network_map`},
		},
		{
			name: "two NICs on the pod network",
			vm: func(v *esxi.VM) {
				v.NICs = append(v.NICs, esxi.NIC{Device: "ethernet1", NetworkName: "DMZ"})
			},
			dest:   func(d *Destination) { d.NetworkMap["DMZ"] = PodNetwork },
			failed: []string{`nics_mapped/blocker: 2 NICs (ethernet0, ethernet1) are mapped to the pod network, but a KubeVirt VM has one pod network interface. Map all but one to Multus networks "<namespace>/<name>".`},
		},
		{
			name:   "bad name",
			dest:   func(d *Destination) { d.Name = "Web_01" },
			failed: []string{`destination_name_valid/blocker: Destination name "Web_01" is not a valid Kubernetes name`},
		},
		{
			name:   "name too long for disks",
			dest:   func(d *Destination) { d.Name = strings.Repeat("a", 60) },
			failed: []string{`destination_name_valid/blocker: Destination name "` + strings.Repeat("a", 60) + `" is too long: its DataVolume "` + strings.Repeat("a", 60) + `-disk-0" would exceed 63 characters. Shorten the name to at most 56 characters.`},
		},
		{
			name: "vm taken",
			cluster: func(c *fakeCluster) {
				c.vms = map[string]string{"web-01": ""}
				c.dvs = map[string]string{"web-01-disk-0": "someone-else"}
			},
			failed: []string{`destination_name_free/blocker: Namespace "apps" already has VirtualMachine web-01 and DataVolume web-01-disk-0, not created by this migration.`},
		},
		{
			name:    "ours is fine",
			cluster: func(c *fakeCluster) { c.vms = map[string]string{"web-01": "apps.web-01"} },
		},
		{
			name:    "no namespace",
			cluster: func(c *fakeCluster) { c.namespaces = nil },
			failed:  []string{`namespace_exists/blocker: Namespace "apps" does not exist in the destination cluster.`},
		},
		{
			name:    "no storage class",
			cluster: func(c *fakeCluster) { c.storageClasses = nil },
			failed:  []string{`storage_class_exists/blocker: StorageClass "fast" does not exist.`},
		},
		{
			name:    "quota too small",
			cluster: func(c *fakeCluster) { c.limited = true; c.remaining = 5 << 30 },
			failed:  []string{`storage_quota_fits/blocker: The disks need 10.6 GiB (11381663335 bytes) for their claims with CDI's 6% filesystem overhead but the ResourceQuota of namespace "apps" leaves 5 GiB for StorageClass "fast".`},
		},
		{
			name: "graceful without tools",
			vm:   func(v *esxi.VM) { v.ToolsRunning = false; v.ToolsStatus = "toolsNotRunning" },
			failed: []string{
				`vmware_tools/warning: VMware Tools is not running in VM "web-01" (status "toolsNotRunning")`,
				`power_off_policy/blocker: VM "web-01" is poweredOn, power_off_policy is "graceful", but VMware Tools is not running`,
			},
		},
		{
			name:   "manual while on",
			dest:   func(d *Destination) { d.PowerOffPolicy = PolicyManual },
			failed: []string{`power_off_policy/blocker: VM "web-01" is poweredOn and power_off_policy is "manual": shut it down yourself before applying`},
		},
		{
			name:   "hard warns",
			dest:   func(d *Destination) { d.PowerOffPolicy = PolicyHard },
			failed: []string{`power_off_policy/warning: VM "web-01" is poweredOn and power_off_policy is "hard"`},
		},
		{
			name: "manual while off passes",
			vm:   func(v *esxi.VM) { v.PowerState = esxi.PoweredOff },
			dest: func(d *Destination) { d.PowerOffPolicy = PolicyManual },
		},
		{
			name:   "efi secure boot warns",
			vm:     func(v *esxi.VM) { v.Firmware = esxi.FirmwareEFI; v.SecureBoot = true },
			failed: []string{`firmware_supported/warning: VM "web-01" boots with EFI and Secure Boot.`},
		},
		{
			name:   "other guest warns",
			vm:     func(v *esxi.VM) { v.GuestOS = "otherGuest64" },
			failed: []string{`guest_os_supported/warning: VM "web-01" declares guest OS "otherGuest64"; the provider cannot tell whether it boots on KubeVirt.`},
		},
		{
			name: "other linux is linux",
			vm:   func(v *esxi.VM) { v.GuestOS = "other5xlinux-64" },
		},
		{
			name:   "unsupported guest",
			vm:     func(v *esxi.VM) { v.GuestOS = "darwin19_64Guest" },
			failed: []string{`guest_os_supported/blocker: VM "web-01" runs guest OS "darwin19_64Guest", which KubeVirt cannot run.`},
		},
		{
			name:   "parse problems block",
			vm:     func(v *esxi.VM) { v.Problems = []esxi.Problem{{Source: "web-01.vmx", Line: 3, Message: "bad line"}} },
			failed: []string{`inventory_complete/blocker: Parts of VM "web-01" could not be read from the host, so the migration could miss something: web-01.vmx:3: bad line.`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vm, dest, cl := goodVM(), goodDest(), goodCluster()
			if tt.vm != nil {
				tt.vm(&vm)
			}
			if tt.dest != nil {
				tt.dest(&dest)
			}
			if tt.cluster != nil {
				tt.cluster(&cl)
			}
			r, err := Run(context.Background(), vm, dest, cl)
			if err != nil {
				t.Fatal(err)
			}
			var got []Check
			for _, c := range r.Checks {
				if !c.Passed {
					got = append(got, c)
				}
			}
			if len(got) != len(tt.failed) {
				t.Fatalf("failed checks = %+v, want %q", got, tt.failed)
			}
			wantPassed := true
			for i, w := range tt.failed {
				g := got[i].ID + "/" + string(got[i].Severity) + ": " + got[i].Message
				if !strings.HasPrefix(g, w) {
					t.Errorf("check %d:\n got: %s\nwant: %s", i, g, w)
				}
				if got[i].Severity == Blocker {
					wantPassed = false
				}
			}
			if r.Passed() != wantPassed {
				t.Errorf("Passed() = %v, want %v", r.Passed(), wantPassed)
			}
			ids := map[string]bool{}
			for _, c := range r.Checks {
				ids[c.ID] = true
			}
			for _, id := range []string{CheckGuestOS, CheckFirmware, CheckSnapshots, CheckDisks, CheckInventory, CheckNICsMapped, CheckTools, CheckPowerPolicy, CheckDestinationName, CheckNamespace, CheckStorageClass} {
				if !ids[id] {
					t.Errorf("check %s missing from the result", id)
				}
			}
		})
	}
}

func TestRunClusterError(t *testing.T) {
	cl := goodCluster()
	cl.err = errors.New("connection refused")
	_, err := Run(context.Background(), goodVM(), goodDest(), cl)
	if err == nil || err.Error() != `checking namespace "apps": connection refused` {
		t.Fatalf("err = %v", err)
	}
}

func TestHumanBytes(t *testing.T) {
	for in, want := range map[int64]string{0: "0 B", 1024: "1 KiB", 10 << 30: "10 GiB", 1610612736: "1.5 GiB (1610612736 bytes)"} {
		if got := humanBytes(in); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", in, got, want)
		}
	}
}

// A quota is judged against what CDI really requests: each disk's claim
// inflated by CDI's default filesystem overhead (0.06, CDI v1.65
// pkg/common/common.go), and for an upload a scratch claim beside it
// (pkg/controller/upload-controller.go). Block claims are not inflated.
func TestStorageNeed(t *testing.T) {
	disks := []esxi.Disk{{CapacityBytes: 10 << 30}, {CapacityBytes: 1 << 30}}
	const mib = 1 << 20
	upMiB := func(n int64) int64 { return (n + mib - 1) / mib * mib }
	fs := func(n int64) int64 { return int64(math.Ceil(float64(upMiB(n)) * 1.06)) }
	// The scratch claim holds what the claim holds, plus the overhead.
	fsScratch := func(n int64) int64 { return upMiB(fs(n)) }
	blockScratch := func(n int64) int64 { return upMiB(fs(n)) }
	for _, tc := range []struct {
		name                     string
		block, upload, populated bool
		want                     int64
	}{
		{"filesystem import", false, false, false, fs(10<<30) + fs(1<<30)},
		{"filesystem upload", false, true, false, fs(10<<30) + fs(1<<30) + fsScratch(10<<30) + fsScratch(1<<30)},
		{"block import", true, false, false, 11 << 30},
		{"block upload", true, true, false, 11<<30 + blockScratch(10<<30) + blockScratch(1<<30)},
		{"populated filesystem import", false, false, true, 2 * (fs(10<<30) + fs(1<<30))},
		{"populated filesystem upload", false, true, true, 2*(fs(10<<30)+fs(1<<30)) + fsScratch(10<<30) + fsScratch(1<<30)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := StorageNeed(disks, tc.block, tc.upload, tc.populated); got != tc.want {
				t.Errorf("StorageNeed = %d, want %d", got, tc.want)
			}
		})
	}
	// The quota check uses it: a quota that holds the raw disk but not
	// CDI's claims does not fit.
	dest := Destination{Namespace: "apps", Name: "web-01", StorageClass: "fast", NetworkMap: map[string]string{"VM Network": PodNetwork},
		PowerOffPolicy: PolicyGraceful, Upload: true}
	fc := fakeCluster{namespaces: map[string]bool{"apps": true}, storageClasses: map[string]bool{"fast": true}, limited: true, remaining: 11 << 30}
	res, err := Run(t.Context(), goodVM(), dest, fc)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range res.Checks {
		if c.ID == CheckQuota {
			found = true
			if c.Passed || !strings.Contains(c.Message, "scratch claim") {
				t.Errorf("quota check %+v, want a failure counting the scratch claim", c)
			}
		}
	}
	if !found {
		t.Error("no quota check")
	}
	// Cluster execution's journal claims count too: a quota that holds
	// the claims but not them does not fit, and says why.
	need := StorageNeed(goodVM().Disks, false, false, false)
	dest.Upload, dest.JournalClaimBytes = false, 200<<20
	for _, tc := range []struct {
		remaining int64
		pass      bool
	}{{need + 200<<20, true}, {need + 199<<20, false}} {
		fc.remaining = tc.remaining
		res, err := Run(t.Context(), goodVM(), dest, fc)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range res.Checks {
			if c.ID == CheckQuota && (c.Passed != tc.pass || !strings.Contains(c.Message, "a journal claim beside each for cluster execution's copies (200 MiB of the total)")) {
				t.Errorf("quota leaving %d bytes: %+v, want passed %v naming the journal claims", tc.remaining, c, tc.pass)
			}
		}
	}
}
