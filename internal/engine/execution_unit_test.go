package engine

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/clusterjob"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/coord"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
)

// The record decides the route once it says where the migration runs:
// the spec only until then, so a changed configuration never moves a
// migration between executions mid-flight.
func TestItineraryFollowsRecordedExecution(t *testing.T) {
	step := func(route []checkpoint) string {
		switch &route[0] {
		case &clusterItinerary[0]:
			return "cluster"
		case &warmItinerary[0]:
			return "warm"
		case &coldItinerary[0]:
			return "cold"
		}
		return "?"
	}
	cluster := Spec{Execution: ExecutionCluster}
	local := Spec{Execution: ExecutionLocal}
	for _, tc := range []struct {
		name string
		spec Spec
		rec  *record.Record
		want string
	}{
		{"cluster asked, nothing recorded", cluster, &record.Record{}, "cluster"},
		{"cluster asked, no record", cluster, nil, "cluster"},
		{"local asked, cluster recorded", local, &record.Record{Execution: ExecutionCluster}, "cluster"},
		{"cluster asked, local recorded", cluster, &record.Record{Execution: ExecutionLocal}, "cold"},
		{"cluster asked, local recorded warm", cluster, &record.Record{Execution: ExecutionLocal, Warm: &record.WarmEvidence{}}, "warm"},
		{"record from before executions", cluster.WithDefaults(), &record.Record{Phase: record.PhaseImporting}, "cluster"},
		{"local default", Spec{}.WithDefaults(), &record.Record{}, "cold"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := step(itinerary(tc.spec, tc.rec)); got != tc.want {
				t.Errorf("itinerary = %s, want %s", got, tc.want)
			}
		})
	}
	// Every route passes the same phases in the same order.
	for i, c := range clusterItinerary {
		if c.phase != coldItinerary[i].phase {
			t.Errorf("cluster checkpoint %d is %s, cold's %s", i, c.phase, coldItinerary[i].phase)
		}
	}
}

// Validated fixes the execution once: a record that has one keeps it.
func TestRecordExecutionOnce(t *testing.T) {
	r := &run{spec: Spec{Execution: ExecutionCluster}, s: &coord.Stored{}}
	r.recordExecution()
	if got := r.rec().Execution; got != ExecutionCluster {
		t.Fatalf("recorded %q, want %q", got, ExecutionCluster)
	}
	r.spec.Execution = ExecutionLocal
	r.recordExecution()
	if got := r.rec().Execution; got != ExecutionCluster || !r.inCluster() {
		t.Fatalf("after the spec changed, recorded %q (in cluster %v), want %q kept", got, r.inCluster(), ExecutionCluster)
	}
	if (&record.Record{}).ExecutionOf() != ExecutionLocal {
		t.Error("a record without an execution is not read as local")
	}
}

// What cluster execution cannot do yet is a blocker that says so and
// points at the local execution; what it can do passes, naming the image.
func TestExecutionCheck(t *testing.T) {
	plain := &esxi.VM{Name: "web", Disks: []esxi.Disk{{Device: "scsi0:0", DataPath: "/vmfs/volumes/ds1/web/web-flat.vmdk"}}}
	link := func(name, createType string, extents ...string) esxi.ChainLink {
		return esxi.ChainLink{DescriptorPath: "/vmfs/volumes/ds1/db/" + name + ".vmdk", CreateType: createType, ExtentPaths: extents}
	}
	chainVM := func(links ...esxi.ChainLink) *esxi.VM {
		return &esxi.VM{Name: "db", Disks: []esxi.Disk{{Device: "scsi0:0", Chain: &esxi.DiskChain{Links: links}}}}
	}
	onChain := chainVM(link("db-000002", "vmfsSparse", "/vmfs/volumes/ds1/db/db-000002-delta.vmdk"),
		link("db-000001", "seSparse", "/vmfs/volumes/ds1/db/db-000001-sesparse.vmdk"), link("db", "vmfs", "/vmfs/volumes/ds1/db/db-flat.vmdk"))
	twoExtents := chainVM(link("db-000001", "vmfsSparse", "/vmfs/volumes/ds1/db/db-000001-delta.vmdk"),
		link("db", "vmfs", "/vmfs/volumes/ds1/db/db-f001.vmdk", "/vmfs/volumes/ds1/db/db-f002.vmdk"))
	sparseBase := chainVM(link("db-000001", "vmfsSparse", "/vmfs/volumes/ds1/db/db-000001-delta.vmdk"),
		link("db", "monolithicSparse", "/vmfs/volumes/ds1/db/db.vmdk"))
	deep := []esxi.ChainLink{link("db", "vmfs", "/vmfs/volumes/ds1/db/db-flat.vmdk")}
	for k := range 33 {
		n := fmt.Sprintf("db-%06d", k+1)
		deep = append([]esxi.ChainLink{link(n, "seSparse", "/vmfs/volumes/ds1/db/"+n+"-sesparse.vmdk")}, deep...)
	}
	manyDisks := &esxi.VM{Name: "big"}
	for i := range 33 {
		manyDisks.Disks = append(manyDisks.Disks, esxi.Disk{Device: fmt.Sprintf("scsi0:%d", i), DataPath: fmt.Sprintf("/vmfs/volumes/ds1/big/big_%d-flat.vmdk", i)})
	}
	base := Spec{Execution: ExecutionCluster, Conversion: ConversionNone}.WithDefaults()
	withImage := &Engine{deps: Deps{WorkerImage: "registry.example/worker@sha256:abc"}}
	for _, tc := range []struct {
		name   string
		e      *Engine
		spec   func(Spec) Spec
		vm     *esxi.VM
		passed bool
		says   string
	}{
		{"local always passes", &Engine{}, func(s Spec) Spec { s.Execution = ExecutionLocal; return s }, onChain, true, "local"},
		{"cluster with the image", withImage, nil, plain, true, "registry.example/worker@sha256:abc"},
		{"no image", &Engine{}, nil, plain, false, "worker_image is not set"},
		{"warm", withImage, func(s Spec) Spec { s.Mode = ModeWarm; return s }, plain, true, "copy the disks"},
		{"block", withImage, func(s Spec) Spec { s.VolumeMode = "Block"; return s }, plain, true, "copy the disks"},
		{"block on snapshots, warm", withImage, func(s Spec) Spec { s.VolumeMode, s.Mode = "Block", ModeWarm; return s }, onChain, true, "copy the disks"},
		{"block converted by virt-v2v", withImage, func(s Spec) Spec { s.VolumeMode, s.Conversion = "Block", ConversionVirtV2V; return s }, plain, true, "a conversion Job converts the guest"},
		{"virt-v2v", withImage, func(s Spec) Spec { s.Conversion = ConversionVirtV2V; return s }, plain, true, "a conversion Job converts the guest"},
		{"snapshot chain", withImage, nil, onChain, true, "copy the disks"},
		{"a chain link of two extents", withImage, nil, twoExtents, false, "has 2 extent files"},
		{"a sparse base", withImage, nil, sparseBase, false, `type "monolithicSparse"`},
		{"more deltas than a copy Job applies", withImage, nil, chainVM(deep...), false, "33 snapshot deltas"},
		{"more disks than a conversion takes", withImage, func(s Spec) Spec { s.Conversion = ConversionVirtV2V; return s }, manyDisks, false, "at most 32"},
		{"as many disks without conversion", withImage, nil, manyDisks, true, "copy the disks"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := base
			if tc.spec != nil {
				s = tc.spec(s)
			}
			c := tc.e.executionCheck(s, tc.vm)
			if c.Passed != tc.passed || !strings.Contains(c.Message, tc.says) {
				t.Errorf("check = passed %v, %q; want passed %v, saying %q", c.Passed, c.Message, tc.passed, tc.says)
			}
			if !c.Passed && !strings.Contains(c.Message, `execution = "local"`) {
				t.Errorf("a blocked cluster execution does not say how to run the migration: %q", c.Message)
			}
			if CheckField(c.ID) != FieldExecution {
				t.Errorf("the check points at %q, want %q", CheckField(c.ID), FieldExecution)
			}
		})
	}
}

// In cluster execution a disk's DataVolume starts blank, bound at once:
// its copy Job fills the claim.
func TestRenderBlankDataVolume(t *testing.T) {
	spec := Spec{Execution: ExecutionCluster, Namespace: "ns", Name: "web", StorageClass: "fast"}.WithDefaults()
	r := &run{spec: spec, s: &coord.Stored{}}
	dv := r.renderDataVolume(record.DiskEvidence{DataVolume: "web-disk-0", SizeBytes: 3<<20 + 1})
	src := dv.Spec.Source
	if src == nil || src.Blank == nil || src.Upload != nil || src.HTTP != nil {
		t.Fatalf("source = %+v, want blank only", src)
	}
	if q := dv.Spec.Storage.Resources.Requests.Storage(); q.Value() != 4<<20 {
		t.Errorf("size = %s, want 4Mi (the disk rounded up to a MiB)", q)
	}
	if dv.Annotations["cdi.kubevirt.io/storage.bind.immediate.requested"] != "true" {
		t.Errorf("annotations %v: want immediate binding", dv.Annotations)
	}
	r.spec.Execution = ExecutionLocal
	if dv := r.renderDataVolume(record.DiskEvidence{DataVolume: "web-disk-0"}); dv.Spec.Source.Upload == nil {
		t.Errorf("local execution's source = %+v, want upload", dv.Spec.Source)
	}
}

// A claim replaced under a copy forgets that copy and moves the disk to
// a new copy attempt, whose Job writes the new claim.
func TestClaimReplacedStartsANewAttempt(t *testing.T) {
	r := &run{e: &Engine{deps: Deps{Clock: realClock{}}}, spec: Spec{Execution: ExecutionCluster}, s: &coord.Stored{}}
	r.rec().Disks = []record.DiskEvidence{{Acquired: true, SourceSHA256: "ab", ZeroBytes: 5, Imported: true, CopyAttempt: 2, CopyJob: "web-disk-0-copy-2", CopyJobUID: "u"}}
	r.claimReplaced(t.Context(), 0)
	d := r.rec().Disks[0]
	if d.Acquired || d.SourceSHA256 != "" || d.ZeroBytes != 0 || d.Imported || d.CopyAttempt != 3 || d.CopyJob != "" || d.CopyJobUID != "" {
		t.Errorf("after the claim was replaced: %+v", d)
	}
}

// A disk on snapshots of a migration recorded before journal claims gets
// a claim with room for its largest delta's copy beside the disk, and
// says how much; adoption reads the disk's size back without that room,
// and an annotation anyone edited never makes a disk larger, negative or
// odd. One recorded since asks for exactly the disk (the room is in its
// journal claim), in either volume mode.
func TestClaimRoomForSnapshotDeltas(t *testing.T) {
	spec := Spec{Execution: ExecutionCluster, Namespace: "ns", Name: "db", StorageClass: "fast"}.WithDefaults()
	r := &run{spec: spec, s: &coord.Stored{}}
	d := record.DiskEvidence{DataVolume: "db-disk-0", SizeBytes: 64 << 20, Chain: []record.ChainFileEvidence{
		{Link: 0, Kind: record.ChainFileDescriptor, Format: "vmfsSparse"},
		{Link: 0, Kind: record.ChainFileExtent, Format: "vmfsSparse", Bytes: 3<<20 + 512},
		{Link: 1, Kind: record.ChainFileExtent, Format: "seSparse", Bytes: 9 << 20},
		{Link: 2, Kind: record.ChainFileExtent, Format: "vmfs", Bytes: 64 << 20},
	}}
	dv := r.renderDataVolume(d)
	q := dv.Spec.Storage.Resources.Requests[corev1.ResourceStorage]
	if q.Value() != 73<<20 || dv.Annotations[AnnotationScratchBytes] != fmt.Sprint(9<<20) {
		t.Fatalf("request %s, scratch %q; want 73 MiB with 9 MiB of room", q.String(), dv.Annotations[AnnotationScratchBytes])
	}
	if got := q.Value() - scratchOf(dv.Annotations, q.Value()); !sizeMatches(d.SizeBytes, got) {
		t.Errorf("adoption reads the disk as %d bytes, the source has %d", got, d.SizeBytes)
	}
	chain := d.Chain
	d.Chain = nil
	if dv := r.renderDataVolume(d); dv.Annotations[AnnotationScratchBytes] != "" {
		t.Errorf("a disk on no snapshot gets room: %v", dv.Annotations)
	}
	d.Chain = chain
	r.recordExecution()
	if !r.rec().JournalClaims || !r.journalClaims() {
		t.Fatalf("a cluster migration recorded now keeps no journal claims: %+v", r.rec())
	}
	for _, mode := range []string{"Filesystem", "Block"} {
		r.spec.VolumeMode = mode
		dv := r.renderDataVolume(d)
		if q := dv.Spec.Storage.Resources.Requests[corev1.ResourceStorage]; q.Value() != 64<<20 || dv.Annotations[AnnotationScratchBytes] != "" {
			t.Errorf("%s: request %s, scratch %q; want exactly the disk", mode, q.String(), dv.Annotations[AnnotationScratchBytes])
		}
	}
	for _, v := range []string{"", "x", "-1048576", "1000", fmt.Sprint(73 << 20), fmt.Sprint(1 << 40)} {
		if n := scratchOf(map[string]string{AnnotationScratchBytes: v}, 73<<20); n != 0 {
			t.Errorf("scratch %q read as %d, want 0", v, n)
		}
	}
}

// A plan counts against the namespace's storage quota exactly the journal
// claims Preparing makes: one per disk in cluster execution, sized by the
// same rule (journal, a warm migration's room, the virt-v2v overlay's),
// and none in local execution.
func TestPlanCountsJournalClaims(t *testing.T) {
	vm := &esxi.VM{Name: "db", Disks: []esxi.Disk{
		{DataPath: "/vmfs/volumes/ds1/db/db-flat.vmdk", CapacityBytes: 10 << 30},
		{DataPath: "/vmfs/volumes/ds1/db/db_1-flat.vmdk", CapacityBytes: 1 << 30},
	}}
	spec := Spec{Execution: ExecutionCluster, Namespace: "ns", Name: "db", StorageClass: "fast", Mode: ModeWarm,
		Conversion: ConversionVirtV2V}.WithDefaults()
	var want int64
	for _, d := range vm.Disks {
		room := warmScratch(record.DiskEvidence{SizeBytes: d.CapacityBytes}) + clusterjob.OverlayRoom(d.CapacityBytes)
		want += clusterjob.JournalClaimSize(d.CapacityBytes, spec.chunkSize(), room)
	}
	if got := spec.destination(vm).JournalClaimBytes; got != want {
		t.Errorf("the plan counts %d bytes of journal claims, want %d", got, want)
	}
	r := &run{spec: spec, s: &coord.Stored{}}
	var made int64
	for _, d := range planDisks(spec, vm, nil) {
		made += r.spec.journalClaimSize(d, r.spec.warm() || r.rec().Warm != nil)
	}
	if made != want {
		t.Errorf("Preparing sizes the journal claims at %d bytes in all, the plan %d", made, want)
	}
	spec.Execution = ExecutionLocal
	if got := spec.destination(vm).JournalClaimBytes; got != 0 {
		t.Errorf("local execution counts %d bytes of journal claims", got)
	}
}
