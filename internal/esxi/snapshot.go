package esxi

import (
	"context"
	"fmt"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// Snapshots taken by a migration: `vim-cmd vmsvc/snapshot.create <vmid>
// <name> <description> 0 0` (no memory, no quiescing: a disk-only snapshot
// of a running VM, as a crash-consistent copy needs), found again by name in
// `vim-cmd vmsvc/snapshot.get` and removed by id with `vim-cmd
// vmsvc/snapshot.remove <vmid> <id>`, which consolidates the snapshot's
// delta into its parent. Names and descriptions pass through [Quote]; ids
// are integers formatted by strconv.

// MaxSnapshotNameLen and MaxSnapshotDescriptionLen bound the snapshot
// names and descriptions this package sends (the vSphere client allows 80
// characters for a name).
const (
	MaxSnapshotNameLen        = 80
	MaxSnapshotDescriptionLen = 1024
)

// ValidateSnapshotText checks a snapshot name or description: valid UTF-8,
// no control characters (snapshot.get prints one attribute per line, so a
// newline would forge another attribute), at most MaxSnapshotNameLen
// characters for a name and MaxSnapshotDescriptionLen for a description.
// An empty description is allowed; an empty name is not.
func ValidateSnapshotText(what, s string, allowEmpty bool) error {
	limit := MaxSnapshotNameLen
	if allowEmpty {
		limit = MaxSnapshotDescriptionLen
	}
	if s == "" && !allowEmpty {
		return fmt.Errorf("empty snapshot %s", what)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("snapshot %s %q is not valid UTF-8", what, s)
	}
	if n := utf8.RuneCountInString(s); n > limit {
		return fmt.Errorf("snapshot %s of %d characters is longer than %d", what, n, limit)
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return fmt.Errorf("snapshot %s %q holds a control character", what, s)
		}
	}
	return nil
}

// SnapshotCreateCommand is `vim-cmd vmsvc/snapshot.create <vmid> '<name>'
// '<description>' 0 0`.
func SnapshotCreateCommand(vmid int, name, description string) (Command, error) {
	c, err := vimVMCommand(OpSnapshotCreate, vmid)
	if err != nil {
		return Command{}, err
	}
	if err := ValidateSnapshotText("name", name, false); err != nil {
		return Command{}, err
	}
	if err := ValidateSnapshotText("description", description, true); err != nil {
		return Command{}, err
	}
	c.args = []string{name, description, "0", "0"}
	return c, nil
}

// SnapshotRemoveCommand is `vim-cmd vmsvc/snapshot.remove <vmid> <id>`.
func SnapshotRemoveCommand(vmid, snapshotID int) (Command, error) {
	c, err := vimVMCommand(OpSnapshotRemove, vmid)
	if err != nil {
		return Command{}, err
	}
	if snapshotID <= 0 {
		return Command{}, fmt.Errorf("invalid snapshot id %d: snapshot ids are positive integers", snapshotID)
	}
	c.args = []string{strconv.Itoa(snapshotID)}
	return c, nil
}

// FindSnapshots returns every snapshot of tree (depth first) that matches.
func FindSnapshots(tree []Snapshot, match func(Snapshot) bool) []Snapshot {
	var out []Snapshot
	var walk func(ns []Snapshot)
	walk = func(ns []Snapshot) {
		for _, n := range ns {
			if match(n) {
				n2 := n
				n2.Children = nil
				out = append(out, n2)
			}
			walk(n.Children)
		}
	}
	walk(tree)
	return out
}

// Snapshots reads the VM's snapshot tree (`vim-cmd vmsvc/snapshot.get`).
func (c *Client) Snapshots(ctx context.Context, vmid int) ([]Snapshot, error) {
	rs, err := c.vimSequence(ctx, "snapshot.get", vmid, SnapshotGet)
	if err != nil {
		return nil, err
	}
	return c.snapshotTree("snapshot.get", vmid, rs[0])
}

func (c *Client) snapshotTree(op string, vmid int, r Result) ([]Snapshot, error) {
	if e := c.vimErr(op, vmid, r); e != nil {
		return nil, e
	}
	tree, probs := ParseSnapshotGet(r.Output)
	if len(probs) > 0 {
		return nil, &Error{Class: Permanent, Kind: ErrUnexpectedOutput, Host: c.cfg.Name, Op: op, VMID: vmid,
			Msg: fmt.Sprintf("cannot read the snapshot tree (%s)", problemsText(probs))}
	}
	return tree, nil
}

// snapshotNamed returns the one snapshot called name in tree, nil when
// there is none, and an error when several share the name (the caller
// cannot tell which one it made).
func (c *Client) snapshotNamed(op string, vmid int, tree []Snapshot, name string) (*Snapshot, error) {
	found := FindSnapshots(tree, func(s Snapshot) bool { return s.Name == name })
	switch len(found) {
	case 0:
		return nil, nil
	case 1:
		if found[0].ID <= 0 {
			return nil, &Error{Class: NeedsHuman, Kind: ErrUnexpectedOutput, Host: c.cfg.Name, Op: op, VMID: vmid,
				Msg: fmt.Sprintf("the host does not print snapshot ids, so snapshot %q cannot be removed by id: remove it in the host client", name)}
		}
		return &found[0], nil
	}
	return nil, &Error{Class: NeedsHuman, Kind: ErrInvalidState, Host: c.cfg.Name, Op: op, VMID: vmid,
		Msg: fmt.Sprintf("%d snapshots are named %q: remove the extra ones in the host client, then retry", len(found), name)}
}

// SnapshotByName returns the VM's snapshot called name, or nil when there
// is none. Several snapshots of that name are an error.
func (c *Client) SnapshotByName(ctx context.Context, vmid int, name string) (*Snapshot, error) {
	tree, err := c.Snapshots(ctx, vmid)
	if err != nil {
		return nil, err
	}
	return c.snapshotNamed("snapshot.get", vmid, tree, name)
}

// SnapshotCreate takes a disk-only snapshot of the VM (no memory, no
// quiescing) and returns it as snapshot.get shows it, with its id. It is
// idempotent by name: a snapshot called name that exists already (a create
// whose reply was lost) is returned without creating another, so names
// must be unique per intended snapshot. The tree is read back in the same
// exec as the create.
func (c *Client) SnapshotCreate(ctx context.Context, vmid int, name, description string) (Snapshot, error) {
	const op = "snapshot.create"
	create, err := SnapshotCreateCommand(vmid, name, description)
	if err != nil {
		return Snapshot{}, &Error{Class: Permanent, Host: c.cfg.Name, Op: op, VMID: vmid, Msg: err.Error()}
	}
	if s, err := c.SnapshotByName(ctx, vmid, name); err != nil || s != nil {
		if s != nil {
			return *s, nil
		}
		return Snapshot{}, err
	}
	rs, err := c.vimSequence(ctx, op, vmid, func(int) (Command, error) { return create, nil }, SnapshotGet)
	if err != nil {
		return Snapshot{}, err
	}
	tree, treeErr := c.snapshotTree(op, vmid, rs[1])
	if treeErr == nil {
		s, err := c.snapshotNamed(op, vmid, tree, name)
		if err != nil {
			return Snapshot{}, err
		}
		if s != nil {
			return *s, nil
		}
	}
	if e := c.vimErr(op, vmid, rs[0]); e != nil {
		return Snapshot{}, e
	}
	if treeErr != nil {
		return Snapshot{}, treeErr
	}
	return Snapshot{}, &Error{Class: Transient, Kind: ErrUnexpectedOutput, Host: c.cfg.Name, Op: op, VMID: vmid,
		Msg: fmt.Sprintf("snapshot %q is not in the snapshot tree after snapshot.create: retry", name)}
}

// SnapshotRemove removes the snapshot with the given id, consolidating its
// delta into its parent; the VM keeps its current state. A snapshot that is
// not in the tree afterwards is success, so removing one already removed
// (a lost reply) is too. The tree is read back in the same exec.
func (c *Client) SnapshotRemove(ctx context.Context, vmid, snapshotID int) error {
	const op = "snapshot.remove"
	remove, err := SnapshotRemoveCommand(vmid, snapshotID)
	if err != nil {
		return &Error{Class: Permanent, Host: c.cfg.Name, Op: op, VMID: vmid, Msg: err.Error()}
	}
	rs, err := c.vimSequence(ctx, op, vmid, func(int) (Command, error) { return remove, nil }, SnapshotGet)
	if err != nil {
		return err
	}
	tree, treeErr := c.snapshotTree(op, vmid, rs[1])
	if treeErr == nil && len(FindSnapshots(tree, func(s Snapshot) bool { return s.ID == snapshotID })) == 0 {
		return nil
	}
	if e := c.vimErr(op, vmid, rs[0]); e != nil {
		return e
	}
	if treeErr != nil {
		return treeErr
	}
	return &Error{Class: Transient, Kind: ErrInvalidState, Host: c.cfg.Name, Op: op, VMID: vmid,
		Msg: fmt.Sprintf("snapshot %d is still in the snapshot tree after snapshot.remove: retry", snapshotID)}
}
