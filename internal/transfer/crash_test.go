//go:build linux || darwin

package transfer

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
)

const crashChildEnv = "TRANSFER_CRASH_CHILD"

type crashChildArgs struct {
	Cfg   esxi.HostConfig
	Disk  Disk
	Dest  string
	Chunk int64
}

// TestCrashChild is the process killed by TestCopySurvivesKill9. In a
// normal test run (no child arguments) there is nothing to copy, and it
// passes at once.
func TestCrashChild(t *testing.T) {
	raw := os.Getenv(crashChildEnv)
	if raw == "" {
		return
	}
	var a crashChildArgs
	if err := json.Unmarshal([]byte(raw), &a); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, a.Cfg)
	_, err := Copy(context.Background(), c, a.Disk, a.Dest, Options{ChunkSize: a.Chunk})
	t.Fatalf("the child was meant to be killed, but Copy returned: %v", err)
}

// TestCopySurvivesKill9 kills a process running Copy with SIGKILL at
// arbitrary points (twice), then finishes the copy in this process.
func TestCopySurvivesKill9(t *testing.T) {
	for _, m := range readModes {
		t.Run(m.name, func(t *testing.T) { copySurvivesKill9(t, m.python) })
	}
}

func copySurvivesKill9(t *testing.T, python string) {
	env := newSimWith(t, python)
	const size = 40 * mib
	const chunk = 2 * mib
	_, df := env.addDisk(t, "crash", size, append(mixedContent(size), esxisim.Extent{Offset: 22 * mib, Length: 12 * mib, Seed: 77}))
	env.srv.SetCommandDelay(15 * time.Millisecond) // about 20 chunks/s: slow enough to land kills mid-copy
	dest := destIn(t, "disk-0.raw")
	args, _ := json.Marshal(crashChildArgs{Cfg: env.cfg, Disk: diskOf(df), Dest: dest, Chunk: chunk})

	verified := 0
	for _, killAt := range []int{3, 9} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+string(args))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(60 * time.Second)
		for {
			if j, _ := loadJournal(dest); j != nil && j.VerifiedChunks >= killAt {
				break
			}
			if time.Now().After(deadline) {
				cmd.Process.Kill()
				t.Fatal("the child made no progress")
			}
			time.Sleep(2 * time.Millisecond)
		}
		if err := cmd.Process.Kill(); err != nil { // SIGKILL
			t.Fatal(err)
		}
		_ = cmd.Wait()
		j := readJournal(t, dest)
		if j.Complete {
			t.Fatal("the child finished before it was killed")
		}
		if j.VerifiedChunks < verified {
			t.Fatalf("journal went back from %d to %d chunks", verified, j.VerifiedChunks)
		}
		verified = j.VerifiedChunks
	}
	env.srv.SetCommandDelay(0)
	env.srv.ResetStats()
	res, err := Copy(ctxT(t), env.c, diskOf(df), dest, Options{ChunkSize: chunk})
	if err != nil {
		t.Fatal(err)
	}
	if res.SHA256 != df.SHA256() || res.ChunksSkipped < verified || res.ChunksSkipped+res.ChunksCopied != size/chunk {
		t.Errorf("result %+v after kills at %d verified chunks; want sha %s", res, verified, df.SHA256())
	}
	assertNoReadBelow(t, hostReads(env.srv), int64(res.ChunksSkipped)*chunk)
	assertReadMode(t, env.srv, python)
	if !sameBytes(t, dest, df.LocalFlat) {
		t.Error("staging file differs from the source")
	}
}
