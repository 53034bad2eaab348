package main

import (
	"bytes"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
)

// esxitool, run as vim-cmd or vmware, prints what the simulated host
// answers to the same words, on the same streams, with the same status.
func TestControlSocket(t *testing.T) {
	dir := t.TempDir()
	tool := filepath.Join(dir, "esxitool")
	if out, err := exec.Command("go", "build", "-o", tool, "../esxitool").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, name := range []string{"vim-cmd", "vmware"} {
		if err := os.Symlink("esxitool", filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	root := filepath.Join(dir, "volumes")
	if err := os.MkdirAll(filepath.Join(root, datastore), 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := esxisim.New(esxisim.Options{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, _, err := s.AddVM(esxisim.VMSpec{Datastore: datastore, Name: "vm1", GuestOS: "rhel9-64",
		Disks: []esxisim.DiskSpec{{CapacityBytes: 1 << 20}}}); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "esxisim.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go serveControl(s, ln)

	for _, args := range [][]string{
		{"vim-cmd", "vmsvc/getallvms"},
		{"vim-cmd", "vmsvc/power.getstate", "1"},
		{"vim-cmd", "vmsvc/power.getstate", "42"},
		{"vim-cmd", "vmsvc/snapshot.get", "1"},
		{"vim-cmd", "vmsvc/get.guest", "1"},
		{"vmware", "-v"},
		{"vmware", "--nonsense"},
	} {
		var wantOut, wantErr bytes.Buffer
		wantCode := s.Run(t.Context(), args, &wantOut, &wantErr)
		cmd := exec.Command(filepath.Join(dir, args[0]), args[1:]...)
		cmd.Env = append(os.Environ(), "ESXITOOL_SOCKET="+sock)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		code := 0
		if err := cmd.Run(); err != nil {
			var ee *exec.ExitError
			if !errors.As(err, &ee) {
				t.Fatalf("%v: %v", args, err)
			}
			code = ee.ExitCode()
		}
		if out.String() != wantOut.String() || errb.String() != wantErr.String() || code != wantCode {
			t.Errorf("%v: esxitool gave (%q, %q, %d), the host (%q, %q, %d)", args, out.String(), errb.String(), code,
				wantOut.String(), wantErr.String(), wantCode)
		}
		if wantOut.Len() == 0 && wantErr.Len() == 0 {
			t.Errorf("%v: the host said nothing: the test proves nothing", args)
		}
	}
}
