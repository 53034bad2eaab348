package esxisim

import (
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// copyChunk is the read size for streaming file content to a channel.
const copyChunk = 1 << 20

// copyFile streams r to w, stopping when the exec is cancelled.
func copyFile(env *shellEnv, w io.Writer, r io.Reader) (readErr, writeErr error) {
	buf := make([]byte, copyChunk)
	for {
		if err := env.ctx.Err(); err != nil {
			return nil, err
		}
		n, err := r.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return nil, werr
			}
		}
		if err == io.EOF {
			return nil, nil
		}
		if err != nil {
			return err, nil
		}
	}
}

// cmdCat is BusyBox cat.
func cmdCat(s *Server, env *shellEnv, args []string, stdout, stderr io.Writer) int {
	status := 0
	files := args[1:]
	if len(files) == 0 {
		return 0 // stdin is empty
	}
	for _, name := range files {
		f, err := s.openPath(name)
		if err != nil {
			fmt.Fprintf(stderr, "cat: can't open '%s': %s\n", name, errText(err))
			status = 1
			continue
		}
		rerr, werr := copyFile(env, stdout, f)
		f.Close()
		if werr != nil {
			return 1
		}
		if rerr != nil {
			fmt.Fprintf(stderr, "cat: read error: %s\n", errText(rerr))
			status = 1
		}
	}
	return status
}

// hashFor returns the digest for a *sum applet name.
func hashFor(name string) hash.Hash {
	switch name {
	case "md5sum":
		return md5.New()
	case "sha1sum":
		return sha1.New()
	}
	return sha256.New()
}

// cmdHashSum is BusyBox sha256sum (and md5sum, sha1sum).
func cmdHashSum(s *Server, env *shellEnv, args []string, stdout, stderr io.Writer) int {
	name := args[0]
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		name = name[i+1:]
	}
	status := 0
	for _, file := range args[1:] {
		f, err := s.openPath(file)
		if err != nil {
			fmt.Fprintf(stderr, "%s: can't open '%s': %s\n", name, file, errText(err))
			status = 1
			continue
		}
		h := hashFor(name)
		rerr, werr := copyFile(env, h, f)
		f.Close()
		if werr != nil {
			return 1
		}
		if rerr != nil {
			fmt.Fprintf(stderr, "%s: read error: %s\n", name, errText(rerr))
			status = 1
			continue
		}
		if _, err := fmt.Fprintf(stdout, "%s  %s\n", hex.EncodeToString(h.Sum(nil)), file); err != nil {
			return 1
		}
	}
	return status
}

// ddSuffixes are BusyBox dd's number suffixes.
var ddSuffixes = []struct {
	sfx  string
	mult uint64
}{
	{"kB", 1000}, {"kD", 1000}, {"MB", 1000000}, {"MD", 1000000}, {"GB", 1000000000}, {"GD", 1000000000},
	{"c", 1}, {"w", 2}, {"b", 512}, {"k", 1024}, {"K", 1024}, {"M", 1 << 20}, {"G", 1 << 30},
}

// ddNumber parses a dd operand value like BusyBox's xatoull_sfx.
func ddNumber(v string) (uint64, bool) {
	mult := uint64(1)
	for _, sf := range ddSuffixes {
		if strings.HasSuffix(v, sf.sfx) && len(v) > len(sf.sfx) {
			v = strings.TrimSuffix(v, sf.sfx)
			mult = sf.mult
			break
		}
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil || (mult > 1 && n > (1<<63)/mult) {
		return 0, false
	}
	return n * mult, true
}

// humanReadable is BusyBox's make_human_readable_str(val, 1, 0).
func humanReadable(val uint64) string {
	if val == 0 {
		return "0"
	}
	units := []string{"", "K", "M", "G", "T", "P", "E"}
	u := 0
	frac := uint64(0)
	for val >= 1024 {
		frac = ((val%1024)*10 + 1024/2) / 1024
		val /= 1024
		u++
	}
	if u == 0 {
		return strconv.FormatUint(val, 10)
	}
	if frac >= 10 {
		val++
		frac = 0
	}
	return fmt.Sprintf("%d.%d%s", val, frac, units[u])
}

const ddUsage = `BusyBox v1.36.1 (2023-05-09 07:33:53 PDT) multi-call binary.

Usage: dd [if=FILE] [of=FILE] [ibs=N obs=N/bs=N] [count=N] [skip=N] [seek=N]
	[conv=notrunc|noerror|sync|fsync]
`

// cmdDD is BusyBox dd reading whole blocks to stdout.
func cmdDD(s *Server, env *shellEnv, args []string, stdout, stderr io.Writer) int {
	a, ok := parseDDArgs(args[1:], stderr)
	if !ok {
		return 1
	}
	start := time.Now()
	var c ddCounts
	status := 0
	if a.in != "" {
		f, err := s.openPath(a.in)
		if err != nil {
			fmt.Fprintf(stderr, "dd: can't open '%s': %s\n", a.in, errText(err))
			return 1
		}
		defer f.Close()
		if fi, err := f.Stat(); err == nil && fi.IsDir() {
			fmt.Fprintf(stderr, "dd: %s: Is a directory\n", a.in)
			return 1
		}
		var aborted bool
		if c, status, aborted = a.copy(env, f, stdout, stderr); aborted {
			return 1
		}
	}
	if a.quiet {
		return status
	}
	secs := time.Since(start).Seconds()
	if secs <= 0 {
		secs = 1e-6
	}
	fmt.Fprintf(stderr, "%d+%d records in\n%d+%d records out\n", c.full, c.part, c.full, c.part)
	fmt.Fprintf(stderr, "%d bytes (%sB) copied, %f seconds, %sB/s\n",
		c.total, humanReadable(c.total), secs, humanReadable(uint64(float64(c.total)/secs)))
	return status
}

// ddArgs are the operands of a dd command.
type ddArgs struct {
	in              string
	bs, skip, count uint64
	haveCount       bool
	quiet           bool // status=none
}

// parseDDArgs reads dd's key=value operands; on a bad one it prints
// BusyBox's message and returns false.
func parseDDArgs(args []string, stderr io.Writer) (ddArgs, bool) {
	d := ddArgs{bs: 512}
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if !ok {
			io.WriteString(stderr, ddUsage)
			return d, false
		}
		var n uint64
		switch k {
		case "bs", "ibs", "skip", "count":
			if n, ok = ddNumber(v); !ok {
				fmt.Fprintf(stderr, "dd: invalid number '%s'\n", v)
				return d, false
			}
		}
		switch k {
		case "if":
			d.in = v
		case "bs", "ibs":
			d.bs = n
		case "skip":
			d.skip = n
		case "count":
			d.count, d.haveCount = n, true
		case "status":
			switch v {
			case "none", "noxfer":
				d.quiet = v == "none"
			default:
				fmt.Fprintf(stderr, "dd: invalid status '%s'\n", v)
				return d, false
			}
		default:
			io.WriteString(stderr, ddUsage)
			return d, false
		}
	}
	if d.bs == 0 {
		fmt.Fprintf(stderr, "dd: invalid number '0'\n")
		return d, false
	}
	return d, true
}

// ddCounts are dd's full and partial blocks and bytes copied.
type ddCounts struct {
	full, part, total uint64
}

// copy copies the blocks the operands select from f to stdout. status is
// 1 after a read error (reported); aborted is true when the command was
// cancelled or stdout failed, and dd then exits without its summary.
func (a ddArgs) copy(env *shellEnv, f hostFile, stdout, stderr io.Writer) (c ddCounts, status int, aborted bool) {
	off := int64(a.skip * a.bs)
	buf := make([]byte, min(a.bs, copyChunk))
	for !a.haveCount || c.full+c.part < a.count {
		var got uint64
		for got < a.bs {
			if err := env.ctx.Err(); err != nil {
				return c, 1, true
			}
			want := min(a.bs-got, uint64(len(buf)))
			n, err := f.ReadAt(buf[:want], off)
			if n > 0 {
				if _, werr := stdout.Write(buf[:n]); werr != nil {
					return c, 1, true
				}
				got += uint64(n)
				off += int64(n)
				c.total += uint64(n)
			}
			if err != nil {
				if !errors.Is(err, io.EOF) {
					fmt.Fprintf(stderr, "dd: %s: %s\n", a.in, errText(err))
					status = 1
				}
				if got == a.bs {
					c.full++
				} else if got > 0 {
					c.part++
				}
				return c, status, false
			}
		}
		c.full++
	}
	return c, status, false
}

// cmdStat is BusyBox `stat -c FORMAT FILE...`.
func cmdStat(s *Server, _ *shellEnv, args []string, stdout, stderr io.Writer) int {
	format := ""
	var files []string
	for i := 1; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-c":
			if i+1 >= len(args) {
				fmt.Fprintln(stderr, "stat: option requires an argument -- 'c'")
				return 1
			}
			i++
			format = args[i]
		case strings.HasPrefix(a, "-c"):
			format = a[2:]
		case strings.HasPrefix(a, "--format="):
			format = strings.TrimPrefix(a, "--format=")
		case a == "-L":
		case strings.HasPrefix(a, "-") && a != "-":
			fmt.Fprintf(stderr, "stat: unrecognized option '%s'\n", a)
			return 1
		default:
			files = append(files, a)
		}
	}
	if format == "" || len(files) == 0 {
		fmt.Fprintln(stderr, "BusyBox v1.36.1 (2023-05-09 07:33:53 PDT) multi-call binary.\n\nUsage: stat [-lLtf] [-c FMT] FILE...")
		return 1
	}
	status := 0
	for _, f := range files {
		fi, err := s.statPath(f)
		if err != nil {
			fmt.Fprintf(stderr, "stat: can't stat '%s': %s\n", f, errText(err))
			status = 1
			continue
		}
		if _, err := io.WriteString(stdout, statFormat(format, f, fi)+"\n"); err != nil {
			return 1
		}
	}
	return status
}

// statFormat expands a BusyBox stat format for one file.
func statFormat(format, name string, fi fs.FileInfo) string {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' || i+1 >= len(format) {
			b.WriteByte(c)
			continue
		}
		i++
		switch format[i] {
		case 's':
			b.WriteString(strconv.FormatInt(fi.Size(), 10))
		case 'n':
			b.WriteString(name)
		case 'F':
			switch {
			case fi.IsDir():
				b.WriteString("directory")
			case fi.Mode()&fs.ModeSymlink != 0:
				b.WriteString("symbolic link")
			case fi.Size() == 0:
				b.WriteString("regular empty file")
			default:
				b.WriteString("regular file")
			}
		case 'Y':
			b.WriteString(strconv.FormatInt(fi.ModTime().Unix(), 10))
		case 'a':
			b.WriteString(strconv.FormatUint(uint64(fi.Mode().Perm()), 8))
		case 'b':
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				b.WriteString(strconv.FormatInt(st.Blocks, 10))
			} else {
				b.WriteString(strconv.FormatInt((fi.Size()+511)/512, 10))
			}
		case 'U', 'G':
			b.WriteString("root")
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('?')
		}
	}
	return b.String()
}

// cmdLs is BusyBox ls with output to a non-terminal (one name per line).
func cmdLs(s *Server, _ *shellEnv, args []string, stdout, stderr io.Writer) int {
	all := false
	var paths []string
	for _, a := range args[1:] {
		if strings.HasPrefix(a, "-") && len(a) > 1 {
			for _, f := range a[1:] {
				switch f {
				case '1':
				case 'a', 'A':
					all = true
				default:
					fmt.Fprintf(stderr, "ls: invalid option -- '%c'\n", f)
					return 1
				}
			}
			continue
		}
		paths = append(paths, a)
	}
	if len(paths) == 0 {
		paths = []string{"/"}
	}
	status := 0
	var files, dirs []string
	for _, p := range paths {
		fi, err := s.statPath(p)
		if err != nil {
			fmt.Fprintf(stderr, "ls: %s: %s\n", p, errText(err))
			status = 1
			continue
		}
		if fi.IsDir() {
			dirs = append(dirs, p)
		} else {
			files = append(files, p)
		}
	}
	var b strings.Builder
	for _, f := range files {
		b.WriteString(f + "\n")
	}
	for i, d := range dirs {
		names, err := s.readDir(d)
		if err != nil {
			fmt.Fprintf(stderr, "ls: %s: %s\n", d, errText(err))
			status = 1
			continue
		}
		if len(paths) > 1 {
			if i > 0 || len(files) > 0 {
				b.WriteString("\n")
			}
			b.WriteString(d + ":\n")
		}
		for _, n := range names {
			if !all && strings.HasPrefix(n, ".") {
				continue
			}
			b.WriteString(n + "\n")
		}
	}
	if _, err := io.WriteString(stdout, b.String()); err != nil {
		return 1
	}
	return status
}
