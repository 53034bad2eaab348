package engine

import "time"

// stamp sets *p to now unless it is set already.
func stamp(p **time.Time, now time.Time) {
	if *p == nil {
		t := now
		*p = &t
	}
}
