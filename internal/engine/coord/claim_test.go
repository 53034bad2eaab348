package coord

import (
	"testing"
)

// One source, one migration: the first to take the claim holds it while
// its record exists; a holder without a record loses it to the next.
func TestClaims(t *testing.T) {
	ctx := t.Context()
	c, ns := newNamespace(t, "coord-claim")
	clk := newClock()
	st := Store{Kube: c, Now: clk.Now}
	cl := Claims{Kube: c, Namespace: "coord-claims", Records: st, Now: clk.Now}
	const host, hostID, vmx = "esx1", "hostkey:SHA256:x", "[ds1] vm/vm.vmx"

	if _, err := st.CreatePending(ctx, pending(ns, "a")); err != nil {
		t.Fatal(err)
	}
	holder, took, err := cl.Take(ctx, host, hostID, vmx, ns, "a")
	if err != nil || holder != nil || !took {
		t.Fatalf("first Take = %+v, %v, %v; want taken", holder, took, err)
	}
	if holder, took, err := cl.Take(ctx, host, hostID, vmx, ns, "a"); err != nil || holder != nil || took {
		t.Fatalf("Take by the holder = %+v, %v, %v; want held already", holder, took, err)
	}
	holder, took, err = cl.Take(ctx, host, hostID, vmx, ns, "b")
	if err != nil || took || holder == nil || holder.Holder() != ns+"/a" || holder.VMXPath != vmx || holder.Host != host {
		t.Fatalf("Take by another = %+v, %v, %v; want held by %s/a", holder, took, err, ns)
	}
	if got, err := cl.Of(ctx, hostID, vmx, ns, "b"); err != nil || got == nil || got.Holder() != ns+"/a" {
		t.Fatalf("Of = %+v, %v; want held by %s/a", got, err, ns)
	}
	if got, err := cl.Of(ctx, hostID, vmx, ns, "a"); err != nil || got != nil {
		t.Fatalf("Of for the holder = %+v, %v; want none", got, err)
	}

	// b has no record either, but a's is gone: b takes the claim over.
	s, err := st.Load(ctx, ns, "a")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteConfigMap(ctx, s.ConfigMap); err != nil {
		t.Fatal(err)
	}
	if holder, took, err := cl.Take(ctx, host, hostID, vmx, ns, "b"); err != nil || holder != nil || !took {
		t.Fatalf("Take of a claim whose holder is gone = %+v, %v, %v; want taken", holder, took, err)
	}

	released, err := cl.Release(ctx, ns, "b")
	if err != nil || len(released) != 1 {
		t.Fatalf("Release = %q, %v; want one claim released", released, err)
	}
	if got, err := cl.Of(ctx, hostID, vmx, ns, "a"); err != nil || got != nil {
		t.Fatalf("Of after Release = %+v, %v; want none", got, err)
	}
}

func TestSourceClaimName(t *testing.T) {
	a := SourceClaimName("hostkey:x", "[ds1] vm/vm.vmx")
	if a != SourceClaimName("hostkey:x", "[ds1] vm/vm.vmx") || a == SourceClaimName("hostkey:y", "[ds1] vm/vm.vmx") ||
		len(a) != len("vmmigration-source-")+24 {
		t.Errorf("SourceClaimName = %q: want the same name for the same source, another for another host, 24 hex digits", a)
	}
}
