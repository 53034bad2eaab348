package kube

import (
	"context"
	"fmt"
	"reflect"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Owner says whom an object belongs to, and whether that is the caller.
type Owner func(obj client.Object) (owner string, ours bool)

// LabelOwner is the Owner of a migration's objects: those whose
// LabelMigration is migration. The owner named is that label's value.
func LabelOwner(migration string) Owner {
	return func(obj client.Object) (string, bool) {
		v := obj.GetLabels()[LabelMigration]
		return v, v == migration
	}
}

// NotOwnedError says an object EnsureOwned was to create exists and is not
// the caller's.
type NotOwnedError struct {
	Kind, Namespace, Name string
	// Owner is whom the object says it belongs to ("" when nobody).
	Owner string
	// Object is the object found.
	Object client.Object
	// Create is the create's own error: AlreadyExists, or the transient
	// error of a create whose reply was lost.
	Create error
}

func (e *NotOwnedError) Error() string {
	owner := "nobody"
	if e.Owner != "" {
		owner = fmt.Sprintf("%q", e.Owner)
	}
	return fmt.Sprintf("%s %s/%s exists and is not ours: it belongs to %s", e.Kind, e.Namespace, e.Name, owner)
}

// ensureAttempts bounds the creates of EnsureOwned when the object it
// finds in the way is deleted before it can be read.
const ensureAttempts = 3

// EnsureOwned makes obj exist as the caller's, the way controller-runtime's
// CreateOrUpdate makes an object exist, except that it never overwrites
// one that belongs to someone else. It creates obj with create (the typed
// Create call of obj's kind, or an apply that creates). When the object
// already exists, or the create's reply was lost (a transient error once
// the request was sent: the server may have applied it), it reads the
// object back and asks owner whose it is:
//   - created by this call: obj, updated with what the server stored, and
//     created true;
//   - found and ours: the object found, created false;
//   - found and not ours: a *NotOwnedError naming its owner.
//
// When the object cannot be read back, the error returned is the read's
// after AlreadyExists, and the create's after a lost reply. An object in
// the way that is deleted before it can be read is created again, a few
// times at most.
func EnsureOwned[T client.Object](ctx context.Context, c *Client, obj T, create func(context.Context, T) error, owner Owner) (T, bool, error) {
	var zero T
	kind := kindOf(obj)
	for attempt := 1; ; attempt++ {
		cerr := create(ctx, obj)
		if cerr == nil {
			return obj, true, nil
		}
		exists := IsAlreadyExists(cerr)
		if !exists && Classify(cerr) != Transient {
			return zero, false, cerr
		}
		cur := reflect.New(reflect.TypeOf(obj).Elem()).Interface().(T)
		gerr := c.get(ctx, kind, obj.GetNamespace(), obj.GetName(), cur)
		switch {
		case gerr == nil:
			who, ours := owner(cur)
			if ours {
				return cur, false, nil
			}
			return zero, false, &NotOwnedError{Kind: kind, Namespace: obj.GetNamespace(), Name: obj.GetName(), Owner: who, Object: cur, Create: cerr}
		case !exists:
			return zero, false, cerr
		case IsNotFound(gerr) && attempt < ensureAttempts:
			continue
		}
		return zero, false, gerr
	}
}

// kindOf is the Kind of one of this package's objects.
func kindOf(obj client.Object) string {
	if gvks, _, err := scheme.ObjectKinds(obj); err == nil && len(gvks) > 0 {
		return gvks[0].Kind
	}
	return reflect.TypeOf(obj).Elem().Name()
}
