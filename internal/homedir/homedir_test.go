package homedir

import (
	"path/filepath"
	"testing"
)

func TestExpand(t *testing.T) {
	t.Setenv("HOME", "/home/ops")
	for _, c := range []struct{ in, want string }{
		{"~", "/home/ops"},
		{"~/.kube/config", filepath.Join("/home/ops", ".kube/config")},
		{"~ops/.ssh/known_hosts", "~ops/.ssh/known_hosts"},
		{"/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts"},
		{"relative/~/x", "relative/~/x"},
		{"", ""},
	} {
		got, err := Expand(c.in)
		if err != nil || got != c.want {
			t.Errorf("Expand(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
}
