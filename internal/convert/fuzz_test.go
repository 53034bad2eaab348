package convert

import (
	"encoding/json"
	"testing"
)

// Real outputs of qemu-img 7.2 (Debian 12).
const (
	infoQCOW2Sample = `{
    "virtual-size": 67108864,
    "filename": "fz.qcow2",
    "cluster-size": 65536,
    "format": "qcow2",
    "actual-size": 200704,
    "format-specific": {
        "type": "qcow2",
        "data": {
            "compat": "1.1",
            "compression-type": "zlib",
            "lazy-refcounts": false,
            "refcount-bits": 16,
            "corrupt": false,
            "extended-l2": false
        }
    },
    "dirty-flag": false
}`
	infoBackingSample = `{"backing-filename-format": "qcow2", "virtual-size": 67108864, "filename": "fzb.qcow2", "cluster-size": 65536, "format": "qcow2", "actual-size": 200704, "format-specific": {"type": "qcow2", "data": {"compat": "1.1", "compression-type": "zlib", "lazy-refcounts": false, "refcount-bits": 16, "corrupt": false, "extended-l2": false}}, "full-backing-filename": "fz.qcow2", "backing-filename": "fz.qcow2", "dirty-flag": false}`
	checkCleanSample  = `{
    "image-end-offset": 262144,
    "total-clusters": 1024,
    "check-errors": 0,
    "filename": "fz.qcow2",
    "format": "qcow2"
}`
	checkLeaksSample = `{"image-end-offset": 327680, "total-clusters": 1024, "check-errors": 0, "leaks": 2, "leaks-fixed": 0, "filename": "x.qcow2", "format": "qcow2"}`
)

func TestParseQemuImgJSON(t *testing.T) {
	info, err := parseInfo([]byte(infoBackingSample))
	if err != nil || info.VirtualSize != 64<<20 || info.ActualSize != 200704 || info.Format != QCOW2 || info.BackingFile != "fz.qcow2" {
		t.Errorf("info %+v, %v", info, err)
	}
	if _, err := parseInfo([]byte(`{"virtual-size": -1, "format": "raw"}`)); err == nil {
		t.Error("negative virtual size accepted")
	}
	if _, err := parseInfo([]byte(`{"virtual-size": 1, "actual-size": -4096}`)); err == nil {
		t.Error("negative actual size accepted")
	}
	rep, err := parseCheck([]byte(checkLeaksSample))
	if err != nil || rep.Leaks != 2 || rep.Corruptions != 0 {
		t.Errorf("check %+v, %v", rep, err)
	}
	if _, err := parseCheck([]byte(`{"leaks": -2}`)); err == nil {
		t.Error("negative leak count accepted")
	}
}

// FuzzParseInfo: accepted sizes are never negative and what was read
// survives being written back in qemu-img's shape.
func FuzzParseInfo(f *testing.F) {
	for _, s := range []string{infoQCOW2Sample, infoBackingSample, `{"virtual-size": 9223372036854775807}`, `{"virtual-size": 1e30}`, `{"virtual-size": -512}`, `[]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		info, err := parseInfo(b)
		if err != nil {
			return
		}
		if info.VirtualSize < 0 || info.ActualSize < 0 {
			t.Fatalf("negative sizes accepted: %+v", info)
		}
		again, err := json.Marshal(map[string]any{
			"format": info.Format, "virtual-size": info.VirtualSize, "actual-size": info.ActualSize,
			"backing-filename": info.BackingFile, "dirty-flag": info.Dirty,
			"format-specific": map[string]any{"data": map[string]any{"corrupt": info.Corrupt}},
		})
		if err != nil {
			t.Fatal(err)
		}
		info2, err := parseInfo(again)
		if err != nil || info2 != info {
			t.Fatalf("round trip: %+v became %+v (%v)", info, info2, err)
		}
	})
}

// FuzzParseCheck: accepted counts are never negative and survive a round
// trip.
func FuzzParseCheck(f *testing.F) {
	for _, s := range []string{checkCleanSample, checkLeaksSample, `{"corruptions": 3, "check-errors": 1}`, `{"leaks": -1}`, `null`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		rep, err := parseCheck(b)
		if err != nil {
			return
		}
		if rep.Corruptions < 0 || rep.Leaks < 0 || rep.CheckErrors < 0 {
			t.Fatalf("negative counts accepted: %+v", rep)
		}
		again, err := json.Marshal(rep)
		if err != nil {
			t.Fatal(err)
		}
		rep2, err := parseCheck(again)
		if err != nil || rep2 != rep {
			t.Fatalf("round trip: %+v became %+v (%v)", rep, rep2, err)
		}
	})
}
