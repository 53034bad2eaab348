package provider_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/acctest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kubesim"
)

// foreignVM adds a source VM with two disks and two NICs to the host, and
// the VirtualMachine and DataVolumes another tool made of it to the
// cluster: no record, no label of ours, its own names, a label of its own.
func (e *migrationEnv) foreignVM(t *testing.T, srcName, name, mac1, mac2 string) {
	t.Helper()
	e.host.AddVM(t, esxisim.VMSpec{Name: srcName, GuestOS: "rhel9-64",
		Disks: []esxisim.DiskSpec{{CapacityBytes: 2 * mib, Thin: true}, {CapacityBytes: 3 * mib, Thin: true}},
		NICs:  []esxisim.NICSpec{{Network: "VM Network", MAC: mac1}, {Network: "Storage", MAC: mac2}}})
	e.cluster.CreateForeignVM(t, acctest.ForeignVM{Namespace: e.namespace, Name: name, StorageClass: "standard",
		RunStrategy: "Halted", Labels: map[string]string{"app": name},
		Disks: []kubesim.ForeignDisk{{Name: name + "-root", SizeBytes: 2 * mib}, {Name: name + "-data", SizeBytes: 3 * mib, PVCSpec: true}},
		NICs:  []kubesim.ForeignNIC{{MAC: mac1}, {MAC: mac2, Multus: "default/storage-net"}}})
}

// adoptConfig is the configuration that matches an adopted VM: what the
// cluster and the record show, and no transport, validation or retry
// (nothing is copied).
func (e *migrationEnv) adoptConfig(labels ...string) string {
	out := acctest.ProviderConfig(e.providerBlock())
	for _, l := range labels {
		src := strings.ReplaceAll(strings.ToUpper(l[:1])+l[1:], "-", " ")
		out += e.hcl(migrationHCL{label: l, vm: src, networkMap: `{ "VM Network" = "pod", "Storage" = "default/storage-net" }`,
			dest: fmt.Sprintf("    run_strategy  = \"Halted\"\n    labels        = { app = %q }\n", l), cluster: true, conversion: "-"})
	}
	return out
}

// TestAccMigrationAdopt imports VMs that another tool migrated (no
// record): by terraform import and by an import block, each source found
// by name (display name "Web a" for web-a), MACs and disk sizes. The
// import records a Completed migration and labels the VM and DataVolumes
// as the migration's, and a plan with the matching configuration (no
// transport) is empty. A VM that matches no source by more than its name
// is refused with the candidates, and nothing is written.
func TestAccMigrationAdopt(t *testing.T) {
	e := newMigrationEnv(t)
	e.foreignVM(t, "Web a", "web-a", "00:50:56:00:60:01", "00:50:56:00:60:02")
	e.foreignVM(t, "Web b", "web-b", "00:50:56:00:60:03", "00:50:56:00:60:04")
	// A VM whose only link to source "stray" is its name.
	strayID, _ := e.host.AddVM(t, esxisim.VMSpec{Name: "stray", Disks: []esxisim.DiskSpec{{CapacityBytes: 1 * mib}},
		NICs: []esxisim.NICSpec{{Network: "VM Network", MAC: "00:50:56:00:60:09"}}})
	e.cluster.CreateForeignVM(t, acctest.ForeignVM{Namespace: e.namespace, Name: "stray", StorageClass: "standard", RunStrategy: "Halted",
		Disks: []kubesim.ForeignDisk{{Name: "stray-root", SizeBytes: 5 * mib}}, NICs: []kubesim.ForeignNIC{{MAC: "02:00:00:00:60:09"}}})

	adopted := func(name string) error {
		vm := e.cluster.VM(t, e.namespace, name)
		if vm.Labels[engine.LabelMigration] != name || vm.Labels["app"] != name {
			return fmt.Errorf("VirtualMachine %s labels %v: want ours added, app kept", name, vm.Labels)
		}
		for _, dv := range []string{name + "-root", name + "-data"} {
			d := e.cluster.DataVolume(t, e.namespace, dv)
			if d.Labels[engine.LabelMigration] != name || d.Labels["migrated-by"] != "other-tool" {
				return fmt.Errorf("DataVolume %s labels %v", dv, d.Labels)
			}
		}
		if !e.cluster.HasRecord(t, e.namespace, name) {
			return fmt.Errorf("no record for %s", name)
		}
		return nil
	}
	const addrA, addrB = "vmmigration_migration.web-a", "vmmigration_migration.web-b"
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: acctest.ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: e.adoptConfig("web-a"), ResourceName: addrA, ImportState: true, ImportStatePersist: true,
				ImportStateId: e.namespace + "/web-a",
				ImportStateCheck: func(is []*terraform.InstanceState) error {
					if len(is) != 1 {
						return fmt.Errorf("%d instances imported", len(is))
					}
					a := is[0].Attributes
					for k, want := range map[string]string{
						"phase": "Completed", "source.vm_name": "Web a", "destination.storage_class": "standard",
						"destination.network_map.Storage": "default/storage-net", "destination.run_strategy": "Halted",
						"disks.#": "2", "disks.0.data_volume": "web-a-root", "disks.1.data_volume": "web-a-data",
						"disks.1.size_bytes": fmt.Sprint(3 * mib), "disks.0.source_sha256": "", "drift.#": "0",
					} {
						if a[k] != want {
							return fmt.Errorf("%s = %q, want %q", k, a[k], want)
						}
					}
					found := false
					for i := 0; a[fmt.Sprintf("conditions.%d.type", i)] != ""; i++ {
						if a[fmt.Sprintf("conditions.%d.type", i)] == engine.CondAdopted {
							found = strings.HasPrefix(a[fmt.Sprintf("conditions.%d.message", i)], "adopted: matched by name, MACs (2/2), disk sizes (2/2)")
						}
					}
					if !found {
						return fmt.Errorf("no Adopted condition saying what matched: %v", a)
					}
					return adopted("web-a")
				},
			},
			{
				// The matching configuration plans nothing.
				Config: e.adoptConfig("web-a"), PlanOnly: true,
				ConfigPlanChecks: refreshPlan(plancheck.ExpectResourceAction(addrA, plancheck.ResourceActionNoop)),
			},
			{
				Config: e.adoptConfig("web-a", "stray"), ResourceName: "vmmigration_migration.stray", ImportState: true,
				ImportStateId: e.namespace + "/stray",
				ExpectError: errRE(`Cannot import migration Adopting VirtualMachine ` + e.namespace + `/stray as a migration failed: ` +
					`VirtualMachine ` + e.namespace + `/stray has no migration record, and no VM on ESXi host(s) esxi-a matches it well enough to adopt it: ` +
					`a source must match by all its MAC addresses, or by name and the sizes of all its disks Candidates: ` +
					fmt.Sprintf(`- VM "stray" (vmid %d, poweredOff) on host esxi-a: matched by name; not by MACs (0/1), disk sizes (0/1)`, strayID)),
			},
			{
				// The same expectation as TestAccMigrationLifeImport's.
				Config: e.adoptConfig("web-a", "nothing"), ResourceName: "vmmigration_migration.nothing", ImportState: true,
				ImportStateId: e.namespace + "/nothing",
				ExpectError: errRE(`migration ` + e.namespace + `/nothing has no record (ConfigMap ` + e.namespace + `/vmmigration-nothing) ` +
					`and there is no VirtualMachine ` + e.namespace + `/nothing to adopt either.`),
			},
		},
		CheckDestroy: func(*terraform.State) error {
			if e.cluster.HasRecord(t, e.namespace, "stray") {
				return fmt.Errorf("the refused import of stray wrote a record")
			}
			vm := e.cluster.VM(t, e.namespace, "stray")
			if vm.Labels[engine.LabelMigration] != "" {
				return fmt.Errorf("the refused import of stray labelled its VM: %v", vm.Labels)
			}
			return nil
		},
	})

	// An import block, as the first step (the framework's later import
	// block steps re-import a resource already in the state): Terraform
	// plans the import, and the framework requires that plan to change
	// nothing else.
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: acctest.ProviderFactories,
		Steps: []resource.TestStep{{
			Config: e.adoptConfig("web-b"), ResourceName: addrB, ImportState: true,
			ImportStateKind: resource.ImportBlockWithID, ImportStateId: e.namespace + "/web-b",
			ImportPlanChecks: resource.ImportPlanChecks{PreApply: []plancheck.PlanCheck{
				plancheck.ExpectResourceAction(addrB, plancheck.ResourceActionNoop),
			}},
		}},
		CheckDestroy: func(*terraform.State) error {
			if err := adopted("web-b"); err != nil {
				return fmt.Errorf("the import block did not adopt web-b: %w", err)
			}
			return nil
		},
	})
}
