package provider_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/acctest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
)

// lifeCfg is one vmmigration_migration configuration of the life tests;
// the zero values are those of the first apply.
type lifeCfg struct {
	label, vm, namespace, name, storageClass string
	dest, extra                              string
}

func (e *migrationEnv) lifeConfig(cs ...lifeCfg) string {
	out := acctest.ProviderConfig(e.providerBlock())
	for _, c := range cs {
		dest := c.dest
		if dest != "" && !strings.HasSuffix(dest, "\n") {
			dest += "\n"
		}
		out += e.hcl(migrationHCL{label: c.label, vm: c.vm, namespace: c.namespace, name: c.name, storageClass: c.storageClass,
			dest: dest, retries: 3, body: c.extra})
	}
	return out
}

// addSmallVM adds a powered-off VM with one 2 MiB disk and one NIC.
func (e *migrationEnv) addSmallVM(t *testing.T, name, mac string) (int, *esxisim.VMFiles) {
	t.Helper()
	return e.host.AddVM(t, esxisim.VMSpec{Name: name, GuestOS: "rhel9-64",
		Disks: []esxisim.DiskSpec{{CapacityBytes: 2 * mib, Content: []esxisim.Extent{{Offset: 0, Length: 256 << 10, Seed: 3}}}},
		NICs:  []esxisim.NICSpec{{Network: "VM Network", MAC: mac}}})
}

func action(addr string, a plancheck.ResourceActionType) resource.ConfigPlanChecks {
	return resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, a)}}
}

// refreshPlan checks the plan of a PlanOnly step (made after a refresh).
func refreshPlan(checks ...plancheck.PlanCheck) resource.ConfigPlanChecks {
	return resource.ConfigPlanChecks{PostApplyPostRefresh: checks}
}

// TestAccMigrationLifeUpdateReplace: the plan of a new migration shows the
// disks it copies; a run strategy changed outside Terraform shows in the
// plan and is set back; run_strategy, labels, validation, retry,
// delete_policy and timeouts change in place without touching the VM;
// source, destination namespace and name, storage_class and target_format
// force a replacement; a replacement under delete_policy keep is refused at
// plan time and the VM survives; under delete_destination it migrates
// again.
func TestAccMigrationLifeUpdateReplace(t *testing.T) {
	e := newMigrationEnv(t)
	e.addSmallVM(t, "web", "00:50:56:00:10:01")
	e.addSmallVM(t, "other", "00:50:56:00:10:02")
	e.cluster.EnsureStorageClass(t, "fast")
	ns2 := e.namespace + "-b"
	e.cluster.CreateNamespace(t, ns2)
	const addr = "vmmigration_migration.web"
	base := lifeCfg{label: "web"}
	with := func(f func(*lifeCfg)) string {
		c := base
		f(&c)
		return e.lifeConfig(c)
	}
	var uid string
	saveUID := func(*terraform.State) error { uid = e.cluster.VM(t, e.namespace, "web").UID; return nil }
	sameUID := func(*terraform.State) error {
		if got := e.cluster.VM(t, e.namespace, "web").UID; got != uid {
			return fmt.Errorf("VirtualMachine UID %s, want %s (the VM must not be replaced)", got, uid)
		}
		return nil
	}
	replace := func(f func(*lifeCfg)) resource.TestStep {
		return resource.TestStep{Config: with(f), PlanOnly: true, ExpectNonEmptyPlan: true,
			ConfigPlanChecks: refreshPlan(plancheck.ExpectResourceAction(addr, plancheck.ResourceActionDestroyBeforeCreate))}
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: acctest.ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: e.lifeConfig(base),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionCreate),
					plancheck.ExpectKnownValue(addr, tfjsonpath.New("disks"), knownvalue.ListExact([]knownvalue.Check{
						knownvalue.ObjectPartial(map[string]knownvalue.Check{
							"index": knownvalue.Int64Exact(0), "device": knownvalue.StringExact("scsi0:0"),
							"size_bytes": knownvalue.Int64Exact(2 * mib), "data_volume": knownvalue.StringExact("web-disk-0"),
							"source_path": knownvalue.StringRegexp(errRE("web-flat.vmdk")),
						}),
					})),
					plancheck.ExpectUnknownValue(addr, tfjsonpath.New("disks").AtSliceIndex(0).AtMapKey("source_sha256")),
					plancheck.ExpectKnownValue(addr, tfjsonpath.New("drift"), knownvalue.ListSizeExact(0)),
				}},
				// The framework then checks that the plans after apply and
				// after a refresh are empty.
				Check: resource.ComposeAggregateTestCheckFunc(
					attrs(addr, map[string]string{"phase": "Completed", "drift.#": "0", "destination.run_strategy": "Always"}),
					saveUID),
			},
			{
				// Halted outside Terraform: the refreshed plan sets it back.
				PreConfig: func() { e.cluster.SetRunStrategy(t, e.namespace, "web", "Halted") },
				Config:    e.lifeConfig(base), PlanOnly: true, ExpectNonEmptyPlan: true,
				ConfigPlanChecks: refreshPlan(
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
					plancheck.ExpectKnownValue(addr, tfjsonpath.New("destination").AtMapKey("run_strategy"), knownvalue.StringExact("Always"))),
			},
			{
				Config: e.lifeConfig(base), ConfigPlanChecks: action(addr, plancheck.ResourceActionUpdate),
				Check: resource.ComposeAggregateTestCheckFunc(sameUID, func(*terraform.State) error {
					if rs := e.cluster.VM(t, e.namespace, "web").RunStrategy; rs != "Always" {
						return fmt.Errorf("runStrategy %q, want Always again", rs)
					}
					return nil
				}),
			},
			{
				Config:           with(func(c *lifeCfg) { c.dest = halted }),
				ConfigPlanChecks: action(addr, plancheck.ResourceActionUpdate),
				Check: resource.ComposeAggregateTestCheckFunc(sameUID, func(*terraform.State) error {
					vm := e.cluster.VM(t, e.namespace, "web")
					if vm.RunStrategy != "Halted" || vm.Labels["team"] != "a" {
						return fmt.Errorf("runStrategy %q, labels %v: want Halted and team=a", vm.RunStrategy, vm.Labels)
					}
					return nil
				}),
			},
			{
				Config: with(func(c *lifeCfg) {
					c.dest = halted
					c.extra = "  validation = { timeout = \"1m\" }\n"
				}),
				ConfigPlanChecks: action(addr, plancheck.ResourceActionUpdate),
				Check:            sameUID,
			},
			{
				Config: with(func(c *lifeCfg) {
					c.dest = halted
					c.extra = "  validation = { timeout = \"1m\" }\n  delete_policy = \"delete_destination\"\n  timeouts { delete = \"5m\" }\n"
				}),
				ConfigPlanChecks: action(addr, plancheck.ResourceActionUpdate),
				Check:            resource.ComposeAggregateTestCheckFunc(sameUID, attrs(addr, map[string]string{"delete_policy": "delete_destination"})),
			},
			// Identity changes replace the migration (plans only).
			replace(func(c *lifeCfg) { c.dest, c.extra, c.vm = halted, ddExtra, "other" }),
			replace(func(c *lifeCfg) { c.dest, c.extra, c.namespace = halted, ddExtra, ns2 }),
			replace(func(c *lifeCfg) { c.dest, c.extra, c.name = halted, ddExtra, "web2" }),
			replace(func(c *lifeCfg) { c.dest, c.extra, c.storageClass = halted, ddExtra, "fast" }),
			replace(func(c *lifeCfg) { c.dest, c.extra = halted, ddExtra+"  target_format = \"qcow2\"\n" }),
			{
				// Back to keep: a replacement would adopt the old VM.
				Config:           with(func(c *lifeCfg) { c.dest = halted }),
				ConfigPlanChecks: action(addr, plancheck.ResourceActionUpdate),
			},
			{
				Config:      with(func(c *lifeCfg) { c.dest, c.storageClass = halted, "fast" }),
				PlanOnly:    true,
				ExpectError: errRE(`Replacement would adopt the old VM`),
			},
			{
				Config: with(func(c *lifeCfg) { c.dest = halted }), PlanOnly: true,
				Check: sameUID,
			},
			{
				Config:           with(func(c *lifeCfg) { c.dest, c.extra = halted, ddExtra }),
				ConfigPlanChecks: action(addr, plancheck.ResourceActionUpdate),
			},
			{
				// delete_destination: the replacement deletes the old VM
				// and migrates the source again into the new storage class.
				Config:           with(func(c *lifeCfg) { c.dest, c.extra, c.storageClass = halted, ddExtra, "fast" }),
				ConfigPlanChecks: action(addr, plancheck.ResourceActionDestroyBeforeCreate),
				Check: resource.ComposeAggregateTestCheckFunc(
					attrs(addr, map[string]string{"phase": "Completed", "destination.storage_class": "fast"}),
					func(*terraform.State) error {
						if got := e.cluster.VM(t, e.namespace, "web").UID; got == uid {
							return fmt.Errorf("VirtualMachine UID %s unchanged, want a new VM", got)
						}
						if sc := e.cluster.DataVolume(t, e.namespace, "web-disk-0").StorageClass; sc != "fast" {
							return fmt.Errorf("DataVolume storage class %q, want fast", sc)
						}
						return nil
					}),
			},
		},
	})
}

const (
	halted  = `    run_strategy = "Halted"` + "\n" + `    labels = { team = "a" }`
	ddExtra = "  validation = { timeout = \"1m\" }\n  delete_policy = \"delete_destination\"\n  timeouts { delete = \"5m\" }\n"
)

// TestAccMigrationLifeDeletePolicies destroys migrations through
// Terraform: keep leaves the VM and DataVolumes and removes the record,
// delete_destination removes them too, rollback is refused once the VM has
// started and then nothing is deleted.
func TestAccMigrationLifeDeletePolicies(t *testing.T) {
	e := newMigrationEnv(t)
	e.addSmallVM(t, "keep", "00:50:56:00:20:01")
	e.addSmallVM(t, "dd", "00:50:56:00:20:02")
	e.addSmallVM(t, "rb", "00:50:56:00:20:03")
	keep := lifeCfg{label: "keep"}
	dd := lifeCfg{label: "dd", extra: `  delete_policy = "delete_destination"` + "\n"}
	rb := lifeCfg{label: "rb", extra: `  delete_policy = "rollback"` + "\n"}
	rbKeep := lifeCfg{label: "rb"}
	left := func(name string, wantObjects bool) error {
		dvs, vms := e.ours(t, name)
		if wantObjects && (len(dvs) != 1 || len(vms) != 1) {
			return fmt.Errorf("%s: DataVolumes %v, VMs %v; want its VM and DataVolume kept", name, dvs, vms)
		}
		if !wantObjects && (len(dvs) != 0 || len(vms) != 0) {
			return fmt.Errorf("%s: DataVolumes %v, VMs %v; want them deleted", name, dvs, vms)
		}
		return nil
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: acctest.ProviderFactories,
		Steps: []resource.TestStep{
			{Config: e.lifeConfig(keep, dd, rb)},
			{
				Config: e.lifeConfig(keep, dd),
				ExpectError: errRE(`Error deleting migration ` +
					`delete_policy "rollback" for migration ` + e.namespace + `/rb: migration needs manual intervention in phase Completed: ` +
					`cannot roll back: the destination VM ` + e.namespace + `/rb started at`),
			},
			{
				Config:           e.lifeConfig(keep, dd, rbKeep),
				ConfigPlanChecks: action("vmmigration_migration.rb", plancheck.ResourceActionUpdate),
				Check: func(*terraform.State) error {
					if !e.cluster.HasRecord(t, e.namespace, "rb") {
						return fmt.Errorf("the refused rollback removed the record of rb")
					}
					return left("rb", true)
				},
			},
			{
				Config: acctest.ProviderConfig(e.providerBlock()),
				Check: func(*terraform.State) error {
					for _, n := range []string{"keep", "dd", "rb"} {
						if e.cluster.HasRecord(t, e.namespace, n) {
							return fmt.Errorf("the record of %s is still there", n)
						}
					}
					if err := left("keep", true); err != nil {
						return err
					}
					if err := left("rb", true); err != nil {
						return err
					}
					return left("dd", false)
				},
			},
		},
	})
}
