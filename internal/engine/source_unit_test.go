package engine

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/fault"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
)

// Discoveries by name share the host's listing and read only their own VM
// again: a wave of N migrations from a host of N VMs reads each VM's
// configuration about twice, not N times. A VM re-registered or a name
// that appeared since the listing is still found, from a fresh read.
func TestDiscoveryByNameSharesTheListing(t *testing.T) {
	srv, reg := newSimHost(t)
	const n = 6
	ids := map[string]int{}
	for i := range n {
		name := fmt.Sprintf("vm-%d", i)
		id, _, err := srv.AddVM(esxisim.VMSpec{Name: name, Disks: []esxisim.DiskSpec{{CapacityBytes: 1 << 20}}})
		if err != nil {
			t.Fatal(err)
		}
		ids[name] = id
	}
	e, err := New(Deps{ESXi: reg, Kube: kube.NewForRESTConfig(&rest.Config{Host: "https://127.0.0.1:1"})})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	guestReads := func() int {
		k := 0
		for _, c := range srv.Commands() {
			k += strings.Count(c, "vmsvc/get.guest")
		}
		return k
	}
	find := func(name string) (*esxi.VM, error) {
		return e.findSource(ctx, Spec{Host: "esx1", VMName: name}, record.Identity{}, 0)
	}

	for i := range n {
		name := fmt.Sprintf("vm-%d", i)
		vm, err := find(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if vm.VMID != ids[name] || vm.Name != name || len(vm.Disks) != 1 {
			t.Fatalf("%s: found vmid %d %q with %d disk(s), want vmid %d", name, vm.VMID, vm.Name, len(vm.Disks), ids[name])
		}
	}
	// One listing of n VMs and one fresh read per discovery; reading the
	// whole host for each would be n*n.
	if got := guestReads(); got != 2*n {
		t.Fatalf("%d discoveries read guest info %d times, want %d (one shared listing, one fresh read each)", n, got, 2*n)
	}

	// vm-1 re-registered (new vmid) after the listing: the stale vmid is
	// not taken, the VM is found by a fresh read.
	var vmx string
	for _, v := range srv.VMs() {
		if v.Vmid == ids["vm-1"] {
			vmx = v.VMXPath
		}
	}
	if err := srv.Unregister(ids["vm-1"]); err != nil {
		t.Fatal(err)
	}
	newID := srv.Register(vmx)
	vm, err := find("vm-1")
	if err != nil || vm.VMID != newID {
		t.Fatalf("re-registered vm-1: got %+v, %v; want vmid %d", vm, err, newID)
	}
	// A VM added after the listing is found by name.
	lateID, _, err := srv.AddVM(esxisim.VMSpec{Name: "late", Disks: []esxisim.DiskSpec{{CapacityBytes: 1 << 20}}})
	if err != nil {
		t.Fatal(err)
	}
	if vm, err := find("late"); err != nil || vm.VMID != lateID {
		t.Fatalf("late VM: got %+v, %v; want vmid %d", vm, err, lateID)
	}
	// A VM gone since the listing is reported gone, from a fresh read.
	if err := srv.Unregister(ids["vm-2"]); err != nil {
		t.Fatal(err)
	}
	var ferr *fault.Error
	if _, err := find("vm-2"); !errors.As(err, &ferr) || ferr.Reason != "SourceVMNotFound" {
		t.Fatalf("unregistered vm-2: got %v, want SourceVMNotFound", err)
	}
	// A name not on the host, with no listing to share: the one listing
	// read for the call is the verdict's, the host is not read twice.
	e.ForgetInventory("esx1")
	before := guestReads()
	if _, err := find("nowhere"); !errors.As(err, &ferr) || ferr.Reason != "SourceVMNotFound" {
		t.Fatalf("a VM of no such name: got %v, want SourceVMNotFound", err)
	}
	if got, want := guestReads()-before, len(srv.VMs()); got != want {
		t.Errorf("a VM of no such name read guest info %d times, want %d (the host's VMs once)", got, want)
	}
}

func newSimHost(t *testing.T) (*esxisim.Server, *esxi.Registry) {
	t.Helper()
	key, err := esxisim.GenerateHostKey(esxisim.KeyECDSA)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := esxisim.New(esxisim.Options{Root: t.TempDir(), HostKey: key, Users: []esxisim.User{{Name: "root", Password: "pw"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	host, portStr, _ := strings.Cut(srv.Addr(), ":")
	port, _ := strconv.Atoi(portStr)
	reg := esxi.NewRegistry(nil)
	if _, err := reg.Add(esxi.HostConfig{Name: "esx1", Address: host, Port: port, Password: "pw",
		HostKeyFingerprint: srv.Fingerprint(), KeepAliveInterval: -1}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	return srv, reg
}
