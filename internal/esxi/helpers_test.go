package esxi

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

func mustTime(t testing.TB, iso string) time.Time {
	t.Helper()
	tm, err := time.Parse(time.RFC3339, iso)
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

func mustTimeP(iso string) time.Time {
	tm, err := time.Parse(time.RFC3339, iso)
	if err != nil {
		panic(err)
	}
	return tm
}

// createdISO converts snapshot.get's "2/23/2015 18:12:50" to RFC 3339.
func createdISO(s string) string {
	tm, err := time.Parse("1/2/2006 15:4:5", s)
	if err != nil {
		panic(err)
	}
	return tm.Format(time.RFC3339)
}

// allCommandsForTest returns one of every command kind.
func allCommandsForTest(t testing.TB) []Command {
	t.Helper()
	var out []Command
	must := func(c Command, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	out = append(out, GetAllVMs(), VMwareVersion(), DatastoreListSummary())
	for _, f := range []func(int) (Command, error){PowerGetState, PowerShutdown, PowerOff, PowerOn, GetGuest, GetSummary, SnapshotGet} {
		must(f(12))
	}
	must(SnapshotCreateCommand(12, "vmmigration it's && rm -rf /", "$(reboot)"))
	must(SnapshotRemoveCommand(12, 3))
	must(Cat("/vmfs/volumes/ds1/vm/vm.vmx", InventoryXMLPath))
	must(StatSize("/vmfs/volumes/ds1/vm/vm-flat.vmdk"))
	must(DD("/vmfs/volumes/ds1/vm/vm-flat.vmdk", 1<<20, 3, 4))
	return out
}

// testKeyPEM returns a PEM private key of the given kind.
func testKeyPEM(t testing.TB, kind string) string {
	t.Helper()
	var key any
	var err error
	switch kind {
	case "rsa":
		key, err = rsa.GenerateKey(rand.Reader, 2048)
	case "ecdsa":
		key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case "ed25519":
		_, key, err = ed25519.GenerateKey(rand.Reader)
	}
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
}

func testSigner(t testing.TB, kind string) ssh.Signer {
	t.Helper()
	s, err := ssh.ParsePrivateKey([]byte(testKeyPEM(t, kind)))
	if err != nil {
		t.Fatal(err)
	}
	return s
}
