// cert-manager-cainjector for tests: cert-manager's CA injector (pkg/controller/cainjector of
// github.com/cert-manager/cert-manager), wired the way cert-manager's cmd/cainjector does it,
// run outside a cluster with --kubeconfig. It fills caBundle of webhook configurations, CRDs and
// APIServices annotated cert-manager.io/inject-ca-from (a Certificate) or
// cert-manager.io/inject-ca-from-secret.
//
// Why not cert-manager's own main: cmd/cainjector is a separate module
// (github.com/cert-manager/cert-manager/cainjector-binary) that the Go module proxy cannot
// serve; see ../controller/main.go.
//
// No leader election, no metrics server.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	apiext "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	kscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	apireg "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	cmscheme "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/scheme"
	"github.com/cert-manager/cert-manager/pkg/controller/cainjector"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	"github.com/cert-manager/cert-manager/pkg/util"
)

func main() {
	fs := flag.NewFlagSet("cert-manager-cainjector", flag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the apiserver to manage (required)")
	namespace := fs.String("namespace", "", "only watch this namespace (default: all)")
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
	ctrl.SetLogger(logf.Log)
	ctx = logf.NewContext(ctx, logf.Log, "cainjector")
	log := logf.FromContext(ctx)

	restConfig, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fail("reading %s: %v", *kubeconfig, err)
	}
	restConfig = util.RestConfigWithUserAgent(restConfig, "cainjector")

	var namespaces map[string]cache.Config
	if *namespace != "" {
		namespaces = map[string]cache.Config{*namespace: {}}
	}
	scheme := runtime.NewScheme()
	utilruntime.Must(kscheme.AddToScheme(scheme))
	utilruntime.Must(cmscheme.AddToScheme(scheme))
	utilruntime.Must(apiext.AddToScheme(scheme))
	utilruntime.Must(apireg.AddToScheme(scheme))

	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme: scheme,
		Cache: cache.Options{
			ReaderFailOnMissingInformer: true,
			DefaultNamespaces:           namespaces,
		},
		// As cert-manager does: Secrets are read directly, only their metadata is watched.
		Client: client.Options{
			Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}},
		},
		LeaderElection:         false,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		fail("creating the manager: %v", err)
	}

	err = cainjector.RegisterAllInjectors(ctx, mgr, cainjector.SetupOptions{
		Namespace:                    *namespace,
		EnableCertificatesDataSource: true,
		EnabledReconcilersFor: map[string]bool{
			cainjector.MutatingWebhookConfigurationName:   true,
			cainjector.ValidatingWebhookConfigurationName: true,
			cainjector.APIServiceName:                     true,
			cainjector.CustomResourceDefinitionName:       true,
		},
	})
	if err != nil {
		fail("registering the injectors: %v", err)
	}
	log.Info("cert-manager cainjector starting", "version", moduleVersion())
	if err := mgr.Start(ctx); err != nil {
		fail("running the manager: %v", err)
	}
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "error: "+format+"\n", args...)
	os.Exit(1)
}
