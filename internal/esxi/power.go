package esxi

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// PowerState returns the VM's power state (`vim-cmd vmsvc/power.getstate`).
func (c *Client) PowerState(ctx context.Context, vmid int) (PowerState, error) {
	rs, err := c.vimSequence(ctx, "power.getstate", vmid, PowerGetState)
	if err != nil {
		return PowerStateUnknown, err
	}
	return c.stateOf("power.getstate", vmid, rs[0])
}

func (c *Client) stateOf(op string, vmid int, r Result) (PowerState, error) {
	if e := c.vimErr(op, vmid, r); e != nil {
		return PowerStateUnknown, e
	}
	st, probs := ParsePowerState(r.Output)
	if st == PowerStateUnknown {
		return st, &Error{Class: Permanent, Kind: ErrUnexpectedOutput, Host: c.cfg.Name, Op: op, VMID: vmid,
			Msg: fmt.Sprintf("cannot read the power state (%s)", problemsText(probs))}
	}
	return st, nil
}

// PowerOff powers the VM off hard (`vim-cmd vmsvc/power.off`). A VM that is
// already off is success. The state is read back in the same exec.
func (c *Client) PowerOff(ctx context.Context, vmid int) error {
	rs, err := c.vimSequence(ctx, "power.off", vmid, PowerOff, PowerGetState)
	if err != nil {
		return err
	}
	st, stErr := c.stateOf("power.off", vmid, rs[1])
	if stErr == nil && st == PoweredOff {
		return nil
	}
	if e := c.vimErr("power.off", vmid, rs[0]); e != nil {
		return e
	}
	if stErr != nil {
		return stErr
	}
	return &Error{Class: Transient, Kind: ErrInvalidState, Host: c.cfg.Name, Op: "power.off", VMID: vmid,
		Msg: fmt.Sprintf("the VM is still %s after power.off: retry", st)}
}

// PowerOn powers the VM on (`vim-cmd vmsvc/power.on`). A VM that is already
// on is success (older hosts print a fault, ESXi 6.x only "Power on
// failed"; the state read back in the same exec decides).
func (c *Client) PowerOn(ctx context.Context, vmid int) error {
	rs, err := c.vimSequence(ctx, "power.on", vmid, PowerOn, PowerGetState)
	if err != nil {
		return err
	}
	st, stErr := c.stateOf("power.on", vmid, rs[1])
	if stErr == nil && st == PoweredOn {
		return nil
	}
	if e := c.vimErr("power.on", vmid, rs[0]); e != nil {
		return e
	}
	if stErr != nil {
		return stErr
	}
	return &Error{Class: NeedsHuman, Kind: ErrPowerOnFailed, Host: c.cfg.Name, Op: "power.on", VMID: vmid,
		Msg: fmt.Sprintf("the VM is %s after power.on: check for a pending question or error in the host client", st)}
}

// SetPollInterval changes how often Shutdown polls the power state.
func (c *Client) SetPollInterval(d time.Duration) {
	if d > 0 {
		c.pollInterval = d
	}
}

// Shutdown asks VMware Tools to shut the guest down
// (`vim-cmd vmsvc/power.shutdown`) and polls power.getstate until the VM is
// off or ctx ends. A VM that is already off is success. Without running
// Tools it returns an error matching [ErrToolsUnavailable] (class
// NeedsHuman) without touching the VM; the caller decides whether a hard
// [Client.PowerOff] is acceptable. Bound the wait with ctx's deadline.
func (c *Client) Shutdown(ctx context.Context, vmid int) error {
	rs, err := c.vimSequence(ctx, "power.shutdown", vmid, PowerGetState, GetGuest)
	if err != nil {
		return err
	}
	st, err := c.stateOf("power.shutdown", vmid, rs[0])
	if err != nil {
		return err
	}
	switch st {
	case PoweredOff:
		return nil
	case Suspended:
		return &Error{Class: NeedsHuman, Kind: ErrInvalidState, Host: c.cfg.Name, Op: "power.shutdown", VMID: vmid,
			Msg: "the VM is suspended: power it on and shut it down, or power it off (losing its suspended state)"}
	}
	if e := c.vimErr("get.guest", vmid, rs[1]); e != nil {
		return e
	}
	g, _ := ParseGuestInfo(rs[1].Output)
	if !g.ToolsRunning() {
		return &Error{Class: NeedsHuman, Kind: ErrToolsUnavailable, Host: c.cfg.Name, Op: "power.shutdown", VMID: vmid,
			Msg: fmt.Sprintf("VMware Tools is not running in the guest (toolsRunningStatus %q): shut the guest down from inside, or allow a hard power off", g.ToolsRunningStatus)}
	}
	rs, err = c.vimSequence(ctx, "power.shutdown", vmid, PowerShutdown)
	if err != nil {
		return err
	}
	if e := c.vimErr("power.shutdown", vmid, rs[0]); e != nil {
		var f *Fault
		if errors.As(e, &f) && f.ShortType() == "InvalidPowerState" && f.Fields["existingState"] == "poweredOff" {
			return nil
		}
		return e
	}
	return c.waitState(ctx, vmid, PoweredOff)
}

// waitState polls power.getstate until the VM reaches want or ctx ends.
func (c *Client) waitState(ctx context.Context, vmid int, want PowerState) error {
	t := time.NewTicker(c.pollInterval)
	defer t.Stop()
	last := PowerStateUnknown
	for {
		st, err := c.PowerState(ctx, vmid)
		if err == nil {
			if st == want {
				return nil
			}
			last = st
		} else if Classify(err) != Transient || ctx.Err() != nil {
			if ctx.Err() != nil {
				break
			}
			return err
		}
		select {
		case <-ctx.Done():
		case <-t.C:
			continue
		}
		break
	}
	return &Error{Class: Transient, Kind: ErrInvalidState, Host: c.cfg.Name, Op: "waiting for power state", VMID: vmid,
		Msg: fmt.Sprintf("the VM is still %s, not %s, when the wait ended: give the guest more time or power it off", last, want), Err: ctx.Err()}
}
