package esxisim

import (
	"bytes"
	"testing"
)

// Run answers a command line split into words as the SSH side answers the
// same command: same output, same status, same state.
func TestRunMatchesExec(t *testing.T) {
	s := newServer(t, nil)
	writeVMX(t, s, "ds1/vm1/vm1.vmx", "displayName", "vm1", "guestOS", "rhel9-64", "virtualHW.version", "19")
	s.Register("ds1/vm1/vm1.vmx")
	c := dial(t, s)
	tests := []struct {
		args []string
		line string
	}{
		{[]string{"vim-cmd", "vmsvc/getallvms"}, "vim-cmd vmsvc/getallvms"},
		{[]string{"vmware", "-v"}, "vmware -v"},
		{[]string{"/bin/vim-cmd", "vmsvc/power.getstate", "1"}, "/bin/vim-cmd vmsvc/power.getstate 1"},
		{[]string{"vim-cmd", "vmsvc/power.getstate", "99"}, "vim-cmd vmsvc/power.getstate 99"},
		{[]string{"vim-cmd", "vmsvc/snapshot.create", "1", "a name", "its description"}, "vim-cmd vmsvc/snapshot.create 1 'a name' 'its description'"},
		{[]string{"vim-cmd", "vmsvc/snapshot.get", "1"}, "vim-cmd vmsvc/snapshot.get 1"},
		{[]string{"esxcfg-nothing"}, "esxcfg-nothing"},
		{[]string{"/opt/vim-cmd"}, "/opt/vim-cmd"},
	}
	for _, tt := range tests {
		var out, errb bytes.Buffer
		code := s.Run(t.Context(), tt.args, &out, &errb)
		want := mustRun(t, c, tt.line)
		if tt.args[0] == "vim-cmd" && tt.args[1] == "vmsvc/snapshot.create" {
			// The second creation adds a second snapshot: compare the status.
			if code != 0 || want.code != 0 {
				t.Errorf("%q: status %d over Run, %d over SSH, want 0", tt.line, code, want.code)
			}
			continue
		}
		if out.String() != want.out || errb.String() != want.err || code != want.code {
			t.Errorf("%q: Run gave (%q, %q, %d), SSH (%q, %q, %d)", tt.line, out.String(), errb.String(), code, want.out, want.err, want.code)
		}
	}
}
