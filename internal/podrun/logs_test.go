package podrun

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// The termination message follows the kubelet's limits: the last 4096
// bytes of the file; with the fallback, the last 80 log lines cut to their
// last 2048 bytes, and only when the file is empty.
func TestTerminationMessage(t *testing.T) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	w := &criLogWriter{w: f, mu: &mu, stream: "stderr"}
	for i := range 100 {
		fmt.Fprintf(w, "line %03d\n", i)
	}
	_, _ = w.Write([]byte("no newline"))
	w.flush()
	f.Close()
	var tail strings.Builder
	for i := 21; i < 100; i++ {
		fmt.Fprintf(&tail, "line %03d\n", i)
	}
	tail.WriteString("no newline\n")

	long := strings.Repeat("x", 5000) + "end"
	tests := []struct {
		name, file string
		fallback   bool
		want       string
	}{
		{"file", "result", false, "result"},
		{"file wins over logs", "result", true, "result"},
		{"last 4096 bytes of the file", long, false, long[len(long)-4096:]},
		{"empty file, no fallback", "", false, ""},
		{"empty file, fallback", "", true, tail.String()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			term := filepath.Join(t.TempDir(), "termination-log")
			if err := os.WriteFile(term, []byte(tt.file), 0o644); err != nil {
				t.Fatal(err)
			}
			if got := terminationMessage(term, logPath, tt.fallback); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}

	// 80 long lines exceed 2048 bytes: the end is kept.
	long80 := filepath.Join(dir, "long-log")
	f, _ = os.Create(long80)
	w = &criLogWriter{w: f, mu: &mu, stream: "stdout"}
	for range 80 {
		fmt.Fprintln(w, strings.Repeat("y", 99))
	}
	fmt.Fprintln(w, "last")
	f.Close()
	got := terminationMessage(filepath.Join(dir, "missing"), long80, true)
	if len(got) != 2048 || !strings.HasSuffix(got, "y\nlast\n") {
		t.Errorf("long log: %d bytes ending %q, want 2048 ending with the last line", len(got), got[max(0, len(got)-10):])
	}
}
