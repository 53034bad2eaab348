package record

import (
	"bytes"
	"encoding/json"
	"testing"
)

// recordSample is a record as the engine stores it after importing one
// disk of a powered-off VM.
const recordSample = `{"version":1,"identity":{"host":"esxi-a","vmid":12,"vmName":"web (prod)","vmxPath":"/vmfs/volumes/datastore1/web/web.vmx","namespace":"default","name":"web"},` +
	`"phase":"Imported","attempts":0,"conditions":[{"type":"DiskImported","status":true,"reason":"Imported","message":"1 of 1 disks imported","time":"2026-11-30T12:04:05.123456789Z"}],` +
	`"timestamps":{"created":"2026-11-30T12:00:00Z","discovered":"2026-11-30T12:00:01Z","validated":"2026-11-30T12:00:02Z","sourcePoweredOff":"2026-11-30T12:00:30+01:00","acquired":"2026-11-30T12:02:00Z","converted":"2026-11-30T12:03:00Z","imported":"2026-11-30T12:04:05Z"},` +
	`"powerOff":{"policy":"graceful_then_hard","action":"graceful","decidedAt":"2026-11-30T12:00:03Z","done":true,"doneAt":"2026-11-30T12:00:30Z"},` +
	`"source":{"vmid":12,"name":"web (prod)","vmxPath":"/vmfs/volumes/datastore1/web/web.vmx","guestOS":"rhel9-64","hardwareVersion":20,"firmware":"efi","secureBoot":true,"cpus":4,"memoryMiB":8192,"powerState":"poweredOff","toolsRunning":false,` +
	`"disks":[{"device":"scsi0:0","bus":"scsi","descriptorPath":"/vmfs/volumes/datastore1/web/web.vmdk","dataPath":"/vmfs/volumes/datastore1/web/web-flat.vmdk","capacityBytes":4194304,"thin":true}],` +
	`"nics":[{"device":"ethernet0","network":"VM Network","mac":"00:50:56:aa:bb:cc","adapter":"vmxnet3"}]},` +
	`"preflight":[{"id":"power","severity":"error","passed":true,"message":"powered off","time":"2026-11-30T12:00:02Z"}],` +
	`"disks":[{"index":0,"device":"scsi0:0","sourcePath":"/vmfs/volumes/datastore1/web/web-flat.vmdk","sizeBytes":4194304,"sourceSHA256":"bb9f8df61474d25e71fa00722318cd387396ca1736605e1248821cc0de3d3af8","zeroBytes":1048576,` +
	`"stagedPath":"/var/lib/vmm/web/disk0.raw","acquired":true,"artifactPath":"/var/lib/vmm/web/disk0.qcow2","artifactFormat":"qcow2","artifactSHA256":"5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef","artifactBytes":393216,` +
	`"dataVolume":"web-disk0","dataVolumeUID":"0d4c5a4e-8f0e-4a83-9d2f-3b4c1f0e9a11","dataVolumePhase":"Succeeded","progress":"100.0%","uploaded":true,"imported":true}],` +
	`"errors":[{"time":"2026-11-30T12:01:00Z","phase":"Acquiring","class":"transient","attempt":1,"reason":"ConnectionLost","message":"esxi host esxi-a: dd: the command was interrupted (connection dropped?): retry"}],"errorsDropped":3}`

// FuzzRecordJSON: a record the engine can read, it can write back, and
// writing it is stable: decode(encode(r)) encodes to the same bytes.
func FuzzRecordJSON(f *testing.F) {
	f.Add([]byte(recordSample))
	f.Add([]byte(`{"version":1,"identity":{"host":"h","namespace":"n","name":"x"},"phase":"Retryable","retryPhase":"Acquiring","attempts":3,"reason":"HostUnreachable","message":"m","action":"a","timestamps":{}}`))
	f.Add([]byte(`{"timestamps":{"created":"0000-01-01T00:00:00+23:59"},"conditions":[{"time":"9999-12-31T23:59:59.999999999-23:59"}]}`))
	f.Add([]byte(`{"message":"\ud800 invalid \xff utf-8","disks":[{"sizeBytes":-1}],"errorsDropped":-5}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var r1 Record
		if err := json.Unmarshal(b, &r1); err != nil {
			return
		}
		m1, err := json.Marshal(r1)
		if err != nil {
			t.Fatalf("a record that was read cannot be written back: %v\n%s", err, b)
		}
		var r2 Record
		if err := json.Unmarshal(m1, &r2); err != nil {
			t.Fatalf("the engine's own encoding does not decode: %v\n%s", err, m1)
		}
		m2, err := json.Marshal(r2)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(m1, m2) {
			t.Fatalf("encoding is not stable:\n%s\n%s", m1, m2)
		}
	})
}
