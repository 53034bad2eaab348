//go:build !linux && !darwin && !freebsd

package preflight

import "errors"

func statfsAvail(string) (int64, error) {
	return 0, errors.New("free space cannot be read on this platform")
}
