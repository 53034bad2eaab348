package engine

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/fault"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/preflight"
)

// The power-off guard as a table: every recorded decision and observed
// state, and the act it leads to. A recorded decision is never re-made.
func TestDecidePowerOff(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	done := &record.PowerOff{Policy: PolicyGraceful, Action: record.PowerActionGraceful, Done: true}
	doneSeen := &record.PowerOff{Policy: PolicyGraceful, Action: record.PowerActionGraceful, Done: true, SeenOnAgain: true}
	graceful := &record.PowerOff{Policy: PolicyGraceful, Action: record.PowerActionGraceful}
	hardAfter := &record.PowerOff{Policy: PolicyGracefulThenHard, Action: record.PowerActionHard, HardAfterGraceful: true}
	hard := &record.PowerOff{Policy: PolicyHard, Action: record.PowerActionHard}
	for _, tc := range []struct {
		name      string
		prior     *record.PowerOff
		state     esxi.PowerState
		policy    string
		askedUser bool
		act       powerAct
		decided   string // Action of a new decision, "" for none
	}{
		{"done and off", done, esxi.PoweredOff, PolicyHard, false, powerNothing, ""},
		{"done but on again", done, esxi.PoweredOn, PolicyHard, false, powerOnAgain, ""},
		{"done, seen on, off again", doneSeen, esxi.PoweredOff, PolicyGraceful, false, powerRecopy, ""},
		{"done, suspended now", done, esxi.Suspended, PolicyGraceful, false, powerOnAgain, ""},
		{"suspended", nil, esxi.Suspended, PolicyHard, false, powerSuspended, ""},
		{"already off", nil, esxi.PoweredOff, PolicyGraceful, false, powerObservedOff, record.PowerActionAlreadyOff},
		{"off after asking the user", nil, esxi.PoweredOff, PolicyManual, true, powerObservedOff, record.PowerActionUser},
		{"manual and on", nil, esxi.PoweredOn, PolicyManual, false, powerAskUser, ""},
		{"hard and on", nil, esxi.PoweredOn, PolicyHard, false, powerHard, record.PowerActionHard},
		{"graceful and on", nil, esxi.PoweredOn, PolicyGraceful, false, powerGraceful, record.PowerActionGraceful},
		{"graceful_then_hard and on", nil, esxi.PoweredOn, PolicyGracefulThenHard, false, powerGraceful, record.PowerActionGraceful},
		{"decided graceful, still on: carried out, not re-decided", graceful, esxi.PoweredOn, PolicyHard, false, powerGraceful, ""},
		{"decided graceful, off now", graceful, esxi.PoweredOff, PolicyGraceful, false, powerObservedOff, ""},
		{"graceful timed out, hard recorded", hardAfter, esxi.PoweredOn, PolicyGracefulThenHard, false, powerHard, ""},
		{"decided hard, policy changed to manual since", hard, esxi.PoweredOn, PolicyManual, false, powerHard, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := decidePowerOff(tc.prior, tc.state, tc.policy, tc.askedUser, now)
			if d.act != tc.act {
				t.Errorf("act = %d, want %d", d.act, tc.act)
			}
			switch {
			case tc.decided == "" && d.decide != nil:
				t.Errorf("a new decision %+v was made; the recorded one must be carried out", *d.decide)
			case tc.decided != "" && d.decide == nil:
				t.Errorf("no decision recorded, want %s", tc.decided)
			case tc.decided != "" && (d.decide.Action != tc.decided || d.decide.Policy != tc.policy || !d.decide.DecidedAt.Equal(now)):
				t.Errorf("decision = %+v, want action %s under policy %s at %s", *d.decide, tc.decided, tc.policy, now)
			}
		})
	}
}

// PickVM is the one way a configuration names a VM: system VMs are never
// picked, and every error names the attribute to fix.
func TestPickVM(t *testing.T) {
	vms := []esxi.VM{
		{VMID: 1, Name: "web"},
		{VMID: 2, Name: "db"},
		{VMID: 3, Name: "db"},
		{VMID: 6, Name: "vCLS-1", System: true, VMXPath: "/var/run/crx/infra/vCLS-1/vCLS-1.vmx"},
		{VMID: 7, Name: "Web "},
	}
	for _, tc := range []struct {
		name   string
		vmName string
		vmid   int
		want   int
		field  string
		inMsg  string
	}{
		{"by name", "web", 0, 1, "", ""},
		{"by vmid", "", 2, 2, "", ""},
		{"vmid and matching name", "db", 3, 3, "", ""},
		{"vmid and other name", "web", 2, 0, FieldSourceVMID, `vmid 2 on ESXi host "esxi-a" is named "db", not "web"`},
		{"ambiguous name", "db", 0, 0, FieldSourceVMName, `2 VMs on ESXi host "esxi-a" are named "db": vmids 2 (), 3 (). Set vmid instead of the name to choose one`},
		{"missing name, near misses listed", "WEB", 0, 0, FieldSourceVMName, `ESXi host "esxi-a" has no VM named "WEB". Names differ only in case or spaces: "web" (vmid 1), "Web " (vmid 7). Names are matched exactly`},
		{"missing vmid", "", 99, 0, FieldSourceVMID, "no VM with vmid 99"},
		{"system VM by name", "vCLS-1", 0, 0, FieldSourceVMName, `no VM named "vCLS-1"`},
		{"system VM by vmid", "", 6, 0, FieldSourceVMID, "system VM"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vm, err := PickVM(vms, "esxi-a", tc.vmName, tc.vmid)
			if tc.field == "" {
				if err != nil || vm.VMID != tc.want {
					t.Fatalf("PickVM = vmid %d, %v; want vmid %d", vm.VMID, err, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("PickVM = vmid %d, want an error", vm.VMID)
			}
			if FieldOf(err) != tc.field || !strings.Contains(err.Error(), tc.inMsg) {
				t.Errorf("error = %q on %q; want %q on %q", err, FieldOf(err), tc.inMsg, tc.field)
			}
			if strings.Contains(err.Error(), "vm_id") {
				t.Errorf("error names vm_id, which is not an attribute: %q", err)
			}
		})
	}
}

// Spec.Validate ties every problem to its attribute, and the transport
// rules are the same for configuration checks and the engine.
func TestValidateFields(t *testing.T) {
	s := Spec{Host: "h", VMName: "v", Namespace: "ns", Name: "n", StorageClass: "sc", WorkDir: "/w",
		Transport:  Transport{Kind: TransportCDIUpload, UploadProxyURL: "https://proxy"},
		NetworkMap: map[string]string{"VM Network": "pod"}}.WithDefaults()
	if err := s.Validate(); err != nil {
		t.Fatalf("valid spec: %v", err)
	}
	bad := s
	bad.StorageClass, bad.DiskBus, bad.Transport = "", "ide", Transport{}
	bad.NetworkMap = map[string]string{"VM Network": "Not_A_Name"}
	got := map[string]bool{}
	for _, p := range FieldProblems(bad.Validate()) {
		got[p.Field] = true
	}
	for _, f := range []string{FieldStorageClass, FieldDiskBus, FieldTransport, FieldNetworkMap} {
		if !got[f] {
			t.Errorf("no problem on %s; got %v", f, got)
		}
	}
	for _, tc := range []struct {
		proxy, dir, url string
		kind, field     string
	}{
		{"https://p", "", "", TransportCDIUpload, ""},
		{"", "/srv", "http://h/x", TransportHTTP, ""},
		{"https://p", "/srv", "", "", FieldTransport},
		{"", "/srv", "", TransportHTTP, FieldHTTPStagingURL},
		{"", "relative", "http://h", TransportHTTP, FieldHTTPStagingDir},
		{"", "", "", TransportCDIUpload, ""}, // the URL the cluster publishes
		{"not a url", "", "", TransportCDIUpload, FieldUploadProxyURL},
	} {
		tr, err := TransportOf(tc.proxy, "", false, tc.dir, tc.url)
		if tr.Kind != tc.kind || FieldOf(firstOf(err)) != tc.field {
			t.Errorf("TransportOf(%q, %q, %q) = kind %q, error %v on %q; want kind %q, error on %q",
				tc.proxy, tc.dir, tc.url, tr.Kind, err, FieldOf(firstOf(err)), tc.kind, tc.field)
		}
	}
	for v, ok := range map[string]bool{"pod": true, "net-a": true, "ns/net-a": true, "Ns/x": false, "a/b/c": false, "": false} {
		if err := ValidateNetwork(v); (err == nil) != ok {
			t.Errorf("ValidateNetwork(%q) = %v, want ok=%v", v, err, ok)
		}
	}
}

func firstOf(err error) error {
	if j, ok := err.(interface{ Unwrap() []error }); ok && len(j.Unwrap()) > 0 {
		return j.Unwrap()[0]
	}
	return err
}

// A failed pre-flight check points at the attribute a user changes to fix
// it.
func TestCheckField(t *testing.T) {
	for id, want := range map[string]string{
		preflight.CheckNICsMapped: FieldNetworkMap, preflight.CheckStorageClass: FieldStorageClass,
		preflight.CheckQuota: FieldStorageClass, preflight.CheckPowerPolicy: FieldPowerOffPolicy,
		preflight.CheckNamespace: FieldNamespace, preflight.CheckDestinationName: FieldName,
		preflight.CheckDestinationFree: FieldName, preflight.CheckGuestOS: FieldSource,
		preflight.CheckInventory: FieldSource, preflight.CheckDisks: FieldSource,
		preflight.CheckSourceUnclaimed: FieldSource, preflight.CheckWorkDirSpace: "",
	} {
		if got := CheckField(id); got != want {
			t.Errorf("CheckField(%s) = %q, want %q", id, got, want)
		}
	}
}

// A local file system error is classified by what it is: a full disk needs
// a human and says what to do; a dropped connection is retried.
func TestClassifyLocalErrors(t *testing.T) {
	full := &os.PathError{Op: "write", Path: "/w/disk-0.raw", Err: syscall.ENOSPC}
	if c, reason := classify(full); c != fault.NeedsHuman || reason != "LocalError" || actionOf(full) == "" {
		t.Errorf("ENOSPC = %v %q, action %q; want needs-human with advice", c, reason, actionOf(full))
	}
	reset := &os.SyscallError{Syscall: "read", Err: syscall.ECONNRESET}
	if c, _ := classify(reset); c != fault.Transient {
		t.Errorf("ECONNRESET = %v, want transient", c)
	}
	if a := actionOf(needsHuman("X", "m", "do this", full)); a != "do this" {
		t.Errorf("a step's own action = %q, want it kept", a)
	}
}

// Downtime runs from the source powered off to the migrated VM started.
func TestDowntime(t *testing.T) {
	off := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	started := off.Add(42 * time.Second)
	for _, tc := range []struct {
		name       string
		off, start *time.Time
		want       time.Duration
	}{
		{"both", &off, &started, 42 * time.Second},
		{"not started yet", &off, nil, 0},
		{"never powered off", nil, &started, 0},
		{"clock went backwards", &started, &off, 0},
	} {
		r := record.Record{Timestamps: record.Timestamps{SourcePoweredOff: tc.off, VMStarted: tc.start}}
		if got := r.Downtime(); got != tc.want {
			t.Errorf("%s: Downtime = %s, want %s", tc.name, got, tc.want)
		}
	}
}
