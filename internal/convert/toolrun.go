package convert

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/childproc"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/guestslot"
)

// ErrV2VStalled: a virt-v2v tool printed nothing and its processes (the
// helper VM included) wanted almost no CPU for V2V.StallTimeout, and it was
// killed with its helper VM. Nothing was changed that a new attempt
// does not redo (conversions run on copies), so running it again is safe.
var ErrV2VStalled = errors.New("virt-v2v stalled")

// DefaultV2VStallTimeout is how long a virt-v2v tool may neither print
// nor work before it is taken for hung. With -v -x the tools print the
// helper VM's kernel log and every call into it, but some steps are long
// and silent (the initramfs rebuild under TCG on a busy machine prints
// nothing for more than 10 minutes): a tool whose processes keep wanting
// CPU (running, or runnable and waiting for a core) is working, however
// slowly, and is not stopped.
const DefaultV2VStallTimeout = 10 * time.Minute

// workingShare is the share of one CPU a tool's process group must want
// (childproc's Demand) over a watchdog tick for the tick to count as
// progress. A TCG helper VM that works wants a whole CPU per busy vCPU;
// one whose guest sleeps, or a tool blocked forever, wants next to none.
const workingShare = 0.25

// Bounds of what is kept of a tool's output: its standard output whole up
// to maxToolOutput (reports, JSON messages), the JSON message lines of its
// standard error up to maxToolOutput, and the last toolTailBytes of its
// standard error for error messages.
const (
	maxToolOutput = 4 << 20
	toolTailBytes = 64 << 10
	maxToolLine   = 1 << 20
)

func (v *V2V) stallTimeout() time.Duration {
	if v.StallTimeout > 0 {
		return v.StallTimeout
	}
	return DefaultV2VStallTimeout
}

// run runs a virt-v2v tool in dir and returns its standard output; a
// failure wraps ErrV2VFailed with the tail of its standard error.
func (v *V2V) run(ctx context.Context, path string, args []string, dir string) ([]byte, error) {
	stdout, _, err := v.run2(ctx, path, args, dir)
	return stdout, err
}

// run2 runs a virt-v2v tool verbosely (-v -x) in its own process group,
// once one of the machine's guest slots is free (the tool starts a helper
// VM). ctx's end, or StallTimeout with neither output nor work, kills the
// group whole, helper VM included. It returns the tool's standard output
// and the JSON message lines of its standard error.
func (v *V2V) run2(ctx context.Context, path string, args []string, dir string) ([]byte, []byte, error) {
	name := filepath.Base(path)
	release, err := guestslot.Acquire(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	defer release()
	out := newToolOutput()
	p, err := childproc.StartIn(dir, path, append([]string{"-v", "-x"}, args...), v.env(), out.stdoutWriter(), out.stderrWriter())
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrV2VMissing, err)
	}
	stall := v.stallTimeout()
	every := max(min(stall/4, 5*time.Second), 10*time.Millisecond)
	tick := time.NewTicker(every)
	defer tick.Stop()
	lastDemand, lastTick := p.Demand(), time.Now()
	for {
		select {
		case <-p.Done():
			stdout, messages, tailText := out.results()
			if err := p.Err(); err != nil {
				return nil, nil, fmt.Errorf("%w: %s: %v: %s", ErrV2VFailed, name, err, tail(tailText, 20))
			}
			return stdout, messages, nil
		case <-ctx.Done():
			p.Kill()
			return nil, nil, fmt.Errorf("%s: %w", name, ctx.Err())
		case now := <-tick.C:
			d := p.Demand()
			if float64(d-lastDemand) >= workingShare*float64(now.Sub(lastTick)) {
				out.touch(now)
			}
			lastDemand, lastTick = d, now
			if idle := out.idle(); idle >= stall {
				p.Kill()
				_, _, tailText := out.results()
				return nil, nil, fmt.Errorf("%w: %s printed nothing and wanted less than %d%% of a CPU for %s, and was stopped with its helper VM (a hung helper VM); the end of its output:\n%s",
					ErrV2VStalled, name, int(workingShare*100), idle.Round(time.Second), tail(tailText, 20))
			}
		}
	}
}

// toolOutput collects a running tool's output and when it last printed.
type toolOutput struct {
	mu       sync.Mutex
	last     time.Time
	stdout   limitedBuffer
	messages limitedBuffer // JSON lines of stderr
	tail     []byte        // the last toolTailBytes of stderr
	line     []byte        // stderr's unfinished line; nil while it is too long to keep
	longLine bool
}

func newToolOutput() *toolOutput {
	return &toolOutput{last: time.Now(),
		stdout: limitedBuffer{limit: maxToolOutput}, messages: limitedBuffer{limit: maxToolOutput}}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func (o *toolOutput) stdoutWriter() writerFunc {
	return func(p []byte) (int, error) {
		o.mu.Lock()
		defer o.mu.Unlock()
		o.last = time.Now()
		return o.stdout.Write(p)
	}
}

func (o *toolOutput) stderrWriter() writerFunc {
	return func(p []byte) (int, error) {
		o.mu.Lock()
		defer o.mu.Unlock()
		o.last = time.Now()
		o.tail = append(o.tail, p...)
		if over := len(o.tail) - toolTailBytes; over > 0 {
			o.tail = append(o.tail[:0], o.tail[over:]...)
		}
		for rest := p; len(rest) > 0; {
			chunk, after, complete := bytes.Cut(rest, []byte("\n"))
			rest = after
			if !o.longLine {
				o.line = append(o.line, chunk...)
				if len(o.line) > maxToolLine {
					o.line, o.longLine = o.line[:0], true
				}
			}
			if !complete {
				break
			}
			if !o.longLine {
				if l := bytes.TrimSpace(o.line); len(l) > 0 && l[0] == '{' {
					_, _ = o.messages.Write(append(l, '\n'))
				}
			}
			o.line, o.longLine = o.line[:0], false
		}
		return len(p), nil
	}
}

// touch records progress other than output (the tool worked).
func (o *toolOutput) touch(t time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if t.After(o.last) {
		o.last = t
	}
}

func (o *toolOutput) idle() time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	return time.Since(o.last)
}

func (o *toolOutput) results() (stdout, messages, tailText []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return bytes.Clone(o.stdout.Bytes()), bytes.Clone(o.messages.Bytes()), bytes.Clone(o.tail)
}
