package guestboot

import (
	"context"
	"regexp"
	"strings"
	"sync"
)

// console keeps the last lines a guest wrote to its serial port. It is an
// io.Writer fed by QEMU's stdout; lines are stripped of terminal escape
// sequences and carriage returns, and numbered from 0 so that waiters can
// follow the stream without missing lines still in the buffer.
type console struct {
	mu      sync.Mutex
	lines   []string // ring of at most max lines
	first   int      // index in lines of the oldest line
	total   int      // lines ever completed
	partial []byte   // bytes after the last newline
	max     int
	changed chan struct{} // closed and replaced on every new line and at close
	closed  bool
}

// maxPartial bounds a line that never ends (a guest writing garbage).
const maxPartial = 4096

func newConsole(max int) *console {
	if max <= 0 {
		max = 1
	}
	return &console{max: max, changed: make(chan struct{})}
}

func (c *console) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	added := false
	for _, b := range p {
		if b == '\n' || len(c.partial) >= maxPartial {
			c.add(string(c.partial))
			c.partial = c.partial[:0]
			added = true
			if b == '\n' {
				continue
			}
		}
		c.partial = append(c.partial, b)
	}
	if added {
		c.notify()
	}
	return len(p), nil
}

// close ends the stream: the partial line becomes a line, and waiters see
// that no more will come.
func (c *console) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	if len(c.partial) > 0 {
		c.add(string(c.partial))
		c.partial = nil
	}
	c.closed = true
	c.notify()
}

// escape matches ANSI/VT100 sequences GRUB and the kernel write: CSI
// sequences, and two-byte ESC sequences.
var escape = regexp.MustCompile(`\x1b(\[[0-9;?]*[ -/]*[@-~]|[@-Z\\-_])`)

func (c *console) add(raw string) {
	line := escape.ReplaceAllString(raw, "")
	line = strings.TrimRight(strings.ReplaceAll(line, "\r", ""), " \t")
	if len(c.lines) < c.max {
		c.lines = append(c.lines, line)
	} else {
		c.lines[c.first] = line
		c.first = (c.first + 1) % c.max
	}
	c.total++
}

func (c *console) notify() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// since returns the lines numbered from seq on that are still held, the
// number of the next line, a channel closed at the next change, and whether
// the stream has ended.
func (c *console) since(seq int) ([]string, int, <-chan struct{}, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	oldest := c.total - len(c.lines)
	if seq < oldest {
		seq = oldest
	}
	var out []string
	for i := seq; i < c.total; i++ {
		out = append(out, c.lines[(c.first+i-oldest)%len(c.lines)])
	}
	return out, c.total, c.changed, c.closed
}

// tail returns the last n lines held (all of them when n <= 0), with the
// unfinished last line, if any.
func (c *console) tail(n int) []string {
	all, _, _, _ := c.since(0)
	c.mu.Lock()
	if len(c.partial) > 0 {
		all = append(all, escape.ReplaceAllString(strings.ReplaceAll(string(c.partial), "\r", ""), ""))
	}
	c.mu.Unlock()
	if n > 0 && len(all) > n {
		all = all[len(all)-n:]
	}
	return all
}

// wait returns the first line, from seq on, for which match is true, with
// the number of the line after it. It returns errConsoleClosed once the
// stream has ended without such a line, or ctx's error.
func (c *console) wait(ctx context.Context, seq int, match func(string) bool) (string, int, error) {
	for {
		lines, next, changed, closed := c.since(seq)
		for i, l := range lines {
			if match(l) {
				return l, next - len(lines) + i + 1, nil
			}
		}
		if closed {
			return "", next, errConsoleClosed
		}
		seq = next
		select {
		case <-changed:
		case <-ctx.Done():
			return "", seq, context.Cause(ctx)
		}
	}
}
