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
	"os"
	"os/signal"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	apiext "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	kscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	apireg "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	cmscheme "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/scheme"
	"github.com/cert-manager/cert-manager/pkg/controller/cainjector"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	"github.com/cert-manager/cert-manager/pkg/util"

	"bsl-sentinel/tests/peers/cert-manager/internal/peer"
)

func main() {
	flags := peer.NewFlags("cert-manager-cainjector")
	flags.Parse()
	kubeconfig, namespace := flags.Kubeconfig, flags.Namespace

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logf.InitLogs()
	ctrl.SetLogger(logf.Log)
	ctx = logf.NewContext(ctx, logf.Log, "cainjector")
	log := logf.FromContext(ctx)

	restConfig, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		peer.Fail("reading %s: %v", *kubeconfig, err)
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
		peer.Fail("creating the manager: %v", err)
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
		peer.Fail("registering the injectors: %v", err)
	}
	log.Info("cert-manager cainjector starting", "version", peer.ModuleVersion())
	if err := mgr.Start(ctx); err != nil {
		peer.Fail("running the manager: %v", err)
	}
}
