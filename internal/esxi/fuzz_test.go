package esxi

import (
	"math/big"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// addSamples seeds f with every sample (source line stripped) whose name
// matches one of the substrings, plus their uncommented forms.
func addSamples(f *testing.F, subs ...string) {
	entries, err := os.ReadDir(filepath.Join("testdata", "samples"))
	if err != nil {
		f.Fatal(err)
	}
	for _, e := range entries {
		for _, s := range subs {
			if strings.Contains(e.Name(), s) {
				body := loadSample(f, e.Name())
				f.Add(body)
				f.Add(uncomment(body))
				break
			}
		}
	}
}

func FuzzParseGetAllVMs(f *testing.F) {
	addSamples(f, "getallvms", "inventory")
	f.Fuzz(func(t *testing.T, s string) {
		got, _ := ParseGetAllVMs(s)
		for _, v := range got.VMs {
			if v.VMID <= 0 {
				t.Fatalf("vmid %d", v.VMID)
			}
		}
	})
}

func FuzzParseVMX(f *testing.F) {
	addSamples(f, ".vmx", ".vmsd")
	f.Fuzz(func(t *testing.T, s string) {
		c, _ := ParseVMX(s)
		if c.CPUs < 0 || c.CPUs > maxVCPUs || c.MemoryMiB < 0 || c.MemoryMiB > maxMemoryMiB || c.CoresPerSocket < 0 ||
			(c.CoresPerSocket > 0 && c.CPUs%c.CoresPerSocket != 0) || c.HardwareVersion < 0 {
			t.Fatalf("CPUs %d cores %d memory %d hw %d", c.CPUs, c.CoresPerSocket, c.MemoryMiB, c.HardwareVersion)
		}
		for _, d := range c.Disks {
			_, _ = ResolveDiskPath("/vmfs/volumes/ds/vm/vm.vmx", d.FileName)
		}
		_, _ = ParseVMSD(s)
	})
}

func FuzzParseDescriptor(f *testing.F) {
	addSamples(f, "vmdk")
	f.Fuzz(func(t *testing.T, s string) {
		d, _ := ParseDescriptor(s)
		got, probs := DescriptorCapacity(d)
		if d.CapacityBytes() != got || got < 0 {
			t.Fatalf("CapacityBytes %d, DescriptorCapacity %d", d.CapacityBytes(), got)
		}
		// The checked sum agrees with exact arithmetic.
		sum := new(big.Int)
		for _, e := range d.Extents {
			sum.Add(sum, new(big.Int).Mul(big.NewInt(e.Sectors), big.NewInt(SectorSize)))
		}
		if len(probs) == 0 && (!sum.IsInt64() || sum.Int64() != got) {
			t.Fatalf("capacity %d, exact sum %s", got, sum)
		}
		if len(probs) > 0 && got != 0 {
			t.Fatalf("capacity %d with problems %v", got, probs)
		}
	})
}

func FuzzParseSnapshotGet(f *testing.F) {
	addSamples(f, "snapshot")
	f.Fuzz(func(t *testing.T, s string) {
		snaps, _ := ParseSnapshotGet(s)
		var walk func([]Snapshot)
		walk = func(ss []Snapshot) {
			for _, sn := range ss {
				if sn.ID < 0 {
					t.Fatalf("snapshot id %d", sn.ID)
				}
				walk(sn.Children)
			}
		}
		walk(snaps)
	})
}

// FuzzParseVimDump covers get.guest, get.summary and fault detection.
func FuzzParseVimDump(f *testing.F) {
	addSamples(f, "get_", "get-", "vcl-", "getstate")
	f.Fuzz(func(t *testing.T, s string) {
		_, _ = ParseGuestInfo(s)
		sum, _ := ParseSummary(s)
		if sum.MemoryMiB < 0 || sum.MemoryMiB > maxMemoryMiB || sum.CPUs < 0 || sum.CPUs > maxVCPUs ||
			sum.NumEthernetCards < 0 || sum.NumVirtualDisks < 0 || sum.CommittedBytes < 0 || sum.UncommittedBytes < 0 {
			t.Fatalf("summary numbers out of range: %+v", sum)
		}
		if f := ParseFault(s); f != nil && f.Type == "" {
			t.Fatalf("fault without a type: %+v", f)
		}
		_, _ = ParsePowerState(s)
		entries, _ := ParseVMInventory(s)
		for _, e := range entries {
			if e.VMID <= 0 {
				t.Fatalf("vmInventory.xml entry with vmid %d", e.VMID)
			}
		}
	})
}

// FuzzBatchParse: framed outputs come back byte for byte with their exit
// status, whatever they contain; and whatever the host sends, Parse
// returns one result per command, in order, with a status the shell can
// print (or -1) and an output taken from what was sent.
func FuzzBatchParse(f *testing.F) {
	f.Add("Powered on\n", "", uint8(0), uint8(1), []byte("garbage"))
	f.Add(loadSample(f, "vmx_intel_mfd_esxi_base_r91_efi_snapshot_child.vmx"), "no newline at end", uint8(0), uint8(127), []byte("@@VMM-END x -1\n"))
	f.Add("@@VMM 00 a\n@@VMM-END 00 0\n", "cat: can't open 'x': No such file or directory\n", uint8(255), uint8(1), []byte{})
	f.Fuzz(func(t *testing.T, out1, out2 string, st1, st2 uint8, raw []byte) {
		b, err := NewBatch()
		if err != nil {
			t.Fatal(err)
		}
		c1, _ := Cat("/vmfs/volumes/ds1/vm/vm.vmx")
		c2, _ := PowerGetState(7)
		if err := b.Add("vmx:7", c1); err != nil {
			t.Fatal(err)
		}
		if err := b.Add("state:7", c2); err != nil {
			t.Fatal(err)
		}
		frame := func(label, out string, st uint8) string {
			return beginMarker + " " + b.nonce + " " + label + "\n" + out + endMarker + " " + b.nonce + " " + strconv.Itoa(int(st)) + "\n"
		}
		// What the shell prints for the script: the nonce is secret, so
		// no output can contain it.
		stdout := frame("vmx:7", out1, st1) + frame("state:7", out2, st2)
		rs, probs := b.Parse([]byte(stdout))
		if len(probs) != 0 || len(rs) != 2 {
			t.Fatalf("well-framed output: %d results, problems %v", len(rs), probs)
		}
		if rs[0].Label != "vmx:7" || rs[0].Output != out1 || rs[0].ExitStatus != int(st1) ||
			rs[1].Label != "state:7" || rs[1].Output != out2 || rs[1].ExitStatus != int(st2) {
			t.Fatalf("round trip: %+v", rs)
		}

		// Arbitrary bytes, with or without a real frame inside.
		for _, in := range [][]byte{raw, append([]byte(frame("vmx:7", out1, st1)), raw...), append(append([]byte{}, raw...), frame("state:7", out2, st2)...)} {
			rs, _ := b.Parse(in)
			if len(rs) != 2 || rs[0].Label != "vmx:7" || rs[1].Label != "state:7" {
				t.Fatalf("results %+v for %q", rs, in)
			}
			for _, r := range rs {
				if r.ExitStatus < -1 || r.ExitStatus > 255 {
					t.Fatalf("exit status %d", r.ExitStatus)
				}
				if !strings.Contains(string(in), r.Output) {
					t.Fatalf("output %q was not sent", r.Output)
				}
			}
		}
	})
}

// FuzzParseStatSize: an accepted size is never negative and prints back
// to exactly the line it was read from.
func FuzzParseStatSize(f *testing.F) {
	const p = "/vmfs/volumes/ds1/vm/vm-flat.vmdk"
	f.Add("8589934592 "+p+"\n", p, int64(8589934592))
	f.Add("-1 "+p+"\n", p, int64(-1))
	f.Add("00 /vmfs/volumes/5f1e 2b/vm name/x.vmdk\n", "/vmfs/volumes/5f1e 2b/vm name/x.vmdk", int64(0))
	f.Add("9223372036854775807 /vmfs/volumes/5f1e 2b/vm name/x.vmdk\n", "/vmfs/volumes/5f1e 2b/vm name/x.vmdk", int64(0))
	f.Fuzz(func(t *testing.T, out, path string, size int64) {
		n, err := ParseStatSize(out, path)
		if err == nil {
			if n < 0 {
				t.Fatalf("negative size %d from %q", n, out)
			}
			if got := strconv.FormatInt(n, 10) + " " + path; got != strings.TrimSuffix(out, "\n") {
				t.Fatalf("accepted %q as %d", out, n)
			}
		}
		n, err = ParseStatSize(strconv.FormatInt(size, 10)+" "+path+"\n", path)
		switch {
		case size >= 0 && path != "" && !strings.Contains(path, "\n") && (err != nil || n != size):
			t.Fatalf("size %d path %q: %d, %v", size, path, n, err)
		case size < 0 && err == nil:
			t.Fatalf("negative size %d accepted", size)
		}
	})
}
