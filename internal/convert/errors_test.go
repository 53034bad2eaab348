package convert

import (
	"errors"
	"fmt"
	"testing"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/fault"
)

// The sentinels carry their class through the errors that wrap them and
// still match errors.Is.
func TestSentinelsCarryTheirClass(t *testing.T) {
	for _, tc := range []struct {
		sentinel error
		want     fault.Class
	}{
		{ErrQemuImgMissing, fault.NeedsHuman},
		{ErrInvalidImage, fault.Transient},
	} {
		err := fmt.Errorf("check disk.raw: %w: virtual size 1, expected 2", tc.sentinel)
		if got, ok := fault.Of(err); !ok || got != tc.want {
			t.Errorf("fault.Of(%v) = %v, %v; want %v, true", err, got, ok, tc.want)
		}
		if !errors.Is(err, tc.sentinel) || errors.Is(err, errors.New(tc.sentinel.Error())) {
			t.Errorf("errors.Is(%v) does not match its sentinel alone", err)
		}
	}
	if ErrQemuImgMissing.Error() != "qemu-img not found" || ErrInvalidImage.Error() != "invalid image" {
		t.Fatal("sentinel texts changed")
	}
}
