package esxi

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// shWords splits a command line the way a POSIX shell tokenizes words, for
// the subset Quote can produce plus unquoted words and backslashes. It
// reports ok=false on input a shell would treat as incomplete.
func shWords(s string) (words []string, ok bool) {
	var (
		cur    strings.Builder
		inWord bool
	)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, false
			}
			cur.WriteString(s[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == '\\':
			if i+1 >= len(s) {
				return nil, false
			}
			if s[i+1] != '\n' {
				cur.WriteByte(s[i+1])
				inWord = true
			}
			i++
		case c == ' ' || c == '\t' || c == '\n':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case strings.IndexByte("|&;<>()$`\"*?[#~=%", c) >= 0 && !inWord:
			// Operators or expansions outside quotes: not produced by
			// Quote; treat as an unsafe line.
			return nil, false
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, true
}

func TestQuote(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "''"},
		{"abc", "'abc'"},
		{"it's", `'it'\''s'`},
		{"'", `''\'''`},
		{"a b", "'a b'"},
		{"$(rm -rf /)", "'$(rm -rf /)'"},
		{"`x`;y|z&&w", "'`x`;y|z&&w'"},
		{`\`, `'\'`},
		{"[ds] vm/vm.vmx", "'[ds] vm/vm.vmx'"},
	}
	for _, tt := range tests {
		if got := Quote(tt.in); got != tt.want {
			t.Errorf("Quote(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

// checkQuoteRoundTrip asserts Quote(s) is exactly one shell word equal to s.
func checkQuoteRoundTrip(t *testing.T, s string, useSh bool) {
	t.Helper()
	q := Quote(s)
	words, ok := shWords(q)
	if !ok || len(words) != 1 || words[0] != s {
		t.Fatalf("Quote(%q) = %s tokenizes to %q (ok=%v)", s, q, words, ok)
	}
	// Also with something before and after: still exactly that one word.
	words, ok = shWords("cat " + q + " x")
	if !ok || len(words) != 3 || words[1] != s {
		t.Fatalf("cat %s x tokenizes to %q", q, words)
	}
	if useSh && !strings.ContainsRune(s, 0) {
		out, err := exec.Command("/bin/sh", "-c", `printf '%s\0' `+q).Output()
		if err != nil {
			t.Fatalf("sh: %v", err)
		}
		if want := s + "\x00"; string(out) != want {
			t.Fatalf("sh printed %q for Quote(%q) = %s", out, s, q)
		}
	}
}

var quoteSeeds = []string{"", "a", "it's", "''", `'\''`, "a b\tc\nd", "$HOME", "$(id)", "`id`", `"x"`, `\`, "*", "~root", "#c", "é\xff\xfe", ";&|<>", "-n", "a'b'c'"}

func TestQuoteRoundTripSh(t *testing.T) {
	for _, s := range quoteSeeds {
		checkQuoteRoundTrip(t, s, true)
	}
}

func FuzzQuote(f *testing.F) {
	for _, s := range quoteSeeds {
		f.Add(s)
	}
	// Spawning /bin/sh per input is slow; the in-test tokenizer (itself
	// checked against /bin/sh by TestQuoteRoundTripSh) runs always, sh
	// only with ESXI_FUZZ_SH=1.
	useSh := os.Getenv("ESXI_FUZZ_SH") == "1"
	f.Fuzz(func(t *testing.T, s string) {
		checkQuoteRoundTrip(t, s, useSh)
	})
}

func TestValidatePath(t *testing.T) {
	ok := []string{"/vmfs/volumes/ds1/vm/vm.vmx", "/vmfs/volumes/ds 1/my vm/it's.vmdk", InventoryXMLPath, "/vmfs/volumes/ds/a/../b.vmdk"}
	bad := []string{"", "relative/x", "/etc/shadow", "/vmfs/volumes/ds1", "/vmfs/volumes/ds1/../ds2/x", "/vmfs/volumes/../../etc/passwd",
		"/vmfs/volumes/ds/a\nb", "/vmfs/volumes/ds/a\x00b", "/vmfs/volumes/ds/a\rb", "/vmfs/volumes/ds/" + strings.Repeat("a", 5000)}
	for _, p := range ok {
		if err := ValidatePath(p); err != nil {
			t.Errorf("ValidatePath(%q) = %v", p, err)
		}
	}
	for _, p := range bad {
		if err := ValidatePath(p); err == nil {
			t.Errorf("ValidatePath(%q) = nil, want error", p)
		}
	}
}

func TestResolveDiskPath(t *testing.T) {
	vmx := "/vmfs/volumes/ds1/web/web.vmx"
	tests := []struct {
		name, want string
		wantErr    bool
	}{
		{"web.vmdk", "/vmfs/volumes/ds1/web/web.vmdk", false},
		{"disks/web_1.vmdk", "/vmfs/volumes/ds1/web/disks/web_1.vmdk", false},
		{"/vmfs/volumes/ds2/shared/data.vmdk", "/vmfs/volumes/ds2/shared/data.vmdk", false},
		{"../other/x.vmdk", "/vmfs/volumes/ds1/other/x.vmdk", false},
		{"./web.vmdk", "/vmfs/volumes/ds1/web/web.vmdk", false},
		{"../../ds2/x.vmdk", "", true},
		{"../../../../etc/passwd", "", true},
		{"/etc/passwd", "", true},
		{"/vmfs/volumes/ds2/../../etc/x", "", true},
		{"a\nb.vmdk", "", true},
		{"", "", true},
	}
	for _, tt := range tests {
		got, err := ResolveDiskPath(vmx, tt.name)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ResolveDiskPath(%q) = %q, %v; want %q, err=%v", tt.name, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestCommandStrings(t *testing.T) {
	cmds := allCommandsForTest(t)
	var got []string
	for _, c := range cmds {
		got = append(got, c.String())
	}
	want := []string{
		"vim-cmd vmsvc/getallvms",
		"vmware -v",
		"vim-cmd hostsvc/datastore/listsummary",
		"vim-cmd vmsvc/power.getstate 12",
		"vim-cmd vmsvc/power.shutdown 12",
		"vim-cmd vmsvc/power.off 12",
		"vim-cmd vmsvc/power.on 12",
		"vim-cmd vmsvc/get.guest 12",
		"vim-cmd vmsvc/get.summary 12",
		"vim-cmd vmsvc/snapshot.get 12",
		`vim-cmd vmsvc/snapshot.create 12 'vmmigration it'\''s && rm -rf /' '$(reboot)' '0' '0'`,
		"vim-cmd vmsvc/snapshot.remove 12 '3'",
		"cat '/vmfs/volumes/ds1/vm/vm.vmx' '/etc/vmware/hostd/vmInventory.xml'",
		"stat -c '%s %n' '/vmfs/volumes/ds1/vm/vm-flat.vmdk'",
		"dd 'if=/vmfs/volumes/ds1/vm/vm-flat.vmdk' bs=1048576 skip=3 count=4",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, bad := range []func() (Command, error){
		func() (Command, error) { return PowerOn(0) },
		func() (Command, error) { return PowerOff(-1) },
		func() (Command, error) { return Cat() },
		func() (Command, error) { return SnapshotCreateCommand(12, "", "") },
		func() (Command, error) { return SnapshotCreateCommand(12, "a\n--Snapshot Name : b", "") },
		func() (Command, error) { return SnapshotCreateCommand(12, strings.Repeat("x", 81), "") },
		func() (Command, error) { return SnapshotCreateCommand(12, "a", strings.Repeat("x", 1025)) },
		func() (Command, error) { return SnapshotRemoveCommand(12, 0) },
		func() (Command, error) { return Cat("/vmfs/volumes/ds/x\n; rm -rf /") },
		func() (Command, error) { return DD("/vmfs/volumes/ds/x", 1000, 0, 1) },
		func() (Command, error) { return DD("/vmfs/volumes/ds/x", 512, -1, 1) },
		func() (Command, error) { return DD("/vmfs/volumes/ds/x", 512, 0, 0) },
	} {
		if c, err := bad(); err == nil {
			t.Errorf("accepted %q", c.String())
		}
	}
	if (Command{}).String() != "false" {
		t.Error("zero Command must not be runnable")
	}
}

func TestBatch(t *testing.T) {
	b1, _ := NewBatch()
	b2, _ := NewBatch()
	if b1.nonce == b2.nonce || len(b1.nonce) != 32 {
		t.Fatalf("nonces %q %q", b1.nonce, b2.nonce)
	}
	st, _ := PowerGetState(7)
	cat, _ := Cat("/vmfs/volumes/ds/vm/it's.vmx")
	if err := b1.Add("state:7", st); err != nil {
		t.Fatal(err)
	}
	if err := b1.Add("vmx:7", cat); err != nil {
		t.Fatal(err)
	}
	if b1.Add("vmx:7", cat) == nil || b1.Add("bad label", cat) == nil || b1.Add("x", Command{}) == nil {
		t.Error("bad Add accepted")
	}
	n := b1.nonce
	wantScript := "echo '@@VMM " + n + " state:7'; vim-cmd vmsvc/power.getstate 7 2>&1; echo \"@@VMM-END " + n + " $?\"\n" +
		"echo '@@VMM " + n + " vmx:7'; cat '/vmfs/volumes/ds/vm/it'\\''s.vmx' 2>&1; echo \"@@VMM-END " + n + " $?\"\n"
	if b1.Script() != wantScript {
		t.Errorf("script\n%s\nwant\n%s", b1.Script(), wantScript)
	}
	// A file without a final newline, containing a forged marker with the
	// wrong nonce.
	out := "@@VMM " + n + " state:7\nRetrieved runtime info\nPowered off\n@@VMM-END " + n + " 0\n" +
		"@@VMM " + n + " vmx:7\ndisplayName = \"x\"\n@@VMM-END deadbeef 0\nlast line@@VMM-END " + n + " 1\n"
	rs, probs := b1.Parse([]byte(out))
	wantNoProblems(t, probs)
	want := []Result{
		{Label: "state:7", Output: "Retrieved runtime info\nPowered off\n", ExitStatus: 0},
		{Label: "vmx:7", Output: "displayName = \"x\"\n@@VMM-END deadbeef 0\nlast line", ExitStatus: 1},
	}
	if len(rs) != 2 || rs[0] != want[0] || rs[1] != want[1] {
		t.Errorf("results %#v", rs)
	}
	// Cut short.
	rs, probs = b1.Parse([]byte("@@VMM " + n + " state:7\nRetrieved"))
	if len(probs) != 2 || rs[0].ExitStatus != -1 || rs[1].ExitStatus != -1 {
		t.Errorf("cut short: %v %v", rs, probs)
	}
	// The script is valid sh: run it with stub commands.
	if _, err := exec.LookPath("/bin/sh"); err == nil {
		b, _ := NewBatch()
		v := VMwareVersion()
		_ = b.Add("v", v)
		script := "vmware() { echo 'VMware ESXi 8.0.2 build-22380479'; return 3; }\n" + b.Script()
		got, err := exec.Command("/bin/sh", "-c", script).Output()
		if err != nil {
			t.Fatal(err)
		}
		rs, probs := b.Parse(got)
		wantNoProblems(t, probs)
		if rs[0].Output != "VMware ESXi 8.0.2 build-22380479\n" || rs[0].ExitStatus != 3 {
			t.Errorf("%#v", rs[0])
		}
		if !bytes.Contains(got, []byte("@@VMM-END "+b.nonce+" 3")) {
			t.Error("no end marker")
		}
	}
}

func TestDDBlockSize(t *testing.T) {
	tests := []struct {
		off, n, want int64
		err          bool
	}{
		{0, 1 << 30, 1 << 20, false},
		{1 << 20, 4096, 4096, false},
		{512, 1 << 20, 512, false},
		{3 << 20, 5 << 20, 1 << 20, false},
		{65536, 3 * 65536, 65536, false},
		{100, 512, 0, true},
		{0, 1000, 0, true},
		{0, 0, 0, true},
		{-512, 512, 0, true},
	}
	for _, tt := range tests {
		got, err := ddBlockSize(tt.off, tt.n)
		if got != tt.want || (err != nil) != tt.err {
			t.Errorf("ddBlockSize(%d,%d) = %d, %v", tt.off, tt.n, got, err)
		}
	}
}
