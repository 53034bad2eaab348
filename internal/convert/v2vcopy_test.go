package convert

import (
	"bytes"
	"crypto/rand"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// A sparse copy has the same content and leaves whole zero blocks as holes,
// including a partial last block and a file that ends in zeros.
func TestCopySparse(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src.raw")
	size := int64(9*sparseBlock + 4096 + 17)
	content := make([]byte, size)
	for _, at := range []int64{0, 3 * sparseBlock, 3*sparseBlock + 5000, 9 * sparseBlock} {
		if _, err := rand.Read(content[at : at+100]); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(src, content, 0o600); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "dst.raw")
	if err := os.WriteFile(dst, []byte("old content that must go"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := CopySparse(src, dst); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, content) {
		t.Fatalf("copy differs from the source (%d vs %d bytes)", len(got), len(content))
	}
	fi, err := os.Stat(dst)
	if err != nil {
		t.Fatal(err)
	}
	if blocks := fi.Sys().(*syscall.Stat_t).Blocks * 512; blocks > 4*sparseBlock {
		t.Errorf("copy allocates %d bytes for 3 blocks of data: zeros were written", blocks)
	}
	if err := CopySparse(filepath.Join(dir, "missing"), dst); err == nil {
		t.Error("copying a missing file succeeded")
	}
}

// ConvertCopies refuses mismatched lists before touching anything, and a
// failed conversion leaves neither a copy nor a changed image behind.
func TestConvertCopiesFailureLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "disk.raw")
	data := bytes.Repeat([]byte("not a guest "), 4096)
	if err := os.WriteFile(img, data, 0o600); err != nil {
		t.Fatal(err)
	}
	v := V2V{TempDir: t.TempDir()}
	if _, _, err := v.ConvertCopies(t.Context(), []V2VDisk{{Path: img, Format: Raw}}, nil, V2VOptions{}); err == nil {
		t.Fatal("one image and no destination accepted")
	}
	dst := filepath.Join(dir, "out.raw")
	windows := &InspectedOS{Type: "windows", Distro: "windows"}
	v.VirtioWin = filepath.Join(dir, "no-drivers")
	if _, _, err := v.ConvertCopies(t.Context(), []V2VDisk{{Path: img, Format: Raw}}, []string{dst}, V2VOptions{OS: windows}); err == nil {
		t.Fatal("a Windows guest without drivers was converted")
	}
	for _, p := range []string{dst, dst + TmpSuffix} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s is left behind: %v", p, err)
		}
	}
	if got, _ := os.ReadFile(img); !bytes.Equal(got, data) {
		t.Error("the image changed")
	}
}
