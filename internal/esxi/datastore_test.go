package esxi

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
)

func TestParseDatastoreSummariesSample(t *testing.T) {
	got, probs := ParseDatastoreSummaries(uncomment(loadSample(t, "vcl-datastore-listsummary-comment.txt")))
	want := []DatastoreSummary{
		{Name: "local-datastore", URL: "/vmfs/volumes/4bcf0efe-c426acc4-c7e1-001a644d1cc0", Capacity: 31138512896, FreeSpace: 26277314560, Accessible: true, Type: "VMFS"},
		{Name: "nfs-datastore", URL: "/vmfs/volumes/95e378c2-863dd2b4", Capacity: 975027175424, FreeSpace: 108854874112, Accessible: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("\n got %+v\nwant %+v", got, want)
	}
	// The sample is cut inside its second datastore: the parser says so.
	wantProblems(t, probs, "never closed")
	if ds := DatastoreOf("/vmfs/volumes/local-datastore/web/web.vmdk", got); ds == nil || ds.Name != "local-datastore" {
		t.Errorf("by name: %+v", ds)
	}
	if ds := DatastoreOf("/vmfs/volumes/95e378c2-863dd2b4/web/web.vmdk", got); ds == nil || ds.Name != "nfs-datastore" {
		t.Errorf("by uuid: %+v", ds)
	}
	for _, p := range []string{"/vmfs/volumes/other/x.vmdk", "/tmp/local-datastore/x", "/vmfs/volumes/", "/vmfs/volumes//x"} {
		if ds := DatastoreOf(p, got); ds != nil {
			t.Errorf("DatastoreOf(%q) = %+v, want none", p, ds)
		}
	}
}

func TestParseDatastoreSummariesBad(t *testing.T) {
	item := func(fields string) string {
		return "(vim.Datastore.Summary) [\n   (vim.Datastore.Summary) {\n" + fields + "   }\n]\n"
	}
	for name, c := range map[string]struct{ out, problem string }{
		"negative free":   {item("      name = \"ds\",\n      capacity = 10,\n      freeSpace = -1,\n"), "out of range"},
		"free not number": {item("      name = \"ds\",\n      capacity = 10,\n      freeSpace = 1e9,\n"), "not a number"},
		"no free space":   {item("      name = \"ds\",\n      capacity = 10,\n"), `"ds" has no freeSpace`},
		"no name":         {item("      capacity = 10,\n      freeSpace = 5,\n"), "has no name"},
		"overflow":        {item("      name = \"ds\",\n      freeSpace = 99999999999999999999,\n"), "not a number"},
		"no array":        {"Failed to login: Connection reset by peer\n", "no (vim.Datastore.Summary) array"},
		"huge":            {strings.Repeat("x", maxDatastoreListOutput+1), "more than 1024 datastores"},
	} {
		got, probs := ParseDatastoreSummaries(c.out)
		if len(got) != 0 {
			t.Errorf("%s: datastores %+v, want none", name, got)
		}
		if len(probs) == 0 || !strings.Contains(problemsText(probs), c.problem) {
			t.Errorf("%s: problems %v, want one with %q", name, probs, c.problem)
		}
	}
	if got := DatastoreListSummary().String(); got != "vim-cmd hostsvc/datastore/listsummary" {
		t.Errorf("command %q", got)
	}
}

// TestDatastoresSim reads the simulated host's datastores over SSH: the
// free space is the configured capacity less what the files there hold,
// and grows smaller when a file grows.
func TestDatastoresSim(t *testing.T) {
	env := newSim(t, esxisim.Options{})
	if _, _, err := env.srv.AddVM(esxisim.VMSpec{Name: "web", Disks: []esxisim.DiskSpec{{CapacityBytes: 4 << 20, Content: []esxisim.Extent{{Offset: 0, Length: 2 << 20, Seed: 1}}}}}); err != nil {
		t.Fatal(err)
	}
	env.srv.SetDatastoreCapacity("datastore1", 1<<30)
	c := env.client(t)
	ds, err := c.Datastores(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	d := DatastoreOf("/vmfs/volumes/datastore1/web/web.vmdk", ds)
	if d == nil {
		t.Fatalf("no datastore1 in %+v", ds)
	}
	want, err := env.srv.DatastoreFree("datastore1")
	if err != nil {
		t.Fatal(err)
	}
	if d.Capacity != 1<<30 || d.FreeSpace != want || d.FreeSpace >= 1<<30-(2<<20) || !d.Accessible || d.Type != "VMFS" {
		t.Errorf("datastore1 %+v, want capacity 1 GiB and free %d (less the 2 MiB written)", d, want)
	}
	if byURL := DatastoreOf(d.URL+"/web/web.vmdk", ds); byURL == nil || byURL.Name != "datastore1" {
		t.Errorf("by url %s: %+v", d.URL, byURL)
	}
}

func FuzzParseDatastoreSummaries(f *testing.F) {
	addSamples(f, "listsummary")
	f.Add("(vim.Datastore.Summary) [\n(vim.Datastore.Summary) {\nname = \"a\"\nfreeSpace = 5\n}\n]\n")
	f.Fuzz(func(t *testing.T, s string) {
		ds, _ := ParseDatastoreSummaries(s)
		if len(ds) > MaxDatastores {
			t.Fatalf("%d datastores", len(ds))
		}
		for _, d := range ds {
			if d.Name == "" || d.FreeSpace < 0 || d.Capacity < 0 {
				t.Fatalf("datastore %+v", d)
			}
			_ = DatastoreOf(VolumesRoot+"/"+d.Name+"/x", ds)
		}
	})
}
