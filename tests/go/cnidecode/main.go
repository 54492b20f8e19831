// Command cnidecode prints what the reference CNI plugins read from a config, decoded the way
// they decode it (Go's encoding/json into their own structs): the test tier's proof that the
// delegate policy judges what the plugins will read (SEC-KEYS, SEC-DELEGATE).
//
//	cnidecode            one config (a .conf or a conflist) on stdin, its reading on stdout:
//	                     {"plugins": [reading, ...]}, one reading per plugin the config runs
//	cnidecode -batch     one config per stdin line, one reading per stdout line, in order; a
//	                     line that is not a JSON object gives {"error": "..."}
//	cnidecode -drift DIR compare plugins.go with the plugins module's source in DIR
//	cnidecode -modules   the versions of the cni and plugins modules built in
//	cnidecode -addr      addresses and CIDRs as the plugins parse them, one a line (oracle.go)
//	cnidecode -links     interface names as netlink resolves them here, one a line (oracle.go)
//
// decode.go says what a reading holds.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
)

func main() {
	batch := flag.Bool("batch", false, "one config per input line, one reading per output line")
	drift := flag.String("drift", "", "the plugins module's directory: compare the declared structs with its source")
	modules := flag.Bool("modules", false, "print the CNI module versions built in")
	addr := flag.Bool("addr", false, "one address query per input line, one answer per output line")
	links := flag.Bool("links", false, "one link-name query per input line, resolved in this network namespace")
	flag.Parse()
	switch {
	case *drift != "":
		os.Exit(runDrift(*drift))
	case *modules:
		os.Exit(printModules())
	case *addr:
		os.Exit(runLines(os.Stdin, os.Stdout, readAddr))
	case *links:
		os.Exit(runLines(os.Stdin, os.Stdout, readLink))
	case *batch:
		os.Exit(runBatch(os.Stdin, os.Stdout))
	default:
		os.Exit(runOne(os.Stdin, os.Stdout))
	}
}

func runOne(in io.Reader, out io.Writer) int {
	data, err := io.ReadAll(in)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cnidecode:", err)
		return 2
	}
	r, err := decodeConfig(data)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cnidecode:", err)
		return 1
	}
	encoder := json.NewEncoder(out)
	encoder.SetIndent("", "  ")
	if err := encoder.Encode(r); err != nil {
		fmt.Fprintln(os.Stderr, "cnidecode:", err)
		return 2
	}
	return 0
}

func runBatch(in io.Reader, out io.Writer) int {
	return runLines(in, out, func(line []byte) reading {
		r, err := decodeConfig(line)
		if err != nil {
			return reading{"error": err.Error()}
		}
		return r
	})
}

func printModules() int {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		fmt.Fprintln(os.Stderr, "cnidecode: no build information")
		return 2
	}
	versions := map[string]string{"go": info.GoVersion}
	for _, dep := range info.Deps {
		if strings.HasPrefix(dep.Path, "github.com/containernetworking/") {
			versions[dep.Path] = dep.Version
		}
	}
	encoder := json.NewEncoder(os.Stdout)
	if err := encoder.Encode(versions); err != nil {
		return 2
	}
	return 0
}
