package esxi

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
)

// maxScriptBytes keeps one exec's command line well below Linux's 128 KiB
// limit on a single argument (sshd runs `sh -c <command>`).
const maxScriptBytes = 32 << 10

// runMany runs cmds framed in as few execs as the script size limit
// allows, spread over the session pool in parallel, and returns the results
// by label. This is one round trip regardless of len(cmds).
func (c *Client) runMany(ctx context.Context, op string, labels []string, cmds []Command) (map[string]Result, []Problem, error) {
	var batches []*Batch
	var cur *Batch
	size := 0
	for i := range cmds {
		line := len(cmds[i].String()) + len(labels[i]) + 120
		if cur == nil || size+line > maxScriptBytes {
			b, err := NewBatch()
			if err != nil {
				return nil, nil, err
			}
			batches = append(batches, b)
			cur, size = b, 0
		}
		if err := cur.Add(labels[i], cmds[i]); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", op, err)
		}
		size += line
	}
	// Spread over the pool: split big batches so every session has work.
	if n := cap(c.sem); len(batches) < n && len(cmds) > 4*len(batches) {
		batches = rebalance(batches, n)
	}
	var (
		mu      sync.Mutex
		wg      sync.WaitGroup
		results = map[string]Result{}
		probs   []Problem
		errs    []error
	)
	for _, b := range batches {
		wg.Add(1)
		go func(b *Batch) {
			defer wg.Done()
			rs, ps, err := c.runBatch(ctx, op, b)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			probs = append(probs, ps...)
			for _, r := range rs {
				results[r.Label] = r
			}
		}(b)
	}
	wg.Wait()
	if len(errs) > 0 {
		return nil, nil, errs[0]
	}
	return results, probs, nil
}

func rebalance(batches []*Batch, n int) []*Batch {
	var items []batchItem
	for _, b := range batches {
		items = append(items, b.items...)
	}
	per := (len(items) + n - 1) / n
	var out []*Batch
	for i := 0; i < len(items); i += per {
		end := min(i+per, len(items))
		b, err := NewBatch()
		if err != nil {
			return batches
		}
		b.items = append(b.items, items[i:end]...)
		out = append(out, b)
	}
	return out
}

// vimErr checks one vim-cmd result for a fault, a shell error or a bad
// exit status and returns a classified error, or nil.
func (c *Client) vimErr(op string, vmid int, r Result) *Error {
	if f := ParseFault(r.Output); f != nil {
		kind, class, hint := faultClass(f)
		return &Error{Class: class, Kind: kind, Host: c.cfg.Name, Op: op, VMID: vmid, Msg: hint, Err: f}
	}
	if kind, class, hint, ok := classifyText(r.Output); ok && r.ExitStatus != 0 {
		return &Error{Class: class, Kind: kind, Host: c.cfg.Name, Op: op, VMID: vmid, Msg: hint, Err: errors.New(strings.TrimSpace(truncate(r.Output, 500)))}
	}
	if r.ExitStatus == -1 {
		return &Error{Class: Transient, Kind: ErrConnection, Host: c.cfg.Name, Op: op, VMID: vmid, Msg: "the output was cut short: retry"}
	}
	if r.ExitStatus != 0 {
		return &Error{Class: Permanent, Kind: ErrUnexpectedOutput, Host: c.cfg.Name, Op: op, VMID: vmid,
			Msg: fmt.Sprintf("vim-cmd exited with status %d", r.ExitStatus), Err: errors.New(strings.TrimSpace(truncate(r.Output, 500)))}
	}
	return nil
}

// fileErr classifies a failed cat/stat of path.
func (c *Client) fileErr(op, path string, vmid int, r Result) *Error {
	if r.ExitStatus == 0 {
		return nil
	}
	if r.ExitStatus == -1 {
		return &Error{Class: Transient, Kind: ErrConnection, Host: c.cfg.Name, Op: op, VMID: vmid, Path: path, Msg: "the output was cut short: retry"}
	}
	if kind, class, hint, ok := classifyText(r.Output); ok {
		return &Error{Class: class, Kind: kind, Host: c.cfg.Name, Op: op, VMID: vmid, Path: path, Msg: hint, Err: errors.New(strings.TrimSpace(truncate(r.Output, 500)))}
	}
	return &Error{Class: Permanent, Kind: ErrUnexpectedOutput, Host: c.cfg.Name, Op: op, VMID: vmid, Path: path,
		Msg: fmt.Sprintf("exit status %d", r.ExitStatus), Err: errors.New(strings.TrimSpace(truncate(r.Output, 500)))}
}

// Version returns the host's product version (`vmware -v`).
func (c *Client) Version(ctx context.Context) (HostVersion, error) {
	rs, _, err := c.runMany(ctx, "vmware -v", []string{"version"}, []Command{VMwareVersion()})
	if err != nil {
		return HostVersion{}, err
	}
	r := rs["version"]
	if e := c.vimErr("vmware -v", 0, r); e != nil {
		return HostVersion{}, e
	}
	v, probs := ParseVersion(r.Output)
	if len(probs) > 0 {
		return v, &Error{Class: Permanent, Kind: ErrNotESXi, Host: c.cfg.Name, Op: "vmware -v", Msg: probs[0].Message + ": is this an ESXi host?"}
	}
	return v, nil
}

func problemsText(ps []Problem) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, "; ")
}

// vimSequence runs the given per-VM vim-cmd operations in order in one exec.
func (c *Client) vimSequence(ctx context.Context, op string, vmid int, ctors ...func(int) (Command, error)) ([]Result, error) {
	labels := make([]string, len(ctors))
	cmds := make([]Command, len(ctors))
	for i, mk := range ctors {
		cmd, err := mk(vmid)
		if err != nil {
			return nil, &Error{Class: Permanent, Host: c.cfg.Name, Op: op, VMID: vmid, Msg: err.Error()}
		}
		labels[i] = "s" + strconv.Itoa(i)
		cmds[i] = cmd
	}
	b, err := NewBatch()
	if err != nil {
		return nil, err
	}
	for i := range cmds {
		if err := b.Add(labels[i], cmds[i]); err != nil {
			return nil, err
		}
	}
	rs, _, err := c.runBatch(ctx, op, b)
	if err != nil {
		return nil, err
	}
	return rs, nil
}
