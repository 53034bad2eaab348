package provider_test

import (
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/acctest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
)

func TestAccPreflight(t *testing.T) {
	t.Parallel()
	acctest.PreCheck(t)
	c, kubeBlock := kubeconfig(t)
	c.CreateNamespace(t, "apps")
	// Other tests of the package share the cluster and may have made it.
	c.EnsureStorageClass(t, "fast")
	// Somebody else's VM under the name a migration wants.
	c.CreateVM(t, "apps", "legacy", "", nil)
	c.CreateStorageQuota(t, "apps", "storage", "100Mi", "80Mi")

	host := acctest.NewESXi(t, esxisim.Options{FirstVmid: 10})
	host.AddVM(t, esxisim.VMSpec{Name: "web-01", GuestOS: "rhel9-64",
		Disks: []esxisim.DiskSpec{{CapacityBytes: 4 << 20}, {CapacityBytes: 2 << 20}},
		NICs:  []esxisim.NICSpec{{Network: "VM Network"}, {Network: "DMZ"}},
		Power: esxisim.PoweredOn, Tools: esxisim.ToolsRunning, IPs: []string{"10.0.0.5"}})
	_, big := host.AddVM(t, esxisim.VMSpec{Name: "big", Snapshots: true,
		Disks: []esxisim.DiskSpec{{CapacityBytes: 200 << 20}}, NICs: []esxisim.NICSpec{{Network: "VM Network"}},
		Power: esxisim.PoweredOn})
	breakChain(t, big)

	cfg := acctest.ProviderConfig(host.HostBlock("esxi-a")+kubeBlock) + `
data "vmmigration_preflight" "ok" {
  host          = "esxi-a"
  vm_name       = "web-01"
  namespace     = "apps"
  name          = "web-01"
  storage_class = "fast"
  network_map = {
    "VM Network" = "pod"
    "DMZ"        = "apps/dmz"
  }
}

data "vmmigration_preflight" "warn" {
  host             = "esxi-a"
  vm_name          = "web-01"
  namespace        = "apps"
  name             = "web-01"
  storage_class    = "fast"
  power_off_policy = "hard"
  network_map = {
    "VM Network" = "pod"
    "DMZ"        = "apps/dmz-vlan"
  }
}

data "vmmigration_preflight" "cluster" {
  host          = "esxi-a"
  vm_name       = "web-01"
  namespace     = "apps"
  name          = "web-01"
  storage_class = "fast"
  execution     = "cluster"
  network_map = {
    "VM Network" = "pod"
    "DMZ"        = "apps/dmz"
  }
}

data "vmmigration_preflight" "blocked" {
  host             = "esxi-a"
  vmid             = 11
  namespace        = "apps"
  name             = "legacy"
  storage_class    = "slow"
  power_off_policy = "graceful"
}
`
	const ok, warn, blocked = "data.vmmigration_preflight.ok", "data.vmmigration_preflight.warn", "data.vmmigration_preflight.blocked"
	const inCluster = "data.vmmigration_preflight.cluster"
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: acctest.ProviderFactories,
		Steps: []resource.TestStep{{
			Config: cfg,
			Check: resource.ComposeAggregateTestCheckFunc(
				attrs(ok, map[string]string{
					"id":                     "esxi-a/10:apps/web-01",
					"passed":                 "true",
					"blockers.#":             "0",
					"warnings.#":             "0",
					"total_bytes":            "6291456",
					"disks.#":                "2",
					"disks.0.data_volume":    "web-01-disk-0",
					"disks.0.capacity_bytes": "4194304",
					"disks.1.data_volume":    "web-01-disk-1",
					"disks.1.device":         "scsi0:1",
					"checks.#":               "18",
					"checks.0.id":            "guest_os_supported",
					"checks.0.passed":        "true",
					"checks.10.id":           "destination_name_free",
					"checks.11.id":           "storage_class_exists",
					"checks.11.message":      `StorageClass "fast" exists.`,
					"checks.12.id":           "storage_quota_fits",
					"checks.12.message":      "The disks need 14.4 MiB (15057553 bytes) for their claims with CDI's 6% filesystem overhead and the upload's scratch claim beside each; the quota leaves 20 MiB.",
					"checks.13.id":           "source_unclaimed",
					"checks.13.passed":       "true",
					"checks.14.id":           "conversion_tools",
					"checks.14.passed":       "true",
					"checks.15.id":           "guest_convertible",
					"checks.15.passed":       "true",
					"execution":              "local",
					"checks.16.id":           "execution",
					"checks.16.passed":       "true",
					"checks.17.id":           "work_dir_space",
					"checks.17.passed":       "true",
				}),
				attrs(warn, map[string]string{
					"passed":     "true",
					"blockers.#": "0",
					"warnings.#": "1",
					"warnings.0": `power_off_policy: VM "web-01" is poweredOn and power_off_policy is "hard": it will be powered off without a guest shutdown (like pulling the plug).`,
				}),
				// Cluster execution without the provider's worker_image:
				// a blocker that says so, and what to set instead (the
				// guest conversion runs in a conversion Job). No work_dir
				// check: nothing is staged locally. The quota that holds
				// the disks' claims does not hold the journal claims the
				// copies keep beside them: a blocker too.
				attrs(inCluster, map[string]string{
					"execution":    "cluster",
					"passed":       "false",
					"blockers.#":   "2",
					"blockers.0":   `storage_quota_fits: The disks need 648.4 MiB (679854737 bytes) for their claims with CDI's 6% filesystem overhead and a journal claim beside each for cluster execution's copies (642 MiB of the total) but the ResourceQuota of namespace "apps" leaves 20 MiB for StorageClass "fast". Raise the quota or free space first.`,
					"blockers.1":   `execution: VM "web-01" cannot be migrated with execution "cluster": the provider's worker_image is not set: cluster execution runs its copy and conversion Jobs from that image (see make image; pin it by digest). Set execution = "local" for this migration, or fix what is listed.`,
					"checks.#":     "17",
					"checks.16.id": "execution",
				}),
				attrs(blocked, map[string]string{
					"passed":     "false",
					"blockers.#": "6",
					"blockers.0": `snapshot_chain: VM "big" runs on snapshot chains that cannot be read consistently: scsi0:0 (/vmfs/volumes/datastore1/big/big-000001.vmdk): /vmfs/volumes/datastore1/big/big.vmdk: parent of /vmfs/volumes/datastore1/big/big-000001.vmdk: descriptor could not be read or parsed. A missing parent must be restored to the path the child names (parentFileNameHint), or the VM re-registered where its files are; a CID mismatch means a parent disk was written after the snapshot was taken: restore the parent from a backup, or consolidate the snapshots in the host client (Snapshots > Consolidate) and apply again.`,
					"blockers.1": `nics_mapped: NICs without a destination network: ethernet0 on "VM Network". Add each source network to network_map, as "pod" or a Multus network "<namespace>/<name>".`,
					"blockers.2": `power_off_policy: VM "big" is poweredOn, power_off_policy is "graceful", but VMware Tools is not running, so the guest cannot be asked to shut down. Start Tools in the guest, shut it down yourself, or choose "graceful_then_hard" or "hard".`,
					"blockers.3": `destination_name_free: Namespace "apps" already has VirtualMachine legacy, not created by this migration. The provider never overwrites what it does not own: choose another destination name, or remove or import the existing objects.`,
					"blockers.4": `storage_class_exists: StorageClass "slow" does not exist. Use one listed by ` + "`kubectl get storageclass`.",
					"blockers.5": `storage_quota_fits: The disks need 424 MiB for their claims with CDI's 6% filesystem overhead and the upload's scratch claim beside each but the ResourceQuota of namespace "apps" leaves 20 MiB for StorageClass "slow". Raise the quota or free space first.`,
					"warnings.#": "1",
					"warnings.0": `vmware_tools: VMware Tools is not running in VM "big" (status "toolsNotInstalled"): the guest cannot be shut down gracefully and its IP address is unknown.`,
				}),
			),
		}},
	})
}
