package esxisim

import (
	"testing"
)

func TestShellGrammar(t *testing.T) {
	s := newServer(t, nil)
	c := dial(t, s)
	tests := []struct {
		name, cmd, out, err string
		code                int
	}{
		{"bare words", "echo a b=c d.e/f:g,h@i%j+k-l_m", "a b=c d.e/f:g,h@i%j+k-l_m\n", "", 0},
		{"single quotes keep everything", `echo 'a  b $? "x" ; && | \ *'`, "a  b $? \"x\" ; && | \\ *\n", "", 0},
		{"embedded single quote", `echo 'it'\''s'`, "it's\n", "", 0},
		{"adjacent parts", `echo a'b'"c"`, "abc\n", "", 0},
		{"empty word", `echo '' x`, " x\n", "", 0},
		{"double quotes with $?", `false; echo "st $?"; echo "st $?"`, "st 1\nst 0\n", "", 0},
		{"marker framing", "echo '@@VMM n1 a'; vmware -v 2>&1; echo \"@@VMM-END n1 $?\"", "@@VMM n1 a\nVMware ESXi 8.0.2 build-22380479\n@@VMM-END n1 0\n", "", 0},
		{"and skips on failure", `false && echo no; echo "$?"`, "1\n", "", 0},
		{"dollar other than $? refused", `echo "$HOME"`, "", "sh: syntax error: unsupported \"$\" expansion\n", 2},
		{"and/or chain", "false && echo no || echo yes", "yes\n", "", 0},
		{"or skips on success", "true || echo no", "", "", 0},
		{"and across newline", "true &&\necho yes", "yes\n", "", 0},
		{"newline separator", "echo a\necho b\n", "a\nb\n", "", 0},
		{"exit status is last", "true; false", "", "", 1},
		{"stdout to null", "echo a >/dev/null", "", "", 0},
		{"stderr to null", "cat /nope 2>/dev/null", "", "", 1},
		{"stderr to stdout", "cat /nope 2>&1", "cat: can't open '/nope': No such file or directory\n", "", 1},
		{"order of redirections", "cat /nope 2>&1 >/dev/null", "cat: can't open '/nope': No such file or directory\n", "", 1},
		{"both to null", "cat /nope >/dev/null 2>&1", "", "", 1},
		{"not found", "uname -a", "", "sh: uname: not found\n", 127},
		{"path to applet", "/bin/echo hi", "hi\n", "", 0},
		{"pipe refused", "echo a | cat", "", "sh: syntax error: unsupported \"|\" (pipe)\n", 2},
		{"background refused", "echo a &", "", "sh: syntax error: unsupported \"&\" (background)\n", 2},
		{"dollar refused", "echo $HOME", "", "sh: syntax error: unexpected \"$\"\n", 2},
		{"backtick refused", "echo `id`", "", "sh: syntax error: unexpected \"`\"\n", 2},
		{"glob refused", "ls *", "", "sh: syntax error: unexpected \"*\"\n", 2},
		{"subshell refused", "(echo a)", "", "sh: syntax error: unexpected \"(\"\n", 2},
		{"file redirection refused", "echo a >/tmp/x", "", "sh: syntax error: unsupported redirection\n", 2},
		{"unterminated single", "echo 'a", "", "sh: syntax error: unterminated quoted string\n", 2},
		{"unterminated double", `echo "a`, "", "sh: syntax error: unterminated quoted string\n", 2},
		{"backslash refused", `echo a\ b`, "", "sh: syntax error: unsupported \"\\\" escape\n", 2},
		{"leading semicolon", "; echo a", "", "sh: syntax error: unexpected \";\"\n", 2},
		{"double semicolon", "echo a;; echo b", "", "sh: syntax error: unexpected \";;\"\n", 2},
		{"dangling and", "echo a &&", "", "sh: syntax error: unexpected end of file\n", 2},
		{"earlier lines run", "echo a\necho 'b", "a\n", "sh: syntax error: unterminated quoted string\n", 2},
		{"empty script", "", "", "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustRun(t, c, tt.cmd)
			if r.out != tt.out || r.err != tt.err || r.code != tt.code {
				t.Errorf("%q:\ngot  out=%q err=%q exit=%d\nwant out=%q err=%q exit=%d", tt.cmd, r.out, r.err, r.code, tt.out, tt.err, tt.code)
			}
		})
	}
}

func TestParseQuoteRoundTrip(t *testing.T) {
	for _, w := range []string{"", "a", "a b", "it's", "'", "''", `\`, "$?", "\n", "x'\\''y", "ü"} {
		lines, err := parseScript("echo " + shellQuote(w))
		if err != nil {
			t.Fatalf("quote(%q): %v", w, err)
		}
		if got := lines[0][0].cmds[0].words[1].expand(0); got != w {
			t.Errorf("round trip: got %q want %q", got, w)
		}
	}
}

func FuzzShellParse(f *testing.F) {
	for _, s := range []string{"echo a", "echo 'a'\\''b' && cat x 2>&1 || ls >/dev/null; x\n", `echo "$? x"`, "a 2>/dev/null", "'", "&&", "2>&1", "a 2>", `"$`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		lines, err := parseScript(s)
		for _, line := range lines {
			for _, ao := range line {
				if len(ao.cmds) != len(ao.ops)+1 {
					t.Fatalf("%q: %d cmds for %d ops", s, len(ao.cmds), len(ao.ops))
				}
				for _, c := range ao.cmds {
					if len(c.words) == 0 {
						t.Fatalf("%q: command without words", s)
					}
				}
			}
		}
		_ = err
		// Quoting any string yields one word that expands back to it.
		lines, err = parseScript("x " + shellQuote(s))
		if err != nil {
			t.Fatalf("quoted %q: %v", s, err)
		}
		if w := lines[0][0].cmds[0].words; len(w) != 2 || w[1].expand(0) != s {
			t.Fatalf("quoted %q parsed as %v", s, w)
		}
	})
}
