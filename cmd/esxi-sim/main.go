// Command esxi-sim runs the ESXi simulator (internal/esxisim) standalone: an
// SSH server that behaves like an ESXi host, serving a datastore tree from a
// local directory.
//
//	esxi-sim --listen 127.0.0.1:2222 --root /tmp/esxi --password secret --demo
package main

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"golang.org/x/crypto/ssh"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "esxi-sim:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fl := flag.NewFlagSet("esxi-sim", flag.ContinueOnError)
	listen := fl.String("listen", "127.0.0.1:2222", "address to listen on")
	root := fl.String("root", "", "directory served as /vmfs/volumes (required)")
	user := fl.String("user", "root", "login name")
	password := fl.String("password", "", "password for keyboard-interactive logins")
	passwordFile := fl.String("password-file", "", "file holding the password (first line)")
	authKeys := fl.String("authorized-keys", "", "authorized_keys file for public-key logins")
	hostKeyFile := fl.String("host-key", "", "host private key file (PEM/OpenSSH); an ECDSA key is generated and written if missing")
	fips := fl.Bool("fips", false, "behave like ESXi 8 in FIPS mode")
	demo := fl.Bool("demo", false, "populate --root with demo VMs and register them")
	python := fl.String("python", esxisim.HostPython(), "local Python 3 run as the host's /bin/python (ESXi 7 and 8), for the provider's zero-skipping reader; \"none\" for a host without Python (ESXi 6.x)")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if *root == "" {
		return errors.New("--root is required")
	}
	if err := os.MkdirAll(*root, 0o755); err != nil {
		return err
	}
	pw := *password
	if *passwordFile != "" {
		b, err := os.ReadFile(*passwordFile)
		if err != nil {
			return fmt.Errorf("reading --password-file: %w", err)
		}
		pw, _, _ = strings.Cut(string(b), "\n")
		pw = strings.TrimSuffix(pw, "\r")
	}
	u := esxisim.User{Name: *user, Password: pw}
	if *authKeys != "" {
		keys, err := readAuthorizedKeys(*authKeys)
		if err != nil {
			return err
		}
		u.AuthorizedKeys = keys
	}
	if u.Password == "" && len(u.AuthorizedKeys) == 0 {
		return errors.New("set --password, --password-file or --authorized-keys")
	}
	hostKey, err := loadHostKey(*hostKeyFile)
	if err != nil {
		return err
	}
	s, err := esxisim.New(esxisim.Options{Root: *root, Users: []esxisim.User{u}, HostKey: hostKey, FIPS: *fips})
	if err != nil {
		return err
	}
	defer s.Close()
	if *python != "none" {
		s.SetPython(*python)
	}
	if *demo {
		if err := populateDemo(s); err != nil {
			return err
		}
	} else if _, err := s.RegisterAll(); err != nil {
		return err
	}
	if err := s.Start(*listen); err != nil {
		return err
	}
	fmt.Printf("esxi-sim listening on %s\nhost key %s %s\n", s.Addr(), s.HostKey().Type(), s.Fingerprint())
	for _, vm := range s.VMs() {
		fmt.Printf("  vmid %d  %-11s %s\n", vm.Vmid, vm.Power, vm.VMXPath)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	<-sig
	fmt.Println("esxi-sim: shutting down")
	return nil
}

func readAuthorizedKeys(name string) ([]ssh.PublicKey, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("reading --authorized-keys: %w", err)
	}
	var keys []ssh.PublicKey
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line))
		if err != nil {
			return nil, fmt.Errorf("parsing --authorized-keys: %w", err)
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// loadHostKey reads the host key, generating and writing an ECDSA P-256 key
// (valid in FIPS mode too) when the file does not exist.
func loadHostKey(name string) (ssh.Signer, error) {
	if name == "" {
		return esxisim.GenerateHostKey(esxisim.KeyECDSA)
	}
	b, err := os.ReadFile(name)
	if err == nil {
		k, err := ssh.ParsePrivateKey(b)
		if err != nil {
			return nil, fmt.Errorf("parsing --host-key: %w", err)
		}
		return k, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	blk, err := ssh.MarshalPrivateKey(key, "esxi-sim host key")
	if err != nil {
		return nil, err
	}
	raw := pem.EncodeToMemory(blk)
	if err := os.WriteFile(name, raw, 0o600); err != nil {
		return nil, fmt.Errorf("writing --host-key: %w", err)
	}
	return ssh.ParsePrivateKey(raw)
}

// populateDemo writes the demo VMs under Root and registers them.
func populateDemo(s *esxisim.Server) error {
	for _, spec := range esxisim.DemoVMs() {
		if _, _, err := s.AddVM(spec); err != nil {
			return fmt.Errorf("demo VM %s: %w", spec.Name, err)
		}
	}
	return nil
}
