package kube

import (
	"context"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"syscall"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/fault"
)

// Class is the shared error classification (see package fault).
type Class = fault.Class

// The classes, as this package's callers have always named them.
const (
	Permanent  = fault.Permanent
	Transient  = fault.Transient
	NeedsHuman = fault.NeedsHuman
)

// ErrNotFound matches, with errors.Is, every error returned by this package
// for an object that does not exist.
var ErrNotFound = errors.New("not found")

// Error is an error from an operation on one Kubernetes object.
type Error struct {
	// Op is the operation: get, create, update, update status, delete.
	Op string
	// Kind, Namespace and Name identify the object.
	Kind, Namespace, Name string
	// Class is the error's classification.
	Class Class
	// Err is the underlying error.
	Err error
}

func (e *Error) Error() string {
	return e.Op + " " + e.Kind + " " + e.Namespace + "/" + e.Name + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrNotFound) true for not-found errors.
func (e *Error) Is(target error) bool {
	return target == ErrNotFound && apierrors.IsNotFound(e.Err) && !meta.IsNoMatchError(e.Err)
}

// IsNotFound reports whether err says the object does not exist (not
// whether its kind is unknown to the cluster: that is NeedsHuman).
func IsNotFound(err error) bool {
	return errors.Is(err, ErrNotFound) || (apierrors.IsNotFound(err) && !meta.IsNoMatchError(err))
}

// IsAlreadyExists reports whether err says the object already exists.
func IsAlreadyExists(err error) bool { return apierrors.IsAlreadyExists(err) }

// IsForbidden reports whether err says the credentials may not do this.
func IsForbidden(err error) bool { return apierrors.IsForbidden(err) }

// IsConflict reports whether err says the object changed since it was read
// (re-read it and try again).
func IsConflict(err error) bool { return apierrors.IsConflict(err) }

// Cause is the error inside an *Error as the API server or the transport
// gave it, without the operation and the object: for messages that name
// the object themselves. Other errors are returned unchanged.
func Cause(err error) error {
	var e *Error
	if errors.As(err, &e) {
		return e.Err
	}
	return err
}

// AsTransient returns err, an *Error, classified Transient: for a caller
// that knows a retry helps whatever the server said (an object that
// vanished between two calls). Other errors are returned unchanged.
func AsTransient(err error) error {
	var e *Error
	if !errors.As(err, &e) {
		return err
	}
	t := *e
	t.Class = Transient
	return &t
}

// Classify says whether err is transient, needs a human, or is permanent.
// nil is Permanent (there is nothing to retry).
func Classify(err error) Class {
	var e *Error
	if errors.As(err, &e) {
		return e.Class
	}
	return classify(err)
}

func classify(err error) Class {
	var cfgErr *ConfigError
	var notOwned *NotOwnedError
	var unknownAuthority x509.UnknownAuthorityError
	var hostnameErr x509.HostnameError
	var certInvalid x509.CertificateInvalidError
	var dnsErr *net.DNSError
	var netErr net.Error
	switch {
	case err == nil:
		return Permanent
	case errors.As(err, &cfgErr), errors.As(err, &notOwned):
		return NeedsHuman
	case meta.IsNoMatchError(err):
		// The kind is not served: KubeVirt or CDI is not installed.
		return NeedsHuman
	case apierrors.IsUnauthorized(err), apierrors.IsForbidden(err):
		return NeedsHuman
	case apierrors.IsConflict(err), apierrors.IsServerTimeout(err), apierrors.IsTimeout(err),
		apierrors.IsTooManyRequests(err), apierrors.IsServiceUnavailable(err),
		apierrors.IsInternalError(err), apierrors.IsUnexpectedServerError(err):
		return Transient
	case statusCode(err) >= 500:
		return Transient
	case statusCode(err) > 0:
		// Invalid, BadRequest, NotFound, AlreadyExists, Gone, ...
		return Permanent
	case errors.As(err, &unknownAuthority), errors.As(err, &hostnameErr), errors.As(err, &certInvalid):
		return NeedsHuman
	case isErrno(err):
		// A local or socket errno, decided in one place: a full or
		// read-only disk needs a human, a reset connection is Transient.
		c, _ := fault.OfErrno(err)
		return c
	case errors.As(err, &dnsErr):
		if dnsErr.IsNotFound {
			return NeedsHuman
		}
		return Transient
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF), errors.Is(err, http.ErrHandlerTimeout),
		errors.Is(err, net.ErrClosed):
		// net.ErrClosed: our end of the connection was closed under the
		// request, as when a port-forward tunnel to the upload proxy ends.
		return Transient
	case errors.As(err, &netErr) && netErr.Timeout():
		return Transient
	}
	return Permanent
}

// isErrno reports an error whose errno fault.OfErrno classifies.
func isErrno(err error) bool {
	_, ok := fault.OfErrno(err)
	return ok
}

// statusCode is the HTTP status of an API error, or 0.
func statusCode(err error) int {
	var s apierrors.APIStatus
	if errors.As(err, &s) {
		return int(s.Status().Code)
	}
	return 0
}
