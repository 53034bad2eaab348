package copyjob

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/transfer"
)

// Run copies the spec's disk into its target and returns the outcome: a
// failure is a Result too, with its class. Progress lines and, last, the
// result line are printed to out. Stopping ctx stops the copy with what
// landed kept in the journal (an Interrupted result); a process killed
// outright resumes the same way on its next run.
func Run(ctx context.Context, s Spec, out io.Writer) Result {
	res := run(ctx, s, newProgressPrinter(out))
	PrintResult(out, res)
	return res
}

func run(ctx context.Context, s Spec, p *progressPrinter) Result {
	if err := s.Validate(); err != nil {
		return Failed(ctx, err, "")
	}
	if err := checkPlaces(s); err != nil {
		return Failed(ctx, err, "")
	}
	cfg, err := s.hostConfig()
	if err != nil {
		return Failed(ctx, err, "")
	}
	c, err := esxi.NewClient(cfg, nil)
	if err != nil {
		return Failed(ctx, err, "")
	}
	defer c.Close()
	// One SSH connection per stream, as local execution reads.
	var sources []transfer.RangeReader
	for _, sc := range c.StreamClients(cfg.StreamsPerDisk) {
		sources = append(sources, sc)
	}
	opts := transfer.Options{ChunkSize: s.ChunkSize, Streams: cfg.StreamsPerDisk, Sources: sources,
		JournalPath: s.Journal(), Progress: p.progress}
	if err := clearJournalClaim(s); err != nil {
		return Failed(ctx, err, "")
	}
	if len(s.Deltas) == 0 && !s.OnSnapshots {
		// A chain flattened here earlier (its snapshots consolidated
		// since): the target holds deltas the journal knows nothing of.
		if err := leaveChain(s); err != nil {
			return Failed(ctx, err, "")
		}
	} else {
		res, err := runChain(ctx, s, c, opts)
		if err != nil {
			return Failed(ctx, err, c.HostKeyFingerprint())
		}
		res.HostKeyFingerprint = c.HostKeyFingerprint()
		return res
	}
	var t Timing
	t0 := time.Now()
	r, err := transfer.Copy(ctx, c, transfer.Disk{Path: s.Disk.Path, SizeBytes: s.Disk.SizeBytes}, s.Target.Path, opts)
	if err != nil {
		return Failed(ctx, err, c.HostKeyFingerprint())
	}
	t.add(&t.CopySeconds, t0)
	t.addStages(r.Stages)
	return succeeded(r, c.HostKeyFingerprint(), t)
}

// hostConfig is the client's configuration, with the credential read
// from its file.
func (s Spec) hostConfig() (esxi.HostConfig, error) {
	h := s.Host
	streams := max(s.Streams, 1)
	cfg := esxi.HostConfig{Name: h.Name, Address: h.Address, Port: h.Port, User: h.User,
		HostKeyFingerprint: h.HostKeyFingerprint, StreamsPerDisk: streams,
		MaxSessions: max(h.MaxSessions, esxi.DefaultMaxSessions, streams)}
	if cfg.Name == "" {
		cfg.Name = h.Address
	}
	var err error
	if h.PasswordFile != "" {
		cfg.Password, err = ReadCredential(h.PasswordFile, true)
	} else {
		cfg.PrivateKeyPEM, err = ReadCredential(h.PrivateKeyFile, false)
	}
	return cfg, err
}

// checkPlaces checks that the target is what the spec says it is and that
// the journal and result files can be where they are asked to be.
func checkPlaces(s Spec) error {
	switch s.Target.Kind {
	case TargetBlock:
		fi, err := os.Stat(s.Target.Path)
		if err != nil {
			return fmt.Errorf("block target: %w", err)
		}
		if fi.Mode()&os.ModeDevice == 0 || fi.Mode()&os.ModeCharDevice != 0 {
			return fmt.Errorf("block target %s is not a block device (%s): is the claim in Block volume mode?", s.Target.Path, fi.Mode().Type())
		}
	default:
		if err := regularOrAbsent("file target", s.Target.Path); err != nil {
			return err
		}
	}
	if err := regularOrAbsent("journal", s.Journal()); err != nil {
		return err
	}
	return nil
}

// regularOrAbsent: p is a regular file (not a link) or absent, in an
// existing directory.
func regularOrAbsent(what, p string) error {
	dir, err := os.Stat(filepath.Dir(p))
	if err != nil {
		return fmt.Errorf("%s folder: %w", what, err)
	}
	if !dir.IsDir() {
		return fmt.Errorf("%s folder %s is not a directory", what, filepath.Dir(p))
	}
	fi, err := os.Lstat(p)
	switch {
	case os.IsNotExist(err):
		return nil
	case err != nil:
		return fmt.Errorf("%s: %w", what, err)
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%s %s is not a regular file (%s)", what, p, fi.Mode().Type())
	}
	return nil
}
