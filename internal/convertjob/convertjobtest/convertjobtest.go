// Package convertjobtest gives tests of the conversion Job stand-ins for
// virt-v2v's tools and claims holding raw disk images. The stand-ins start
// no helper VM: virt-v2v-in-place writes a known pattern into each overlay
// it is given with the real qemu-io, so that a test sees exactly what the
// conversion changed and whether it reached the images.
package convertjobtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/convert"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/convertjob"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/guestslot"
)

// WriteLen is how many bytes the stand-in writes into each disk.
const WriteLen = 64 << 10

// Written is where the stand-in virt-v2v-in-place writes into disk i (in
// the guest's order) and the byte it fills that range with.
func Written(i int) (off int64, b byte) { return int64(1+i) << 20, byte(0x50 + i) }

// Converted is the summary line the stand-in prints.
const Converted = "Converting 12.4 to run on KVM"

// Options shape the stand-ins.
type Options struct {
	// Then is shell run by virt-v2v-in-place after it wrote into the
	// overlays and before it prints Converted, e.g. "exit 1" or
	// "sleep 600".
	Then string
	// Windows makes virt-inspector report a Windows guest.
	Windows bool
	// Tools replaces the shell body of the named stand-ins.
	Tools map[string]string
}

// Fake is a set of stand-ins, first in PATH for the rest of the test.
type Fake struct{ dir string }

// Install puts the stand-ins first in PATH, and gives them guest slots of
// their own (other test packages' real guests hold the machine's).
func Install(t testing.TB, o Options) *Fake {
	t.Helper()
	f, err := Write(t.TempDir(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", f.dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv(guestslot.EnvDir, f.path("guest-slots"))
	return f
}

// Dir is the folder of the stand-ins (to put first in PATH).
func (f *Fake) Dir() string { return f.dir }

// Write writes the stand-ins into dir, for a program that runs them with
// dir first in its PATH (a test's own pods, which Install's PATH does not
// reach).
func Write(dir string, o Options) (*Fake, error) {
	f := &Fake{dir: dir}
	osXML := `<name>linux</name><distro>debian</distro><major_version>12</major_version><minor_version>4</minor_version><arch>x86_64</arch><osinfo>debian12</osinfo>`
	if o.Windows {
		osXML = `<name>windows</name><distro>windows</distro><major_version>10</major_version><minor_version>0</minor_version><arch>x86_64</arch><osinfo>win2k22</osinfo>`
	}
	q := strconv.Quote
	tools := map[string]string{
		"virt-v2v":       `echo "virt-v2v 2.2.0"`,
		"virt-inspector": "cat <<'X'\n<operatingsystems><operatingsystem>" + osXML + "</operatingsystem></operatingsystems>\nX",
		"nbdkit":         `echo "nbdkit 1.32.5"`,
		"nbdinfo":        `echo "nbdinfo 1.14.2"`,
		"virt-v2v-in-place": `n=$(cat ` + q(f.path("runs")) + ` 2>/dev/null || echo 0); echo $((n+1)) > ` + q(f.path("runs")) + `
prev= mode= last=
for a in "$@"; do
	[ "$prev" = "-i" ] && mode=$a
	prev=$a last=$a
done
case "$mode" in
disk) set -- "$last" ;;
libvirtxml) set -- $(sed -n "s/.*<source file='\([^']*\)'.*/\1/p" "$last") ;;
*) echo "virt-v2v-in-place: unexpected input $mode" >&2; exit 3 ;;
esac
i=0
for o in "$@"; do
	qemu-img info --output=json "$o" | sed -n 's/.*"backing-filename": "\([^"]*\)".*/\1/p' >> ` + q(f.path("backing")) + `
	qemu-io -f qcow2 -c "write -P $((0x50+i)) $(((1+i)*1048576)) ` + strconv.Itoa(WriteLen) + `" "$o" >/dev/null || exit 4
	i=$((i+1))
done
: > ` + q(f.path("written")) + `
echo '{ "message": "Setting up the source: -i disk", "timestamp": "", "type": "message" }'
echo '{ "message": "This guest has virtio drivers installed.", "timestamp": "", "type": "info" }'
echo '{ "message": "virt-v2v: warning: the guest has no network", "timestamp": "", "type": "warning" }'
` + o.Then + `
echo '{ "message": "` + Converted + `", "timestamp": "", "type": "message" }'`,
	}
	for name, body := range o.Tools {
		tools[name] = body
	}
	for name, body := range tools {
		if err := os.WriteFile(filepath.Join(f.dir, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			return nil, err
		}
	}
	return f, nil
}

func (f *Fake) path(name string) string { return filepath.Join(f.dir, name) }

// Runs is how many times virt-v2v-in-place ran.
func (f *Fake) Runs(t testing.TB) int {
	t.Helper()
	b, err := os.ReadFile(f.path("runs"))
	if os.IsNotExist(err) {
		return 0
	}
	n, err2 := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || err2 != nil {
		t.Fatalf("runs of virt-v2v-in-place: %q, %v, %v", b, err, err2)
	}
	return n
}

// Backings are the backing files of the overlays virt-v2v-in-place was
// given, as the overlays name them, in the order it was given them.
func (f *Fake) Backings(t testing.TB) []string {
	t.Helper()
	b, err := os.ReadFile(f.path("backing"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}

// WaitWritten waits until virt-v2v-in-place has written into every
// overlay (then it runs Options.Then), for at most a minute.
func (f *Fake) WaitWritten(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := os.Stat(f.path("written")); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("virt-v2v-in-place wrote nothing: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

// Claims makes n claims' folders, each holding a raw disk.img of size
// bytes: pseudo-random data (from seed) in its first 512 KiB and at 3 MiB
// when it is that large, the rest a hole. It returns them as a spec's
// disks.
func Claims(t testing.TB, n int, size int64, seed uint64) []convertjob.Disk {
	t.Helper()
	root := t.TempDir()
	var disks []convertjob.Disk
	for i := range n {
		dir := filepath.Join(root, strconv.Itoa(i))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, convertjob.ImageName)
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		r := rand.New(rand.NewPCG(seed, uint64(i)))
		for _, ext := range [][2]int64{{0, 512 << 10}, {3 << 20, 64 << 10}} {
			if ext[0]+ext[1] > size {
				continue
			}
			b := make([]byte, ext[1])
			for j := range b {
				b[j] = byte(r.Uint32())
			}
			if _, err := f.WriteAt(b, ext[0]); err != nil {
				t.Fatal(err)
			}
		}
		if err := f.Truncate(size); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		disks = append(disks, convertjob.Disk{Path: p, SizeBytes: size})
	}
	return disks
}

// Apply is content (disk i's image before the conversion) as the
// stand-in's conversion leaves it.
func Apply(content []byte, i int) []byte {
	out := append([]byte(nil), content...)
	off, b := Written(i)
	for j := off; j < off+WriteLen && j < int64(len(out)); j++ {
		out[j] = b
	}
	return out
}

// Worker makes an image entrypoint for a test's pods: a copy of the
// worker binary bin that runs with the stand-ins (Write with o) first in
// its PATH and guest slots of its own. Everything is in a new folder dir
// outside /tmp and /var/tmp, which a conversion pod mounts scratch over (a
// real image has its programs in /usr); the caller removes dir.
func Worker(bin string, o Options) (f *Fake, entry string, err error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return nil, "", err
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return nil, "", err
	}
	dir, err := os.MkdirTemp(cache, "vmmigration-v2v-worker-")
	if err != nil {
		return nil, "", err
	}
	if f, err = Write(dir, o); err != nil {
		return nil, "", err
	}
	worker := f.path("vmmigration-worker")
	if err := convert.CopySparse(bin, worker); err != nil {
		return f, "", err
	}
	if err := os.Chmod(worker, 0o755); err != nil {
		return f, "", err
	}
	entry = f.path("entrypoint")
	script := "#!/bin/sh\nPATH=" + strconv.Quote(dir) + ":$PATH " + guestslot.EnvDir + "=" + strconv.Quote(f.path("guest-slots")) +
		" exec " + strconv.Quote(worker) + " \"$@\"\n"
	if err := os.WriteFile(entry, []byte(script), 0o755); err != nil {
		return f, "", err
	}
	return f, entry, nil
}
