// Command vmmigration-worker is what the pods of cluster execution run.
//
//	vmmigration-worker copy -spec /etc/vmmigration/spec.json [-result /dev/termination-log]
//	vmmigration-worker copy -spec-json '{"host":...}' [-result /dev/termination-log]
//	vmmigration-worker convert -spec-json '{"disks":...}' [-result /dev/termination-log]
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
// convert converts the guest on a VM's disks, each a raw disk.img in a
// claim mounted in the pod, with virt-v2v-in-place (see package
// convertjob): on qcow2 overlays beside the images, committed into them
// only once the conversion succeeded, so that a conversion that fails or
// is killed leaves the copied disks as they were. It prints a JSON line per
// stage, then the result (the converted images' SHA-256s and virt-v2v's
// evidence), writes the result as copy does and exits with copy's codes.
//
// SIGTERM and SIGINT stop either at once, with an interrupted result; a
// worker run again on the same spec goes on from what the claims record
// (copy's journal, convert's state) and answers from it once done.
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

	"github.com/vmmigration/terraform-provider-vmmigration/internal/convertjob"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/copyjob"
)

// version is set by the image build with -ldflags "-X main.version=...".
var version = "dev"

const usage = "usage: vmmigration-worker copy (-spec FILE | -spec-json JSON) [-result FILE]\n" +
	"       vmmigration-worker convert -spec-json JSON [-result FILE]\n" +
	"       vmmigration-worker version"

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
	if len(args) > 0 {
		switch args[0] {
		case "copy":
			return runCopy(args[1:], stdout, stderr)
		case "convert":
			return runConvert(args[1:], stdout, stderr)
		}
	}
	fmt.Fprintln(stderr, usage)
	return copyjob.ExitUsage
}

// signalContext is stopped by SIGTERM (eviction, pod deletion) and SIGINT.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
}

func runCopy(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("copy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	specPath := fs.String("spec", "", "the file holding the copy's spec (JSON)")
	specJSON := fs.String("spec-json", "", "the copy's spec itself (JSON)")
	resultPath := fs.String("result", "", "where the result goes when the spec names no result_path, or cannot be read")
	if err := fs.Parse(args); err != nil {
		return copyjob.ExitUsage
	}
	if (*specPath == "") == (*specJSON == "") || fs.NArg() > 0 {
		fmt.Fprintln(stderr, usage)
		return copyjob.ExitUsage
	}
	// SIGTERM stops the copy at once; what landed stays in the journal.
	ctx, stop := signalContext()
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

func runConvert(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("convert", flag.ContinueOnError)
	fs.SetOutput(stderr)
	specJSON := fs.String("spec-json", "", "the conversion's spec (JSON)")
	resultPath := fs.String("result", "", "where the result goes when the spec names no result_path, or cannot be read")
	if err := fs.Parse(args); err != nil {
		return copyjob.ExitUsage
	}
	if *specJSON == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, usage)
		return copyjob.ExitUsage
	}
	// SIGTERM kills virt-v2v or qemu-img at once: the images are as they
	// were, or the commit recorded in the claims is made again next time.
	ctx, stop := signalContext()
	defer stop()

	var res convertjob.Result
	spec, err := convertjob.ParseSpec([]byte(*specJSON), "-spec-json")
	if err != nil {
		res = convertjob.SpecFailed(err)
		convertjob.PrintResult(stdout, res)
	} else {
		res = convertjob.Run(ctx, spec, stdout)
		if spec.ResultPath != "" {
			*resultPath = spec.ResultPath
		}
	}
	if !res.OK {
		fmt.Fprintln(stderr, "vmmigration-worker:", res.Class+":", res.Reason+":", res.Error)
	}
	if *resultPath != "" {
		if err := convertjob.WriteResult(*resultPath, res); err != nil {
			fmt.Fprintln(stderr, "vmmigration-worker:", err)
			if res.OK {
				return copyjob.ExitTransient // converted and recorded; the next run answers from the state
			}
		}
	}
	return res.ExitCode()
}
