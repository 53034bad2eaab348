package esxisim

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

// echoArgs prints the arguments and the first bytes of the file it is given.
const echoArgsScript = `import sys
print(repr(sys.argv[1:]))
if sys.argv[1] != "--probe":
    with open(sys.argv[1], "rb") as f:
        sys.stdout.write(f.read(5).decode())
`

func TestPythonAbsentByDefault(t *testing.T) {
	s := newServer(t, nil)
	c := dial(t, s)
	for _, name := range []string{"python", "/bin/python", "python3"} {
		r := mustRun(t, c, name+" -c 'print(1)' --probe")
		if r.code != 127 || !strings.Contains(r.err, name+": not found") {
			t.Errorf("%s without python: code %d stderr %q, want 127 and not found", name, r.code, r.err)
		}
	}
}

func TestPythonRunsScriptOnBackingFile(t *testing.T) {
	s := newServer(t, nil)
	s.SetPython("python3")
	writeFile(t, s, "ds1/vm/vm-flat.vmdk", []byte("hello world"))
	c := dial(t, s)

	r := mustRun(t, c, "/bin/python -c "+shellQuote(echoArgsScript)+" '/vmfs/volumes/ds1/vm/../vm/vm-flat.vmdk' 3 4")
	if r.code != 0 {
		t.Fatalf("python: code %d stderr %q", r.code, r.err)
	}
	if want := "['/dev/fd/3', '3', '4']\nhello"; r.out != want {
		t.Errorf("output %q, want %q", r.out, want)
	}

	r = mustRun(t, c, "python -c "+shellQuote(echoArgsScript)+" --probe")
	if r.code != 0 || r.out != "['--probe']\n" {
		t.Errorf("probe: code %d out %q stderr %q", r.code, r.out, r.err)
	}

	// Exit status and stderr of the script come back as the host's.
	r = mustRun(t, c, "python -c 'import sys; sys.stderr.write(\"boom\"); sys.exit(3)' --probe")
	if r.code != 3 || r.err != "boom" {
		t.Errorf("failing script: code %d stderr %q, want 3 and boom", r.code, r.err)
	}

	s.SetPython("")
	r = mustRun(t, c, "python -c 'print(1)' --probe")
	if r.code != 127 {
		t.Errorf("after SetPython(\"\"): code %d, want 127", r.code)
	}
}

func TestPythonFileRules(t *testing.T) {
	s := newServer(t, nil)
	s.SetPython("python3")
	writeFile(t, s, "ds1/vm/vm-flat.vmdk", bytes.Repeat([]byte{1}, 512))
	c := dial(t, s)
	for _, tc := range []struct {
		path, want string
	}{
		{"/vmfs/volumes/ds1/vm/missing-flat.vmdk", "No such file or directory"},
		{"/etc/passwd", "No such file or directory"},
		{"/vmfs/volumes/ds1/../../../etc/passwd", "No such file or directory"},
		{"/vmfs/volumes/ds1/vm", "Is a directory"},
	} {
		r := mustRun(t, c, "python -c "+shellQuote(echoArgsScript)+" "+shellQuote(tc.path)+" 0 1")
		if r.code == 0 || !strings.Contains(r.err, tc.want) {
			t.Errorf("%s: code %d stderr %q, want failure with %q", tc.path, r.code, r.err, tc.want)
		}
	}
	// Only `python -c SCRIPT ARG...` is supported.
	r := mustRun(t, c, "python - /vmfs/volumes/ds1/vm/vm-flat.vmdk 0 1")
	if r.code != 2 {
		t.Errorf("python - ...: code %d, want 2", r.code)
	}
}

// HostPython names an interpreter that runs.
func TestHostPythonRuns(t *testing.T) {
	out, err := exec.Command(HostPython(), "-c", "import hashlib, os, struct, sys; print(sys.version_info[0])").Output()
	if err != nil || strings.TrimSpace(string(out)) != "3" {
		t.Fatalf("%s: %q, %v", HostPython(), out, err)
	}
}
