package provider_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/acctest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
)

// attrs checks many attributes of one resource address.
func attrs(addr string, kv map[string]string) resource.TestCheckFunc {
	var fs []resource.TestCheckFunc
	for k, v := range kv {
		fs = append(fs, resource.TestCheckResourceAttr(addr, k, v))
	}
	return resource.ComposeAggregateTestCheckFunc(fs...)
}

func TestAccESXiVMsParserTraps(t *testing.T) {
	t.Parallel()
	acctest.PreCheck(t)
	host := acctest.NewESXi(t, esxisim.Options{FirstVmid: 10})
	addTrapVMs(t, host)
	const all = "data.vmmigration_esxi_vms.all"
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: acctest.ProviderFactories,
		Steps: []resource.TestStep{{
			Config: acctest.ProviderConfig(host.HostBlock("esxi-a")) + `
data "vmmigration_esxi_vms" "all" {
  host = "esxi-a"
}
data "vmmigration_esxi_vms" "regex" {
  host       = "esxi-a"
  name_regex = "^(dup|snap)$"
}
data "vmmigration_esxi_vms" "on" {
  host        = "esxi-a"
  power_state = "poweredOn"
}
data "vmmigration_esxi_vms" "exact" {
  host = "esxi-a"
  name = "web 01 (prod) [eu]"
}
`,
			Check: resource.ComposeAggregateTestCheckFunc(
				attrs(all, map[string]string{
					"id":         "esxi-a",
					"vms.#":      "7",
					"problems.#": "0",

					// Spaces, parentheses and brackets in the name; a
					// multi-line annotation whose second line starts with digits.
					"vms.0.vmid":                   "10",
					"vms.0.name":                   "web 01 (prod) [eu]",
					"vms.0.vmx_path":               "/vmfs/volumes/datastore1/web 01 (prod) [eu]/web 01 (prod) [eu].vmx",
					"vms.0.datastore":              "datastore1",
					"vms.0.annotation":             "Owner: team-a\n2024 moved from rack 7\nline three",
					"vms.0.guest_os":               "rhel9-64",
					"vms.0.hardware_version":       "19",
					"vms.0.power_state":            "poweredOn",
					"vms.0.firmware":               "bios",
					"vms.0.secure_boot":            "false",
					"vms.0.cpus":                   "2",
					"vms.0.memory_mib":             "4096",
					"vms.0.tools_running":          "true",
					"vms.0.tools_status":           "toolsOk",
					"vms.0.guest_ips.#":            "1",
					"vms.0.guest_ips.0":            "10.1.2.3",
					"vms.0.disks.#":                "1",
					"vms.0.disks.0.device":         "scsi0:0",
					"vms.0.disks.0.bus":            "scsi",
					"vms.0.disks.0.capacity_bytes": "8388608",
					"vms.0.disks.0.thin":           "true",
					"vms.0.disks.0.mode":           "persistent",
					"vms.0.disks.0.data_path":      "/vmfs/volumes/datastore1/web 01 (prod) [eu]/web 01 (prod) [eu]-flat.vmdk",
					"vms.0.nics.#":                 "2",
					"vms.0.nics.0.network_name":    "VM Network",
					"vms.0.nics.0.mac_address":     "00:50:56:01:02:03",
					"vms.0.nics.0.adapter_type":    "vmxnet3",
					"vms.0.nics.0.ip_addresses.0":  "10.1.2.3",
					"vms.0.nics.1.network_name":    "DMZ (vlan 20)",
					"vms.0.nics.1.adapter_type":    "e1000e",
					"vms.0.problems.#":             "0",

					// A colon in the datastore name; EFI with secure boot;
					// disks in boot order, one in a subfolder and one on
					// another datastore.
					"vms.1.name":                   "efi-sb",
					"vms.1.datastore":              "san:gold",
					"vms.1.firmware":               "efi",
					"vms.1.secure_boot":            "true",
					"vms.1.disks.#":                "3",
					"vms.1.disks.0.device":         "scsi0:0",
					"vms.1.disks.0.data_path":      "/vmfs/volumes/san:gold/efi-sb/efi-sb-flat.vmdk",
					"vms.1.disks.0.capacity_bytes": "4194304",
					"vms.1.disks.0.thin":           "false",
					"vms.1.disks.1.device":         "sata0:1",
					"vms.1.disks.1.data_path":      "/vmfs/volumes/san:gold/efi-sb/data/efi-sb_1-flat.vmdk",
					"vms.1.disks.1.capacity_bytes": "2097152",
					"vms.1.disks.1.thin":           "true",
					"vms.1.disks.2.device":         "nvme0:0",
					"vms.1.disks.2.bus":            "nvme",
					"vms.1.disks.2.data_path":      "/vmfs/volumes/datastore2/efi-sb/efi-sb_2-flat.vmdk",
					"vms.1.tools_running":          "false",
					"vms.1.tools_status":           "toolsNotInstalled",

					// Running on a snapshot delta.
					"vms.2.name":                      "snap",
					"vms.2.snapshots.#":               "1",
					"vms.2.snapshots.0.name":          "before-migration",
					"vms.2.snapshots.0.description":   "fixture snapshot",
					"vms.2.snapshots.0.depth":         "0",
					"vms.2.snapshots.0.parent":        "",
					"vms.2.disks.0.on_snapshot_delta": "true",
					"vms.2.disks.0.data_path":         "/vmfs/volumes/datastore1/snap/snap-000001-delta.vmdk",
					"vms.2.problems.#":                "0",

					// Two VMs share a display name.
					"vms.3.name":     "dup",
					"vms.3.vmx_path": "/vmfs/volumes/datastore1/dup/dup.vmx",
					"vms.4.name":     "dup",
					"vms.4.vmx_path": "/vmfs/volumes/datastore2/dup/dup.vmx",

					// ".." that stays on the datastore is resolved; one that
					// would leave /vmfs/volumes is refused and reported.
					"vms.5.name":              "dotdot",
					"vms.5.disks.0.data_path": "/vmfs/volumes/datastore1/dotdot/dotdot-flat.vmdk",
					"vms.5.disks.1.data_path": "",
					"vms.5.problems.#":        "1",
					"vms.5.problems.0": `/vmfs/volumes/datastore1/dotdot/dotdot.vmx scsi0:1: disk fileName "../../../../etc/shadow.vmdk" in /vmfs/volumes/datastore1/dotdot/dotdot.vmx: ` +
						`path "/vmfs/volumes/datastore1/dotdot/../../../../etc/shadow.vmdk" uses ".." to leave its datastore: refusing it`,

					// Registered but its .vmx is gone: hostd skips it.
					"vms.6.vmid":       "16",
					"vms.6.name":       "",
					"vms.6.problems.#": "2",
					"vms.6.problems.0": "getallvms: hostd skips this VM as invalid (its datastore may be missing or its .vmx unreadable)",
				}),
				attrs("data.vmmigration_esxi_vms.regex", map[string]string{
					"vms.#": "3", "vms.0.name": "snap", "vms.1.name": "dup", "vms.2.name": "dup",
				}),
				attrs("data.vmmigration_esxi_vms.on", map[string]string{
					"vms.#": "1", "vms.0.name": "web 01 (prod) [eu]",
				}),
				attrs("data.vmmigration_esxi_vms.exact", map[string]string{
					"vms.#": "1", "vms.0.vmid": "10",
				}),
			),
		}},
	})
	// Each Terraform command starts the provider anew and opens one
	// connection; in it, the four data sources share one inventory read of
	// three sequential rounds, each split over at most max_sessions (4)
	// parallel execs, plus the snapshot chain of VM "snap" (its parent
	// descriptor and its extents' sizes: one round of at most 2 execs):
	// at most 1+4+4+2 execs, not one read per data source (4 reads would
	// need at least 12) or per VM.
	st := host.Stats()
	if st.Conns == 0 || st.Execs/st.Conns > 11 {
		t.Errorf("%d execs over %d connections: want at most 11 per provider run (one shared, batched inventory read)", st.Execs, st.Conns)
	}
}

func TestAccESXiVMLookup(t *testing.T) {
	t.Parallel()
	acctest.PreCheck(t)
	host := acctest.NewESXi(t, esxisim.Options{FirstVmid: 10})
	addTrapVMs(t, host)
	cfg := func(ds string) string { return acctest.ProviderConfig(host.HostBlock("esxi-a")) + ds }
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: acctest.ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: cfg(`
data "vmmigration_esxi_vm" "by_name" {
  host = "esxi-a"
  name = "efi-sb"
}
data "vmmigration_esxi_vm" "by_vmid" {
  host = "esxi-a"
  vmid = 14
}
`),
				Check: resource.ComposeAggregateTestCheckFunc(
					attrs("data.vmmigration_esxi_vm.by_name", map[string]string{
						"id": "esxi-a/11", "vmid": "11", "firmware": "efi", "secure_boot": "true", "cpus": "4",
						"memory_mib": "8192", "hardware_version": "14", "guest_os": "windows2019srv-64",
						"disks.#": "3", "nics.0.mac_address": "00:50:56:0a:0b:0c",
					}),
					attrs("data.vmmigration_esxi_vm.by_vmid", map[string]string{
						"id": "esxi-a/14", "name": "dup", "vmx_path": "/vmfs/volumes/datastore2/dup/dup.vmx",
					}),
				),
			},
			{
				Config: cfg(`
data "vmmigration_esxi_vm" "dup" {
  host = "esxi-a"
  name = "dup"
}
`),
				ExpectError: errRE(`2 VMs on ESXi host "esxi-a" are named "dup": vmids 13 (/vmfs/volumes/datastore1/dup/dup.vmx), 14 (/vmfs/volumes/datastore2/dup/dup.vmx). Set vmid instead of the name to choose one`),
			},
			{
				Config: cfg(`
data "vmmigration_esxi_vm" "missing" {
  host = "esxi-a"
  name = "EFI-SB"
}
`),
				ExpectError: errRE(`ESXi host "esxi-a" has no VM named "EFI-SB". Names differ only in case or spaces: "efi-sb" (vmid 11). Names are matched exactly; list them with the vmmigration_esxi_vms data source`),
			},
			{
				Config: cfg(`
data "vmmigration_esxi_vm" "missing" {
  host = "esxi-a"
  vmid = 99
}
`),
				ExpectError: errRE(`ESXi host "esxi-a" has no VM with vmid 99.`),
			},
			{
				Config: cfg(`
data "vmmigration_esxi_vm" "both" {
  host = "esxi-a"
  name = "dup"
  vmid = 13
}
`),
				ExpectError: errRE(`2 attributes specified when one (and only one) of [name,vmid] is required`),
			},
			{
				Config: cfg(`
data "vmmigration_esxi_vms" "x" {
  host = "esxi-b"
}
`),
				ExpectError: errRE(`No esxi_host block of the provider is named "esxi-b" (configured: [esxi-a]). Add one or fix the name.`),
			},
			{
				Config: cfg(`
data "vmmigration_esxi_vms" "x" {
  host       = "esxi-a"
  name_regex = "web("
}
`),
				ExpectError: errRE(`"web(" is not a valid RE2 regular expression: error parsing regexp: missing closing ): ` + "`web(`."),
			},
			// A valid configuration last, for the test's final destroy.
			{Config: cfg("")},
		},
	})
}

// TestAccESXiFaults drives each kind of host failure through Terraform and
// checks the error the user sees and that nothing was retried that must not
// be.
func TestAccESXiFaults(t *testing.T) {
	t.Parallel()
	acctest.PreCheck(t)
	const ds = `
data "vmmigration_esxi_vms" "all" {
  host = "esxi-a"
}
`
	run := func(t *testing.T, host *acctest.ESXiHost, block string, want string) {
		t.Helper()
		resource.Test(t, resource.TestCase{
			ProtoV6ProviderFactories: acctest.ProviderFactories,
			Steps: []resource.TestStep{{
				Config:      acctest.ProviderConfig(block) + ds,
				ExpectError: errRE(want),
			}},
		})
	}
	newHost := func(t *testing.T) *acctest.ESXiHost {
		h := acctest.NewESXi(t, esxisim.Options{})
		h.AddVM(t, esxisim.VMSpec{Name: "vm-1", Disks: []esxisim.DiskSpec{{CapacityBytes: 1 << 20}}})
		return h
	}

	t.Run("wrong password is tried once", func(t *testing.T) {
		h := newHost(t)
		block := fmt.Sprintf(`
  esxi_host {
    name                 = "esxi-a"
    address              = "127.0.0.1"
    port                 = %s
    password             = "wrong"
    host_key_fingerprint = %q
  }`, portOf(h.Addr()), h.Fingerprint())
		run(t, h, block, `ESXi host "esxi-a" refused the provider and needs your attention`)
		if n := h.AuthFailures("root"); n != 1 {
			t.Errorf("failed logins on the host = %d, want exactly 1 (ESXi locks accounts after ~10)", n)
		}
	})
	t.Run("host key mismatch", func(t *testing.T) {
		h := newHost(t)
		block := h.HostBlock("esxi-a")
		key, err := esxisim.GenerateHostKey(esxisim.KeyECDSA)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.SetHostKey(key); err != nil {
			t.Fatal(err)
		}
		run(t, h, block, `does not match the pinned fingerprint`)
		if n := h.AuthFailures("root"); n != 0 {
			t.Errorf("the password was offered to a host with the wrong key (%d attempts)", n)
		}
	})
	t.Run("lockdown mode", func(t *testing.T) {
		h := newHost(t)
		h.SetLockdown(true)
		run(t, h, h.HostBlock("esxi-a"), `ESXi host "esxi-a" refused the provider and needs your attention`)
	})
	t.Run("connection refused", func(t *testing.T) {
		h := newHost(t)
		block := h.HostBlock("esxi-a")
		_ = h.Close()
		run(t, h, block, `ESXi host "esxi-a" refused the provider and needs your attention (credentials, host key, lockdown mode or SSH service). esxi host esxi-a: connecting: `+h.Addr()+` refused the connection: enable the SSH service on the host`)
	})
	t.Run("hostd failing", func(t *testing.T) {
		h := newHost(t)
		h.FailVimCmd(100, esxisim.VimLoginReset)
		run(t, h, h.HostBlock("esxi-a"), `ESXi host "esxi-a" could not be read because of a temporary failure; running the command again usually succeeds.`)
	})
	t.Run("connection dropped between commands", func(t *testing.T) {
		h := newHost(t)
		h.DropAfterCommands(1)
		resource.Test(t, resource.TestCase{
			ProtoV6ProviderFactories: acctest.ProviderFactories,
			Steps: []resource.TestStep{{
				Config: acctest.ProviderConfig(h.HostBlock("esxi-a")) + ds,
				Check:  resource.TestCheckResourceAttr("data.vmmigration_esxi_vms.all", "vms.0.name", "vm-1"),
			}},
		})
		if got := h.Stats().Conns; got < 2 {
			t.Errorf("connections = %d, want a reconnect after the drop", got)
		}
	})
	t.Run("slow host", func(t *testing.T) {
		h := newHost(t)
		h.SetCommandDelay(300 * time.Millisecond)
		resource.Test(t, resource.TestCase{
			ProtoV6ProviderFactories: acctest.ProviderFactories,
			Steps: []resource.TestStep{{
				Config: acctest.ProviderConfig(h.HostBlock("esxi-a")) + ds,
				Check:  resource.TestCheckResourceAttr("data.vmmigration_esxi_vms.all", "vms.0.power_state", "poweredOff"),
			}},
		})
	})
	t.Run("connection dropped mid-read", func(t *testing.T) {
		h := newHost(t)
		h.DropAfterBytes(200)
		// The inventory is read-only, so the client reconnects and reads
		// again: the drop costs one extra connection, not a failure.
		resource.Test(t, resource.TestCase{
			ProtoV6ProviderFactories: acctest.ProviderFactories,
			Steps: []resource.TestStep{{
				Config: acctest.ProviderConfig(h.HostBlock("esxi-a")) + ds,
				Check:  resource.TestCheckResourceAttr("data.vmmigration_esxi_vms.all", "vms.0.name", "vm-1"),
			}},
		})
		if got := h.Stats().Conns; got < 2 {
			t.Errorf("connections = %d, want a reconnect after the drop", got)
		}
	})
}

func portOf(addr string) string {
	_, p := splitHostPort(addr)
	return p
}
