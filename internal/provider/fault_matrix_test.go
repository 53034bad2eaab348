package provider_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/acctest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
)

// faultCase is one row of the fault matrix: a fault injected during a first
// `terraform apply`, after which at most one further apply must complete
// the migration with nothing lost or done twice.
type faultCase struct {
	name string
	// killAt SIGKILLs Terraform and the provider once the record reaches
	// this phase (or, with killOnCommand, once the host ran a command
	// containing it); "" lets the first apply run to its end.
	killAt        record.Phase
	killOnCommand string
	// inject arms a fault before the first apply; heal, if set, runs once
	// the first apply has ended (or been killed).
	inject func(e *migrationEnv)
	heal   func(e *migrationEnv)
	// during runs beside the first apply (a host that reboots).
	during func(e *migrationEnv)
	// slow makes every host command slow, so that a kill lands inside a
	// host-reading phase.
	slow time.Duration
}

// TestAccFaultMatrix is the fault model of the design, with real
// processes: the real terraform and provider binaries killed with SIGKILL
// at each phase boundary and inside each long phase, connections dropped
// once and continuously, replies lost after the host did the work, and a
// host that refuses connections for a while (a reboot). Each row asserts,
// after at most one further apply: Completed, no duplicate object, exactly
// one power-off command, at most one chunk read twice, and the
// destination's SHA-256 equal to the source's. The matrix is printed.
func TestAccFaultMatrix(t *testing.T) {
	acctest.PreCheck(t)
	cases := []faultCase{
		{name: "SIGKILL at Discovering", killAt: record.PhaseDiscovering, slow: 150 * time.Millisecond},
		{name: "SIGKILL at Validated", killAt: record.PhaseValidated, slow: 150 * time.Millisecond},
		{name: "SIGKILL in the power-off window", killOnCommand: "power.shutdown"},
		{name: "SIGKILL mid-copy", killOnCommand: "dd 'if=", slow: 300 * time.Millisecond},
		{name: "SIGKILL at Converting", killAt: record.PhaseConverting},
		{name: "SIGKILL during the upload (Importing)", killAt: record.PhaseImporting},
		{name: "SIGKILL at CreatingVM", killAt: record.PhaseCreatingVM},
		{name: "SIGKILL at Starting", killAt: record.PhaseStarting},
		{name: "connection dropped once mid-copy", inject: func(e *migrationEnv) { e.host.DropAfterBytes(3 * mib) }},
		// Four reads in a row lose their answer after the host read the
		// disk, then the link is healthy again.
		{name: "connection dropped on every read for a while",
			inject: func(e *migrationEnv) { e.host.DropAfterRunning("dd if=", 4) },
			heal:   func(e *migrationEnv) { e.host.ClearFaults() }},
		{name: "power-off reply lost", inject: func(e *migrationEnv) { e.host.DropAfterRunning("power.shutdown", 1) }},
		{name: "host refuses connections for a while (reboot)", slow: 100 * time.Millisecond, during: func(e *migrationEnv) {
			waitCommand(e, "dd 'if=", 2*time.Minute)
			addr := e.host.Addr()
			e.host.StopListening()
			time.Sleep(2 * time.Second)
			if err := e.host.Start(addr); err != nil {
				panic(fmt.Sprintf("restarting the simulated host on %s: %v", addr, err))
			}
		}},
		// The destination cluster goes away for longer than the run's
		// 45 s lease: the run must stop rather than go on without it.
		{name: "kube-apiserver down longer than the lease", slow: 100 * time.Millisecond, during: func(e *migrationEnv) {
			waitCommand(e, "dd 'if=", 2*time.Minute)
			e.cluster.StopAPIServer()
			time.Sleep(50 * time.Second)
			if err := e.cluster.StartAPIServer(context.Background()); err != nil {
				panic(fmt.Sprintf("restarting the kube-apiserver: %v", err))
			}
		}},
	}
	var rows []string
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rows = append(rows, runFaultCase(t, c))
		})
	}
	t.Logf("fault matrix:\n%-48s | %-9s | %-7s | %-9s | %-9s | %-10s | %s\n%s\n%s",
		"fault", "applies", "phase", "power-off", "DV / VM", "reread MiB", "sha256",
		strings.Repeat("-", 120), strings.Join(rows, "\n"))
}

// waitCommand waits until the host has run a command containing s.
func waitCommand(e *migrationEnv, s string, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for e.count(s) == 0 {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

func runFaultCase(t *testing.T, c faultCase) string {
	e := newMigrationEnv(t)
	const size = 192 * mib // three 64 MiB chunks
	_, files := e.host.AddVM(t, esxisim.VMSpec{Name: "fm", GuestOS: "rhel9-64",
		Disks: []esxisim.DiskSpec{{CapacityBytes: size, Content: []esxisim.Extent{
			{Offset: 0, Length: 4 * mib, Seed: 11}, {Offset: 70 * mib, Length: 4 * mib, Seed: 12}, {Offset: size - mib, Length: mib, Seed: 13},
		}}},
		NICs:  []esxisim.NICSpec{{Network: "VM Network", MAC: "00:50:56:00:02:01"}},
		Power: esxisim.PoweredOn, Tools: esxisim.ToolsRunning})
	flat := files.Disks[0].Flat
	w := acctest.NewWorkdir(t, acctest.BinaryConfig(e.providerBlock())+
		e.migrationWithRetries("fm", "fm", `{ "VM Network" = "pod" }`, 5, "  power_off_policy = \"graceful\"\n  shutdown_timeout = \"10s\""))
	if c.inject != nil {
		c.inject(e)
	}
	e.host.SetCommandDelay(c.slow)

	cmd, out := startApply(t, w)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	duringDone := make(chan struct{})
	go func() {
		defer close(duringDone)
		if c.during != nil {
			c.during(e)
		}
	}()
	applies := 1
	var firstErr error
	switch {
	case c.killAt != "" || c.killOnCommand != "":
		reached := func() bool {
			if c.killOnCommand != "" {
				return e.count(c.killOnCommand) > 0
			}
			if !e.cluster.HasRecord(t, e.namespace, "fm") {
				return false
			}
			phase := e.cluster.Record(t, e.namespace, "fm").Record.Phase
			order := engine.Phases()
			return slices.Index(order, phase) >= slices.Index(order, c.killAt)
		}
		firstErr = killApplyWhen(t, cmd, exited, out, reached)
		if rec := e.cluster.Record(t, e.namespace, "fm").Record; rec.Phase == record.PhaseCompleted {
			t.Fatalf("the migration completed before the kill; the row proves nothing")
		}
		// The killed run's lease would expire after its 45 s; pass that
		// time at once (the waiting itself is tested elsewhere).
		e.cluster.ExpireLease(t, e.namespace, "fm")
	default:
		firstErr = <-exited
	}
	<-duringDone // the fault has run its course (the host or cluster is back)
	e.host.SetCommandDelay(0)
	if c.heal != nil {
		c.heal(e)
	}
	if firstErr != nil {
		applies++
		r := w.Run(context.Background(), nil, "apply", "-auto-approve", "-input=false")
		if r.Err != nil {
			t.Fatalf("the apply after the fault: %v\n%s\n%s\nfirst apply:\n%s", r.Err, r.Stdout, r.Stderr, out.String())
		}
	}

	// Completed, with the source's bytes at the destination.
	rec := e.cluster.Record(t, e.namespace, "fm").Record
	if rec.Phase != record.PhaseCompleted {
		t.Errorf("phase %s, want Completed", rec.Phase)
	}
	got, ok := e.sim.ReceivedSHA256(e.namespace, "fm-disk-0")
	sha := "equal"
	if !ok || got != files.Disks[0].SHA256() {
		sha = "DIFFERENT"
		t.Errorf("destination holds %q, want the source's SHA-256 %s", got, files.Disks[0].SHA256())
	}
	// Exactly one power-off command ran on the host, whatever was lost on
	// the way. (A command received but abandoned before it ran, because
	// the client was killed while the host was slow, is sent again: the
	// host never acted on it.)
	powerOffs := int(e.host.Stats().PowerCommands)
	if powerOffs != 1 {
		t.Errorf("%d power-off commands ran on the host (%d received), want exactly one", powerOffs, e.count("power.shutdown")+e.count("power.off"))
	}
	dvs, vms := e.ours(t, "fm")
	if len(dvs) != 1 || len(vms) != 1 {
		t.Errorf("DataVolumes %v, VMs %v: want exactly one of each", dvs, vms)
	}
	// At most the chunks in flight (one 64 MiB chunk per stream) read twice.
	seen := map[int64]int{}
	var reread int64
	for _, rg := range ddReads(e.host.Commands(), flat) {
		if rg[1]-rg[0] <= 512 {
			continue // the readability probe
		}
		for o := rg[0]; o < rg[1]; o += mib {
			seen[o]++
			if seen[o] == 2 {
				reread += mib
			}
		}
	}
	if reread > 2*64*mib {
		t.Errorf("%d MiB read twice, more than one 64 MiB chunk for each of the 2 streams per disk", reread/mib)
	}
	return fmt.Sprintf("%-48s | %-9d | %-7s | %-9d | %d / %-5d | %-10d | %s", c.name, applies, shortPhase(rec.Phase), powerOffs, len(dvs), len(vms), reread/mib, sha)
}

func shortPhase(p record.Phase) string {
	if p == record.PhaseCompleted {
		return "done"
	}
	return string(p)
}
