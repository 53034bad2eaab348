package record

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

// The history keeps its first entry and the latest ones, each short.
func TestErrorHistoryBounded(t *testing.T) {
	var r Record
	long := strings.Repeat("é", 40<<10) // 80 KiB of two-byte runes
	for i := range 50 {
		r.AddError(ErrorEntry{Attempt: i, Message: fmt.Sprintf("%d:%s", i, long)})
	}
	if len(r.Errors) != MaxErrorEntries || r.ErrorsDropped != 50-MaxErrorEntries {
		t.Fatalf("len = %d, dropped = %d", len(r.Errors), r.ErrorsDropped)
	}
	if r.Errors[0].Attempt != 0 || r.Errors[1].Attempt != 50-MaxErrorEntries+1 || r.Errors[MaxErrorEntries-1].Attempt != 49 {
		t.Errorf("kept attempts %d, %d ... %d", r.Errors[0].Attempt, r.Errors[1].Attempt, r.Errors[MaxErrorEntries-1].Attempt)
	}
	for _, e := range r.Errors {
		if len(e.Message) > MaxErrorMessageBytes || !utf8.ValidString(e.Message) || !strings.HasSuffix(e.Message, fmt.Sprintf("(%d bytes in all)", len(long)+len(fmt.Sprint(e.Attempt))+1)) {
			t.Fatalf("message of %d bytes: ...%q", len(e.Message), e.Message[max(0, len(e.Message)-40):])
		}
	}
	if got := TruncateMessage("short", 10); got != "short" {
		t.Errorf("short message changed: %q", got)
	}
}
