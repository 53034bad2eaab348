package engine

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
)

// UploadRequest is one image to send to a DataVolume whose source is
// "upload".
type UploadRequest struct {
	Namespace, DataVolume string
	// Path is the local image; Size its length.
	Path string
	Size int64
	// Body, when set, is sent instead of the file at Path (a staging file
	// read as its copy verifies it); Seek to the start sends it again.
	Body io.ReadSeeker
	// ProxyURL, CAPEM and Insecure reach CDI's upload proxy.
	ProxyURL string
	CAPEM    string
	Insecure bool
	// Progress, if set, receives the bytes sent so far.
	Progress func(sent int64)
}

// Uploader sends images to CDI. It returns once the destination has
// received and validated the image.
type Uploader interface {
	Upload(ctx context.Context, req UploadRequest) error
}

// NewCDIUploader returns the Uploader that asks the cluster for an upload
// token (kube.Client.RequestUploadToken) and streams the file through CDI's
// upload proxy (kube.Upload), as `virtctl image-upload` does.
func NewCDIUploader(c *kube.Client) Uploader { return cdiUploader{c: c} }

type cdiUploader struct{ c *kube.Client }

func (u cdiUploader) Upload(ctx context.Context, req UploadRequest) error {
	token, err := u.c.RequestUploadToken(ctx, req.Namespace, req.DataVolume)
	if err != nil {
		return err
	}
	body := req.Body
	if body == nil {
		f, err := os.Open(req.Path)
		if err != nil {
			return permanent("ArtifactMissing", fmt.Sprintf("cannot open the image %s to upload", req.Path), "", err)
		}
		defer f.Close()
		body = f
	}
	return kube.Upload(ctx, kube.UploadOptions{
		ProxyURL: req.ProxyURL, CACertPEM: []byte(req.CAPEM), InsecureSkipVerify: req.Insecure,
		Token: token, Body: body, Size: req.Size, Progress: req.Progress,
		Namespace: req.Namespace, Name: req.DataVolume,
	})
}
