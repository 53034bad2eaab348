package esxisim

import "sync"

// SnapshotEvent is a snapshot command that ran to success on the host.
type SnapshotEvent struct {
	// Op is "create" or "remove".
	Op   string
	VMID int
	// Name is the snapshot's name (create); ID the snapshot id (remove).
	Name string
	ID   string
}

type snapshotLog struct {
	mu     sync.Mutex
	events []SnapshotEvent
}

var snapshotLogs sync.Map // *Server -> *snapshotLog

// SnapshotEvents returns the snapshots taken and removed on the host, in
// order: only commands that ran, not those received and abandoned before
// running (as when the client vanished during a command delay).
func (s *Server) SnapshotEvents() []SnapshotEvent {
	v, ok := snapshotLogs.Load(s)
	if !ok {
		return nil
	}
	l := v.(*snapshotLog)
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]SnapshotEvent(nil), l.events...)
}

func (s *Server) logSnapshot(ev SnapshotEvent) {
	v, _ := snapshotLogs.LoadOrStore(s, &snapshotLog{})
	l := v.(*snapshotLog)
	l.mu.Lock()
	l.events = append(l.events, ev)
	l.mu.Unlock()
}
