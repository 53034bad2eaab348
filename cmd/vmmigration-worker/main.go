// Command vmmigration-worker is what the pods of cluster execution run.
//
//	vmmigration-worker copy -spec /etc/vmmigration/spec.json [-result /dev/termination-log]
//	vmmigration-worker copy -spec-json '{"host":...}' [-result /dev/termination-log]
//	vmmigration-worker version
//
// copy copies one ESXi disk into a claim as the spec says (see package
// copyjob; a copy Job passes it inline with -spec-json, as it holds no
// secret): progress and the result as JSON lines on stdout, the result
// (under 4096 bytes) in the spec's result_path (else -result), and an exit
// code per fault class: 0 done, 10 permanent, 11 transient, 12 needs a
// person, 13 interrupted by a signal, 64 wrong command line. The ESXi
// credential is read from the file the spec names, never from the
// environment or the command line.
//
// version prints the version the binary was built as (the provider's
// version, set with -ldflags "-X main.version=..." by `make image`), so a
// pod's logs and an image's contents can be matched to a release.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/copyjob"
)

// version is set by the image build with -ldflags "-X main.version=...".
var version = "dev"

const usage = "usage: vmmigration-worker copy (-spec FILE | -spec-json JSON) [-result FILE]\n       vmmigration-worker version"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 1 {
		switch args[0] {
		case "version":
			fmt.Fprintln(stdout, "vmmigration-worker", version)
			return 0
		case "help", "-h", "-help", "--help":
			fmt.Fprintln(stdout, usage)
			return 0
		}
	}
	if len(args) == 0 || args[0] != "copy" {
		fmt.Fprintln(stderr, usage)
		return copyjob.ExitUsage
	}
	fs := flag.NewFlagSet("copy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	specPath := fs.String("spec", "", "the file holding the copy's spec (JSON)")
	specJSON := fs.String("spec-json", "", "the copy's spec itself (JSON)")
	resultPath := fs.String("result", "", "where the result goes when the spec names no result_path, or cannot be read")
	if err := fs.Parse(args[1:]); err != nil {
		return copyjob.ExitUsage
	}
	if (*specPath == "") == (*specJSON == "") || fs.NArg() > 0 {
		fmt.Fprintln(stderr, usage)
		return copyjob.ExitUsage
	}
	// SIGTERM (eviction, pod deletion) stops the copy at once; what
	// landed stays in the journal.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()

	var res copyjob.Result
	var spec copyjob.Spec
	var err error
	if *specPath != "" {
		spec, err = copyjob.LoadSpec(*specPath)
	} else {
		spec, err = copyjob.ParseSpec([]byte(*specJSON), "-spec-json")
	}
	if err != nil {
		res = copyjob.Failed(ctx, err, "")
		copyjob.PrintResult(stdout, res)
	} else {
		res = copyjob.Run(ctx, spec, stdout)
		if spec.ResultPath != "" {
			*resultPath = spec.ResultPath
		}
	}
	if !res.OK {
		fmt.Fprintln(stderr, "vmmigration-worker:", res.Class+":", res.Error)
	}
	if *resultPath != "" {
		if err := copyjob.WriteResult(*resultPath, res); err != nil {
			fmt.Fprintln(stderr, "vmmigration-worker:", err)
			if res.OK {
				return copyjob.ExitTransient // the copy is done; the next run answers from its journal
			}
		}
	}
	return res.ExitCode()
}
