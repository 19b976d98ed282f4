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
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

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

	"bsl-sentinel/tests/peers/cert-manager/internal/peer"
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
	flags := peer.NewFlags("cert-manager-controller")
	clusterResourceNamespace := flags.FS.String("cluster-resource-namespace", "kube-system",
		"namespace holding the Secrets of ClusterIssuers")
	controllers := flags.FS.String("controllers", strings.Join(defaultControllers, ","),
		"comma-separated controllers to run")
	flags.Parse()
	kubeconfig, namespace := flags.Kubeconfig, flags.Namespace

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
		peer.Fail("building the controller context: %v", err)
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
			peer.Fail("unknown controller %q", name)
		}
		iface, err := construct(factory)
		if err != nil {
			peer.Fail("starting controller %s: %v", name, err)
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
		peer.Fail("building the controller context: %v", err)
	}
	base.KubeSharedInformerFactory.Start(ctx.Done())
	base.SharedInformerFactory.Start(ctx.Done())
	base.HTTP01ResourceMetadataInformersFactory.Start(ctx.Done())
	log.Info("cert-manager controllers started", "version", peer.ModuleVersion())
	wg.Wait()
	logf.FlushLogs()
}
