package provider_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/acctest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kubesim"
)

// rotation is the upload proxy's CA renewal a test made mid-wave.
type rotation struct {
	at       time.Time
	before   []byte // the CA that signed the proxy's certificate before
	after    []byte // the CA that signs it since
	err      error
	happened bool
}

// rotateOnFirstUpload renews the upload proxy's CA, as CDI's operator does
// every 24 hours, as soon as the proxy has taken its first upload request,
// and reports when the renewal was done (certificate and bundle both).
func rotateOnFirstUpload(ctx context.Context, sim *kubesim.Sim) <-chan rotation {
	done := make(chan rotation, 1)
	go func() {
		defer close(done)
		for len(sim.UploadRequestLog()) == 0 {
			select {
			case <-ctx.Done():
				done <- rotation{err: fmt.Errorf("no upload request before the end of the wave: %w", ctx.Err())}
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
		r := rotation{before: sim.UploadProxyCACertPEM(), happened: true}
		r.err = sim.RotateUploadProxyCA(ctx)
		r.at, r.after = time.Now(), sim.UploadProxyCACertPEM()
		done <- r
	}()
	return done
}

// TestAccRealClusterWave is the real-cluster acceptance test: a wave of
// three VMs migrated through the terraform CLI into a namespace whose
// StorageClass binds on first consumer, with no transport block at all
// (the upload proxy's URL comes from CDIConfig status.uploadProxyURL and
// its CA from ConfigMap cdi/cdi-uploadproxy-signer-bundle), while the
// proxy's CA is renewed mid-wave: the renewal comes with the first upload
// request, and the third VM waits for the first (depends_on), so its
// uploads start after the renewal and must trust the new CA. Every disk
// arrives intact through CDI's upload server, and every VM keeps the
// firmware UUID and serial KubeVirt's admission gave it through a second
// apply that plans nothing and a plan after it.
func TestAccRealClusterWave(t *testing.T) {
	e := newMigrationEnv(t)
	e.cluster.EnsureWaitForFirstConsumerStorageClass(t, "wffc-wave")
	files := map[string]*esxisim.VMFiles{}
	for i, n := range []string{"wave-a", "wave-b", "wave-c"} {
		_, files[n] = e.addSmallVM(t, n, fmt.Sprintf("00:50:56:00:70:%02x", i+1))
	}
	cfg := acctest.ProviderConfig(e.providerBlock())
	for _, m := range []struct{ name, after string }{{"wave-a", ""}, {"wave-b", ""}, {"wave-c", "wave-a"}} {
		dependsOn := ""
		if m.after != "" {
			dependsOn = fmt.Sprintf("  depends_on = [vmmigration_migration.%s]\n", m.after)
		}
		cfg += e.hcl(migrationHCL{label: m.name, storageClass: "wffc-wave", cluster: true, body: dependsOn})
	}

	ctx, cancel := context.WithCancel(t.Context())
	rotated := rotateOnFirstUpload(ctx, e.sim)
	t.Cleanup(func() {
		cancel()
		<-rotated // the goroutine has ended before the sim stops
	})

	type identity struct{ uuid, serial, uid string }
	admitted := map[string]identity{}
	keepsIdentity := func(when string) resource.TestCheckFunc {
		return func(*terraform.State) error {
			for name, want := range admitted {
				vm := e.cluster.VM(t, e.namespace, name)
				if got := (identity{vm.FirmwareUUID, vm.FirmwareSerial, vm.UID}); got != want {
					return fmt.Errorf("%s: VM %s has firmware UUID %q serial %q UID %s, want %q, %q and %s as after the first apply",
						when, name, got.uuid, got.serial, got.uid, want.uuid, want.serial, want.uid)
				}
			}
			return nil
		}
	}

	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: acctest.ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: cfg,
				Check: resource.ComposeAggregateTestCheckFunc(
					attrs("vmmigration_migration.wave-a", map[string]string{"phase": "Completed", "disks.#": "1"}),
					attrs("vmmigration_migration.wave-b", map[string]string{"phase": "Completed", "disks.#": "1"}),
					attrs("vmmigration_migration.wave-c", map[string]string{"phase": "Completed", "disks.#": "1"}),
					func(*terraform.State) error {
						// The CA was renewed mid-wave, and uploads came after.
						cancel()
						r := <-rotated
						switch {
						case !r.happened || r.err != nil:
							return fmt.Errorf("the upload proxy's CA was not renewed: %v", r.err)
						case bytes.Equal(r.before, r.after):
							return fmt.Errorf("the upload proxy's CA is the same after its renewal")
						}
						// wave-c's DataVolume is made only once wave-a is
						// Completed, long after the upload that set off the
						// renewal: its upload meets the new CA.
						var after []string
						lateC := false
						for _, u := range e.sim.UploadRequestLog() {
							if u.At.After(r.at) {
								after = append(after, u.Namespace+"/"+u.Name)
								lateC = lateC || u.Name == "wave-c-disk-0"
							}
						}
						if !lateC {
							return fmt.Errorf("wave-c's upload did not come after the CA's renewal (requests: %+v, renewed at %v)", e.sim.UploadRequestLog(), r.at)
						}
						t.Logf("uploads after the CA's renewal: %v", after)
						// Every disk arrived intact through CDI's upload
						// server, whichever CA its upload met.
						for name, f := range files {
							for i, d := range f.Disks {
								dv := fmt.Sprintf("%s-disk-%d", name, i)
								if got, ok := e.sim.ReceivedSHA256(e.namespace, dv); !ok || got != d.SHA256() {
									return fmt.Errorf("%s received %q (%v), want the source's %s", dv, got, ok, d.SHA256())
								}
								if sc := e.cluster.DataVolume(t, e.namespace, dv).StorageClass; sc != "wffc-wave" {
									return fmt.Errorf("DataVolume %s has StorageClass %q, want wffc-wave", dv, sc)
								}
							}
						}
						// The identity admission gave each VM is the one it has.
						for name := range files {
							fw, ok := e.sim.AdmittedFirmware(e.namespace, name)
							if !ok || fw.UUID == "" || fw.Serial == "" {
								return fmt.Errorf("admission gave VM %s no firmware identity: %+v %v", name, fw, ok)
							}
							vm := e.cluster.VM(t, e.namespace, name)
							admitted[name] = identity{fw.UUID, fw.Serial, vm.UID}
						}
						return keepsIdentity("after the first apply")(nil)
					},
				),
			},
			{
				// A second apply of the same configuration changes nothing.
				Config:           cfg,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
				Check:            keepsIdentity("after a second apply"),
			},
			{
				// A plan after it still has nothing to do.
				Config:   cfg,
				PlanOnly: true,
			},
		},
	})
}
