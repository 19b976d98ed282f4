// Package peer holds what the two test builds of cert-manager share: their common flags, the
// version of the cert-manager module built in, and how they fail.
package peer

import (
	"flag"
	"fmt"
	"os"
	"runtime/debug"

	"k8s.io/klog/v2"
)

// Flags are the flags both binaries take; a binary adds its own to FS before Parse.
type Flags struct {
	FS          *flag.FlagSet
	Kubeconfig  *string
	Namespace   *string
	leaderElect *bool
	version     *bool
}

func NewFlags(name string) *Flags {
	fs := flag.NewFlagSet(name, flag.ExitOnError)
	f := &Flags{
		FS:          fs,
		Kubeconfig:  fs.String("kubeconfig", "", "kubeconfig of the apiserver to manage (required)"),
		Namespace:   fs.String("namespace", "", "only watch this namespace (default: all)"),
		leaderElect: fs.Bool("leader-elect", false, "accepted for familiarity; only false is supported"),
		version:     fs.Bool("version", false, "print the cert-manager module version and exit"),
	}
	klogFlags := flag.NewFlagSet("klog", flag.ExitOnError)
	klog.InitFlags(klogFlags)
	fs.Var(klogFlags.Lookup("v").Value, "v", "log verbosity")
	return f
}

// Parse reads the command line; --version prints and exits, and what this build cannot do
// fails.
func (f *Flags) Parse() {
	_ = f.FS.Parse(os.Args[1:])
	if *f.version {
		fmt.Println(ModuleVersion())
		os.Exit(0)
	}
	if *f.Kubeconfig == "" {
		Fail("--kubeconfig is required")
	}
	if *f.leaderElect {
		Fail("--leader-elect=true is not supported by this build")
	}
}

// ModuleVersion is the version of github.com/cert-manager/cert-manager built in.
func ModuleVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == "github.com/cert-manager/cert-manager" {
				return dep.Version
			}
		}
	}
	return "unknown"
}

func Fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "error: "+format+"\n", args...)
	os.Exit(1)
}
