// cert-manager-controller for tests: the certificate controllers of cert-manager's own library
// packages (github.com/cert-manager/cert-manager, pkg/controller/...), wired the way
// cert-manager's cmd/controller does it, run outside a cluster with --kubeconfig.
//
// Why not cert-manager's own main: its cmd/controller is a separate module
// (github.com/cert-manager/cert-manager/controller-binary) whose path is not a folder of the
// repository, so the Go module proxy cannot serve it (404), and the main module's zip leaves
// cmd/ out. The controllers themselves, the issuers and the CRDs are all in the main module.
//
// No leader election, no metrics or health servers, no webhook: one process per test
// apiserver. Only the controllers a CA/self-signed PKI needs run (see -controllers).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	controllerpkg "github.com/cert-manager/cert-manager/pkg/controller"
	logf "github.com/cert-manager/cert-manager/pkg/logs"

	// Each of these registers its controller (or issuer backend) in init().
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	_ "github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	_ "github.com/cert-manager/cert-manager/pkg/controller/issuers"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
)

// The controllers run by default: everything needed to issue and renew Certificates from
// SelfSigned and CA Issuers (and ClusterIssuers).
var defaultControllers = []string{
	"issuers",
	"clusterissuers",
	"certificates-trigger",
	"certificates-key-manager",
	"certificates-request-manager",
	"certificates-issuing",
	"certificates-readiness",
	"certificates-revision-manager",
	"certificaterequests-approver",
	"certificaterequests-issuer-selfsigned",
	"certificaterequests-issuer-ca",
}

func main() {
	fs := flag.NewFlagSet("cert-manager-controller", flag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the apiserver to manage (required)")
	namespace := fs.String("namespace", "", "only watch this namespace (default: all)")
	clusterResourceNamespace := fs.String("cluster-resource-namespace", "kube-system",
		"namespace holding the Secrets of ClusterIssuers")
	controllers := fs.String("controllers", strings.Join(defaultControllers, ","),
		"comma-separated controllers to run")
	leaderElect := fs.Bool("leader-elect", false, "accepted for familiarity; only false is supported")
	version := fs.Bool("version", false, "print the cert-manager module version and exit")
	klogFlags := flag.NewFlagSet("klog", flag.ExitOnError)
	klog.InitFlags(klogFlags)
	fs.Var(klogFlags.Lookup("v").Value, "v", "log verbosity")
	_ = fs.Parse(os.Args[1:])

	if *version {
		fmt.Println(moduleVersion())
		return
	}
	if *kubeconfig == "" {
		fail("--kubeconfig is required")
	}
	if *leaderElect {
		fail("--leader-elect=true is not supported by this build")
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logf.InitLogs()
	ctx = logf.NewContext(ctx, logf.Log, "controller")
	log := logf.FromContext(ctx)

	opts := controllerpkg.ContextOptions{
		Kubeconfig:         *kubeconfig,
		KubernetesAPIQPS:   20,
		KubernetesAPIBurst: 50,
		Namespace:          *namespace,
		IssuerOptions: controllerpkg.IssuerOptions{
			ClusterResourceNamespace:        *clusterResourceNamespace,
			ClusterIssuerAmbientCredentials: true,
		},
		CertificateOptions: controllerpkg.CertificateOptions{
			CopiedAnnotationPrefixes:                 []string{"*", "-kubectl.kubernetes.io/", "-fluxcd.io/", "-argocd.argoproj.io/"},
			CertificateRequestMinimumBackoffDuration: time.Hour,
			CertificateRequestMaximumBackoffDuration: 32 * time.Hour,
		},
		SchedulerOptions: controllerpkg.SchedulerOptions{MaxConcurrentChallenges: 60},
	}
	factory, err := controllerpkg.NewContextFactory(ctx, opts)
	if err != nil {
		fail("building the controller context: %v", err)
	}

	var wg sync.WaitGroup
	known := controllerpkg.Known()
	for _, name := range strings.Split(*controllers, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		if *namespace != "" && name == "clusterissuers" {
			continue // cluster-scoped, as in cert-manager
		}
		construct, ok := known[name]
		if !ok {
			fail("unknown controller %q", name)
		}
		iface, err := construct(factory)
		if err != nil {
			fail("starting controller %s: %v", name, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			log.Info("starting controller", "controller", name)
			if err := iface.Run(5, ctx); err != nil {
				log.Error(err, "controller failed", "controller", name)
				os.Exit(1)
			}
		}()
	}

	// The informers are shared: every Context built by the factory holds the same ones, and
	// the controllers registered theirs above. Start them now.
	base, err := factory.Build()
	if err != nil {
		fail("building the controller context: %v", err)
	}
	base.KubeSharedInformerFactory.Start(ctx.Done())
	base.SharedInformerFactory.Start(ctx.Done())
	base.HTTP01ResourceMetadataInformersFactory.Start(ctx.Done())
	log.Info("cert-manager controllers started", "version", moduleVersion())
	wg.Wait()
	logf.FlushLogs()
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "error: "+format+"\n", args...)
	os.Exit(1)
}
