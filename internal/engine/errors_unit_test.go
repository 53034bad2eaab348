package engine

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/convert"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/fault"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
)

// classify reads the class an error carries (fault.Classed) and names
// the reason by where it arose; a step's own decision wins over what it
// wraps.
func TestClassifyReadsCarriedClass(t *testing.T) {
	esxiErr := &esxi.Error{Class: fault.NeedsHuman, Kind: esxi.ErrBusy, Msg: "locked"}
	kubeErr := &kube.Error{Op: "get", Kind: "ConfigMap", Class: fault.Transient, Err: errors.New("timeout")}
	for _, tc := range []struct {
		name   string
		err    error
		class  fault.Class
		reason string
	}{
		{"esxi", fmt.Errorf("disk 0: %w", esxiErr), fault.NeedsHuman, "SourceError"},
		{"kube", fmt.Errorf("record: %w", kubeErr), fault.Transient, "ClusterError"},
		{"kube config", &kube.ConfigError{Attribute: kube.AttrHost, Detail: "invalid"}, fault.NeedsHuman, "ClusterError"},
		{"qemu-img missing", fmt.Errorf("%w (looked for %q)", convert.ErrQemuImgMissing, "qemu-img"), fault.NeedsHuman, "QemuImgMissing"},
		{"invalid image", fmt.Errorf("check x: %w: corrupt", convert.ErrInvalidImage), fault.Transient, "InvalidImage"},
		{"step decides", transient("UploadTunnelBroken", "the tunnel broke", esxiErr), fault.Transient, "UploadTunnelBroken"},
		{"step decides inside a join", errors.Join(kubeErr, permanent("Gone", "gone", "", nil)), fault.Permanent, "Gone"},
		{"first of a join", errors.Join(esxiErr, kubeErr), fault.NeedsHuman, "SourceError"},
		{"cancelled", fmt.Errorf("copy: %w", context.Canceled), fault.Interrupted, "Interrupted"},
		{"deadline", context.DeadlineExceeded, fault.Transient, "Timeout"},
		{"unknown", errors.New("odd"), fault.Permanent, "Error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			class, reason := classify(tc.err)
			if class != tc.class || reason != tc.reason {
				t.Fatalf("classify(%v) = %v, %q; want %v, %q", tc.err, class, reason, tc.class, tc.reason)
			}
		})
	}
	var c fault.Classed = needsHuman("X", "y", "z", nil).(*fault.Error)
	if c.FaultClass() != fault.NeedsHuman {
		t.Fatalf("fault.Error.FaultClass = %v", c.FaultClass())
	}
}
