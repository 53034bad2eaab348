package vmdk

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/diskdigest"
)

// Applying each delta of a chain in order over a copy of its base gives
// the guest-visible disk the chain reader (and qemu) reads, in place and
// without a second copy; applying the top again changes nothing, so a
// process killed while applying may start over.
func TestApplyDeltaGivesTheChainsContent(t *testing.T) {
	const capacity = 40*mib + 1536
	for _, order := range [][2]Format{{SESparse, VMFSSparse}, {VMFSSparse, SESparse}, {SESparse, SESparse}, {VMFSSparse, VMFSSparse}} {
		t.Run(fmt.Sprintf("%s_under_%s", order[0], order[1]), func(t *testing.T) {
			dir := t.TempDir()
			_, model := testChain(t, dir, capacity, order[0], order[1])
			base, err := os.ReadFile(filepath.Join(dir, "disk"+Flat.ExtentSuffix()))
			if err != nil {
				t.Fatal(err)
			}
			img := filepath.Join(dir, "disk.img")
			if err := os.WriteFile(img, base, 0o600); err != nil {
				t.Fatal(err)
			}
			f, err := os.OpenFile(img, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if err := f.Truncate(capacity); err != nil { // a thin base file may be short
				t.Fatal(err)
			}
			mid := filepath.Join(dir, "disk-000001"+order[0].ExtentSuffix())
			top := filepath.Join(dir, "disk-000002"+order[1].ExtentSuffix())
			for _, step := range []struct {
				path   string
				format Format
			}{{mid, order[0]}, {top, order[1]}, {top, order[1]}} {
				st, err := ApplyDelta(context.Background(), step.path, step.format, f)
				if err != nil {
					t.Fatal(err)
				}
				if st.DataBytes == 0 {
					t.Errorf("%s: no data applied", filepath.Base(step.path))
				}
			}
			got, err := os.ReadFile(img)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, model) {
				t.Fatalf("applied image sha %s, chain %s", shaHex(got), shaHex(model))
			}
		})
	}
}

// A delta of another capacity is refused before anything is written.
func TestApplyDeltaRefusesAnotherCapacity(t *testing.T) {
	dir := t.TempDir()
	testChain(t, dir, 40*mib, SESparse, VMFSSparse)
	img := filepath.Join(dir, "disk.img")
	if err := os.WriteFile(img, make([]byte, 20*mib), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := ApplyDelta(context.Background(), filepath.Join(dir, "disk-000001"+SESparse.ExtentSuffix()), SESparse, f); err == nil {
		t.Fatal("a 40 MiB delta applied over a 20 MiB image")
	}
	got, _ := os.ReadFile(img)
	if !bytes.Equal(got, make([]byte, 20*mib)) {
		t.Fatal("the image changed")
	}
}

// ApplyDeltaFunc hands over each touched leaf once, in order, only when
// its bytes in the image are final: a leaf hashed in the callback hashes
// as the same leaf of the finished image.
func TestApplyDeltaFuncPassesFinishedLeaves(t *testing.T) {
	const capacity = 40*mib + 1536
	for _, format := range []Format{SESparse, VMFSSparse} {
		t.Run(string(format), func(t *testing.T) {
			dir := t.TempDir()
			testChain(t, dir, capacity, format, format)
			img := filepath.Join(dir, "disk.img")
			f, err := os.OpenFile(img, os.O_RDWR|os.O_CREATE, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if err := f.Truncate(capacity); err != nil {
				t.Fatal(err)
			}
			top := filepath.Join(dir, "disk-000002"+format.ExtentSuffix())
			var order []int64
			early := map[int64][32]byte{}
			st, err := ApplyDeltaFunc(context.Background(), top, format, f, func(leaf int64) {
				order = append(order, leaf)
				early[leaf] = leafSHA(t, f, leaf, capacity)
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(st.Touched) == 0 || !slices.Equal(order, st.Touched) {
				t.Fatalf("leaves passed %v, touched %v", order, st.Touched)
			}
			for _, leaf := range st.Touched {
				if early[leaf] != leafSHA(t, f, leaf, capacity) {
					t.Errorf("leaf %d was passed before it was final", leaf)
				}
			}
		})
	}
}

func leafSHA(t *testing.T, f *os.File, leaf, capacity int64) [32]byte {
	t.Helper()
	off := leaf * diskdigest.LeafSize
	p := make([]byte, min(diskdigest.LeafSize, capacity-off))
	if _, err := f.ReadAt(p, off); err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(p)
}
