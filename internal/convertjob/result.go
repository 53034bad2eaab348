package convertjob

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/convert"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/copyjob"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/fault"
)

// MaxResultBytes is the most a termination message holds (copyjob's).
const MaxResultBytes = copyjob.MaxResultBytes

// SpecFailed is the Result of a spec that cannot be read or is not valid
// (ParseSpec's error): permanent, ReasonBadSpec.
func SpecFailed(err error) Result {
	return failure(context.Background(), &fault.Error{Class: fault.Permanent, Reason: ReasonBadSpec,
		Message: "the conversion's spec is not valid", Err: err})
}

// failure is the Result of err: its class and reason are the ones its
// source decided (a *fault.Error), else local execution's for the same
// fault of virt-v2v, and Interrupted when ctx was stopped (a signal).
func failure(ctx context.Context, err error) Result {
	var fe *fault.Error
	switch {
	case errors.As(err, &fe):
		msg := fe.Error()
		if fe.Action != "" {
			msg += "; " + fe.Action
		}
		return Result{Error: msg, Class: fe.Class.String(), Reason: fe.Reason}
	case isNoSpace(err):
		return failed(fault.NeedsHuman, ReasonNoSpace, err, "a claim is full: give the DataVolumes larger claims, then run again")
	case ctx.Err() != nil:
		return failed(fault.Interrupted, ReasonInterrupted, err, "")
	case errors.Is(err, convert.ErrV2VStalled):
		// Killed with its helper VM; the overlays are gone and the images
		// as they were, so a new attempt converts them from the start.
		return failed(fault.Transient, ReasonStalled, err, "")
	case errors.Is(err, convert.ErrNoVirtioWin):
		return failed(fault.NeedsHuman, ReasonNoVirtioWin, err, "put the virtio-win drivers in the worker's image, then run again")
	case errors.Is(err, convert.ErrV2VMissing):
		return failed(fault.NeedsHuman, ReasonToolsMissing, err, "use the vmmigration-worker image built for this provider's version")
	}
	if errors.Is(err, convert.ErrV2VFailed) {
		return failed(fault.NeedsHuman, ReasonFailed, fmt.Errorf("virt-v2v could not convert the guest: %w", err),
			"if the guest has no OS virt-v2v converts, install virtio drivers in it and set conversion = \"none\"; otherwise fix the guest as the message says, then run again")
	}
	action := fault.ErrnoAdvice(err)
	if action == "" {
		action = "check the claims' storage and the conversion pod's log, then run again"
	}
	return failed(fault.NeedsHuman, ReasonFailed, fmt.Errorf("the conversion failed: %w", err), action)
}

func failed(c fault.Class, reason string, err error, action string) Result {
	msg := err.Error()
	if action != "" {
		msg += "; " + action
	}
	return Result{Error: msg, Class: c.String(), Reason: reason}
}

// isNoSpace says whether err is a full file system or quota, as an errno
// or in a tool's message.
func isNoSpace(err error) bool {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "No space left on device") || strings.Contains(msg, "Disk quota exceeded")
}

// ExitCode is the worker's exit status for r: copyjob's, one per class.
func (r Result) ExitCode() int {
	switch {
	case r.OK:
		return copyjob.ExitOK
	case r.Class == fault.Transient.String():
		return copyjob.ExitTransient
	case r.Class == fault.NeedsHuman.String():
		return copyjob.ExitNeedsHuman
	case r.Class == fault.Interrupted.String():
		return copyjob.ExitInterrupted
	}
	return copyjob.ExitPermanent
}

// Encode is r as JSON of at most MaxResultBytes: when it would not fit,
// virt-v2v's warnings are dropped, then its driver messages, then the
// error message is shortened, then virt-v2v's summary line. The images'
// SHA-256s are never dropped: a conversion of more than about 36 disks
// does not fit.
func (r Result) Encode() []byte {
	if r.Evidence != nil {
		ev := *r.Evidence
		r.Evidence = &ev
	}
	fits := func() bool { return len(r.marshal()) <= MaxResultBytes }
	if !fits() && r.Evidence != nil {
		r.Evidence.Warnings = nil
	}
	if !fits() && r.Evidence != nil {
		r.Evidence.Drivers = nil
	}
	shortenToFit(&r.Error, fits)
	if r.Evidence != nil {
		shortenToFit(&r.Evidence.Converted, fits)
	}
	return r.marshal()
}

func (r Result) marshal() []byte {
	b, err := json.Marshal(r)
	if err != nil {
		// Result holds only strings, numbers and booleans.
		panic(fmt.Sprintf("convertjob: encode result: %v", err))
	}
	return b
}

// shortenToFit cuts *s, at a character boundary, to the longest start of
// it that, marked as cut, makes fits true; to the mark alone when none
// does. A string that fits already is left alone.
func shortenToFit(s *string, fits func() bool) {
	const mark = "…"
	if *s == "" || fits() {
		return
	}
	whole := *s
	cutAt := func(n int) string {
		for n > 0 && !utf8.RuneStart(whole[n]) {
			n--
		}
		return whole[:n] + mark
	}
	lo, hi := 0, len(whole)-1 // the longest n in [lo, hi] that fits, or 0
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if *s = cutAt(mid); fits() {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	*s = cutAt(lo)
}

// truncate bounds s to limit bytes, saying how long it was.
func truncate(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	suffix := fmt.Sprintf("... (%d bytes in all)", len(s))
	cut := max(limit-len(suffix), 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + suffix
}

// WriteResult writes r to p (a termination-message file: written in
// place, not renamed, since Kubernetes mounts that one file) and fsyncs it.
func WriteResult(p string, r Result) error { return copyjob.WriteTerminationMessage(p, r.Encode()) }

// ParseResult reads a worker's result back from a termination message:
// the result file's JSON, or, when the kubelet fell back to the log's
// last lines (the result file was empty), the last result line among
// them. A result that is not well formed (an OK without images, an image
// without a SHA-256 or a size, a failure without a known class) is an
// error: the runner does not advance on evidence it cannot check.
func ParseResult(msg string) (Result, error) {
	var r Result
	lines := strings.Split(strings.TrimSpace(msg), "\n")
	found := false
	if len(lines) == 1 {
		found = json.Unmarshal([]byte(lines[0]), &r) == nil && !strings.Contains(lines[0], `"event"`)
	}
	for i := len(lines) - 1; i >= 0 && !found; i-- {
		var l Line
		if json.Unmarshal([]byte(strings.TrimSpace(lines[i])), &l) == nil && l.Event == EventResult && l.Result != nil {
			r, found = *l.Result, true
		}
	}
	if !found {
		return Result{}, fmt.Errorf("no conversion result in %q", copyjob.Shorten(msg, 200))
	}
	return r, r.check()
}

// check says whether r is a result the worker could have written.
func (r Result) check() error {
	switch {
	case r.OK && len(r.Disks) == 0:
		return fmt.Errorf("conversion result says OK without images: %+v", r)
	case !r.OK && !slices.Contains(copyjob.FailureClasses, r.Class):
		return fmt.Errorf("conversion result is a failure of unknown class %q", r.Class)
	}
	if r.OK {
		for i, d := range r.Disks {
			if err := d.check(); err != nil {
				return fmt.Errorf("conversion result, image %d: %w", i, err)
			}
		}
	}
	return nil
}

// check says whether c is an image's SHA-256 and size.
func (c Checked) check() error {
	if len(c.SHA256) != 64 || strings.Trim(c.SHA256, "0123456789abcdef") != "" || c.Bytes <= 0 {
		return fmt.Errorf("%+v is not a SHA-256 and a size", c)
	}
	return nil
}
