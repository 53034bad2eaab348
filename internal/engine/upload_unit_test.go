package engine

import (
	"errors"
	"strings"
	"testing"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/fault"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
)

// The upload server's refusals, in CDI v1.65.0's words (as its
// cdi-uploadserver answered them in kube's TestUploadRefusalsByTheServersWords),
// become stops that say what to do; anything else is left to its class.
func TestUploadRefusalSaysWhatToDo(t *testing.T) {
	req := UploadRequest{Namespace: "vms", DataVolume: "web-disk-0"}
	wrap := func(ue *kube.UploadError) error {
		return &kube.Error{Op: "upload", Kind: "DataVolume", Namespace: "vms", Name: "web-disk-0", Class: ue.Class(), Err: ue}
	}
	for _, tc := range []struct {
		name       string
		ue         *kube.UploadError
		class      fault.Class
		reason     string
		msg        []string
		actionWant string
	}{
		{
			name: "too large",
			ue: &kube.UploadError{StatusCode: 400, Message: "Saving stream failed: effective image size is larger than the reported available storage: " +
				"virtual image size 2147483648 is larger than the reported available storage 1073741824. A larger PVC is required"},
			class: fault.Permanent, reason: "ImageTooLarge",
			msg:        []string{"DataVolume vms/web-disk-0", "2147483648 bytes (2048 MiB)", "1073741824 bytes (1024 MiB)"},
			actionWant: "at least 2147483648 bytes (2048 MiB)",
		},
		{
			name: "corrupt",
			ue: &kube.UploadError{StatusCode: 500, Message: "Saving stream failed: Unable to obtain information about data source: " +
				"could not process image header: flate: corrupt input before offset 8"},
			class: fault.Permanent, reason: "ImageRejected",
			msg:        []string{"refused the image for DataVolume vms/web-disk-0", "corrupt input"},
			actionWant: "raw or qcow2 without a backing file",
		},
		{
			name:  "failed after taking it",
			ue:    &kube.UploadError{Message: "UploadServer failed: Unable to convert source data to target format: Conversion to Raw failed"},
			class: fault.Permanent, reason: "ImageRejected",
			msg: []string{"Conversion to Raw failed"},
		},
		{
			name:  "cut off on the way",
			ue:    &kube.UploadError{StatusCode: 500, Message: "Saving stream failed: Unable to transfer source data to scratch space: unexpected EOF"},
			class: fault.Transient, reason: "ClusterError",
		},
		{
			name:  "proxy trouble",
			ue:    &kube.UploadError{StatusCode: 502, Message: "error in upload-proxy: dial tcp: connection refused"},
			class: fault.Transient, reason: "ClusterError",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := uploadRefusal(wrap(tc.ue), req)
			class, reason := classify(err)
			if class != tc.class || reason != tc.reason {
				t.Errorf("class %v reason %q, want %v %q (%v)", class, reason, tc.class, tc.reason, err)
			}
			for _, m := range tc.msg {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("message %q does not say %q", err.Error(), m)
				}
			}
			if a := actionOf(err); !strings.Contains(a, tc.actionWant) {
				t.Errorf("action %q, want it to say %q", a, tc.actionWant)
			}
			var ue *kube.UploadError
			if !errors.As(err, &ue) {
				t.Errorf("the server's answer is lost from %v", err)
			}
		})
	}
}
