package provider_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/acctest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
)

const mib = 1 << 20

// TestAccMigrationFullPath migrates a running BIOS VM, an EFI secure-boot
// VM and a two-disk VM in one apply, and checks every piece of evidence
// against what the source and the destination show.
func TestAccMigrationFullPath(t *testing.T) {
	e := newMigrationEnv(t)
	_, bios := e.host.AddVM(t, esxisim.VMSpec{Name: "bios", GuestOS: "rhel9-64", CPUs: 2, MemoryMiB: 2048,
		Disks: []esxisim.DiskSpec{{CapacityBytes: 8 * mib, Thin: true, Content: []esxisim.Extent{{Offset: 0, Length: 1 * mib, Seed: 1}, {Offset: 6 * mib, Length: 512 << 10, Seed: 2}}}},
		NICs:  []esxisim.NICSpec{{Network: "VM Network", MAC: "00:50:56:00:00:01"}},
		Power: esxisim.PoweredOn, Tools: esxisim.ToolsRunning, IPs: []string{"192.0.2.10"}})
	_, efi := e.host.AddVM(t, esxisim.VMSpec{Name: "efi", GuestOS: "windows2019srv-64", Firmware: "efi", SecureBoot: true, CPUs: 4, MemoryMiB: 4096,
		Disks: []esxisim.DiskSpec{{CapacityBytes: 4 * mib}},
		NICs:  []esxisim.NICSpec{{Network: "LAN", MAC: "00:50:56:00:00:02", Adapter: "e1000e"}}})
	_, two := e.host.AddVM(t, esxisim.VMSpec{Name: "two", GuestOS: "ubuntu-64",
		Disks: []esxisim.DiskSpec{{CapacityBytes: 4 * mib}, {CapacityBytes: 2 * mib, Controller: "scsi0:1", Subdir: "data"}},
		NICs:  []esxisim.NICSpec{{Network: "VM Network", MAC: "00:50:56:00:00:03"}, {Network: "Backup", MAC: "00:50:56:00:00:04"}}})

	cfg := acctest.ProviderConfig(e.providerBlock()) +
		e.migration("bios", "bios", `{ "VM Network" = "pod" }`, `
  power_off_policy = "graceful"
  validation = {
    guest_agent = true
    ip_reported = true
  }`) +
		e.migration("efi", "efi", `{ "LAN" = "pod" }`, "") +
		e.migration("two", "two", `{ "VM Network" = "pod", "Backup" = "`+e.namespace+`/backup" }`, "")

	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: acctest.ProviderFactories,
		Steps: []resource.TestStep{{
			Config: cfg,
			Check: resource.ComposeAggregateTestCheckFunc(
				attrs("vmmigration_migration.bios", map[string]string{
					"id": e.namespace + "/bios", "phase": "Completed", "power_off_action": "graceful",
					"disks.#": "1", "disks.0.data_volume": "bios-disk-0", "disks.0.size_bytes": "8388608",
					"disks.0.source_sha256": bios.Disks[0].SHA256(), "disks.0.artifact_format": "raw",
					"disks.0.artifact_sha256": bios.Disks[0].SHA256(),
				}),
				attrs("vmmigration_migration.efi", map[string]string{
					"phase": "Completed", "power_off_action": "already_off",
					"disks.0.source_sha256": efi.Disks[0].SHA256(),
				}),
				attrs("vmmigration_migration.two", map[string]string{
					"phase": "Completed", "disks.#": "2",
					"disks.0.data_volume": "two-disk-0", "disks.0.source_sha256": two.Disks[0].SHA256(),
					"disks.1.data_volume": "two-disk-1", "disks.1.source_sha256": two.Disks[1].SHA256(),
					"disks.1.device": "scsi0:1",
				}),
				resource.TestCheckResourceAttrSet("vmmigration_migration.bios", "vm_uid"),
				resource.TestCheckResourceAttrSet("vmmigration_migration.bios", "timestamps.completed"),
				resource.TestCheckResourceAttrSet("vmmigration_migration.bios", "timestamps.sourcePoweredOff"),
				func(*terraform.State) error {
					// What arrived at the destination is the source, bit for bit.
					for name, files := range map[string]*esxisim.VMFiles{"bios": bios, "efi": efi, "two": two} {
						for i, d := range files.Disks {
							dv := fmt.Sprintf("%s-disk-%d", name, i)
							got, ok := e.sim.ReceivedSHA256(e.namespace, dv)
							if !ok || got != d.SHA256() {
								return fmt.Errorf("%s received %q (%v), want the source's %s", dv, got, ok, d.SHA256())
							}
						}
						dvs, vms := e.ours(t, name)
						if len(dvs) != len(files.Disks) || len(vms) != 1 {
							return fmt.Errorf("%s: DataVolumes %v and VMs %v, want exactly one per disk and one VM", name, dvs, vms)
						}
					}
					if n := e.count("power.shutdown"); n != 1 {
						return fmt.Errorf("power.shutdown sent %d times, want once (only bios was running)", n)
					}
					if n := e.count("power.off"); n != 0 {
						return fmt.Errorf("power.off sent %d times, want never (graceful succeeded)", n)
					}
					return checkRenderedVMs(t, e)
				},
			),
		}},
	})
}

// checkRenderedVMs checks the VirtualMachines' specs against the sources.
func checkRenderedVMs(t *testing.T, e *migrationEnv) error {
	efi := e.cluster.VM(t, e.namespace, "efi")
	if !efi.EFISecureBoot {
		return fmt.Errorf("efi: %+v, want EFI firmware with secure boot", efi)
	}
	if !efi.SMM {
		return fmt.Errorf("efi: secure boot needs SMM enabled: %+v", efi)
	}
	if ifs := efi.Interfaces; len(ifs) != 1 || ifs[0].MAC != "00:50:56:00:00:02" {
		return fmt.Errorf("efi: interfaces %+v, want the source MAC kept", ifs)
	}
	two := e.cluster.VM(t, e.namespace, "two")
	// Not converted (the disks hold test data): sata, as unconverted
	// guests usually drive.
	if disks := two.Disks; len(disks) != 2 || disks[0].BootOrder != 1 || disks[0].Bus != "sata" || disks[1].Bus != "sata" {
		return fmt.Errorf("two: disks %+v, want two sata disks, the first with boot order 1", disks)
	}
	if !slices.Equal(two.DataVolumes, []string{"two-disk-0", "two-disk-1"}) {
		return fmt.Errorf("two: DataVolume volumes %v", two.DataVolumes)
	}
	if nets := two.Networks; len(nets) != 2 || !nets[0].Pod || nets[1].Multus != e.namespace+"/backup" {
		return fmt.Errorf("two: networks %+v, want the pod network and Multus %s/backup", nets, e.namespace)
	}
	return nil
}
