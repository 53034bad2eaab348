package childproc

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// Demand is how much CPU a process group has wanted since it started: the
// time its threads ran plus the time they waited runnable on a run queue
// (/proc/<pid>/task/<tid>/schedstat), summed over every live process in
// the group. A helper VM that works has demand growing at close to one
// second per second per busy thread however busy the machine is (what it
// does not get to run it waits for on a run queue); a hung one that sleeps
// has demand that stands still. Threads and processes that have exited no
// longer count, so Demand can go down; callers compare successive values.
//
// It reads /proc and returns 0 where /proc or schedstat is not there.
func (p *Process) Demand() time.Duration {
	if p == nil || p.Exited() {
		return 0
	}
	return groupDemand(p.pid)
}

// CPUTime is the time the process group's live threads have run on a CPU
// (the first schedstat field), without run-queue waits.
func (p *Process) CPUTime() time.Duration {
	if p == nil || p.Exited() {
		return 0
	}
	var total time.Duration
	forGroupThreads(p.pid, func(run, _ time.Duration) { total += run })
	return total
}

func groupDemand(pgid int) time.Duration {
	var total time.Duration
	forGroupThreads(pgid, func(run, wait time.Duration) { total += run + wait })
	return total
}

// forGroupThreads calls fn with each thread's run and wait times, for every
// process whose process group is pgid.
func forGroupThreads(pgid int, fn func(run, wait time.Duration)) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		if pid != pgid && processGroup(pid) != pgid {
			continue
		}
		tasks, err := os.ReadDir(filepath.Join("/proc", e.Name(), "task"))
		if err != nil {
			continue
		}
		for _, t := range tasks {
			b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "task", t.Name(), "schedstat"))
			if err != nil {
				continue
			}
			if run, wait, ok := parseSchedstat(b); ok {
				fn(run, wait)
			}
		}
	}
}

// parseSchedstat reads "run-ns wait-ns timeslices".
func parseSchedstat(b []byte) (run, wait time.Duration, ok bool) {
	f := bytes.Fields(b)
	if len(f) < 2 {
		return 0, 0, false
	}
	r, err1 := strconv.ParseInt(string(f[0]), 10, 64)
	w, err2 := strconv.ParseInt(string(f[1]), 10, 64)
	if err1 != nil || err2 != nil || r < 0 || w < 0 {
		return 0, 0, false
	}
	return time.Duration(r), time.Duration(w), true
}

// processGroup is field 5 of /proc/<pid>/stat, after the parenthesised
// command name (which may itself hold spaces and parentheses); -1 when
// unreadable.
func processGroup(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return -1
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return -1
	}
	f := bytes.Fields(b[i+1:]) // state ppid pgrp ...
	if len(f) < 3 {
		return -1
	}
	g, err := strconv.Atoi(string(f[2]))
	if err != nil {
		return -1
	}
	return g
}
