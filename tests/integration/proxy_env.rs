//! `serve` with Velero's proxy variables in its environment, as README tells users to run it:
//! it starts, reaches the apiserver through HTTPS_PROXY unless NO_PROXY excepts it (then it
//! goes direct), checks storage as before, and no log line carries the proxy's password.

use std::time::Duration;

use serde_json::json;

use crate::support::forward_proxy::ForwardProxy;
use crate::support::sentinel::Sentinel;
use crate::support::storage::SeaweedFs;
use crate::support::{ControlPlane, Crd};

const PASSWORD: &str = "pr0xy-s3cret";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_reaches_the_apiserver_through_https_proxy_unless_no_proxy_says_otherwise() {
    let plane = ControlPlane::get(Crd::Velero);
    let s3 = SeaweedFs::shared();
    s3.create_bucket("proxied").await;
    let proxy = ForwardProxy::start("svc", PASSWORD).await;
    let https_proxy = format!("http://svc:{PASSWORD}@127.0.0.1:{}", proxy.port);
    // The apiserver by a name only the forward proxy resolves (to 127.0.0.1), verified as
    // "localhost", a name its certificate holds.
    let port = plane.server.rsplit(':').next().unwrap_or_default();
    let kubeconfig = plane.kubeconfig_for(
        "kubeconfig-proxied",
        &format!("https://kubernetes.proxied:{port}"),
        "tls-server-name: localhost",
    );

    for (case, no_proxy) in [("via-proxy", ""), ("direct", ".proxied")] {
        let ns = plane.namespace(case);
        let spec = s3
            .location("proxied", None)
            .spec_with_secret(&plane.kubectl(), &ns, "cloud");
        let bsl = json!({"apiVersion": "velero.io/v1", "kind": "BackupStorageLocation", "metadata": {"name": "b"}, "spec": spec});
        assert!(plane.kubectl().apply(&ns, &bsl.to_string()).success);

        let before = proxy.seen().len();
        let mut env = vec![("HTTPS_PROXY", https_proxy.as_str())];
        if !no_proxy.is_empty() {
            env.push(("NO_PROXY", no_proxy));
        }
        let sentinel = Sentinel::start_with(plane, &kubeconfig, &ns, case, &[], &env).await;
        let kubectl = plane.kubectl();
        let phase = || {
            let args = [
                "get",
                "bsl",
                "b",
                "-n",
                &ns,
                "-o",
                "jsonpath={.status.phase}",
            ];
            kubectl.run(&args).stdout
        };
        if no_proxy.is_empty() {
            sentinel
                .wait_for(
                    "the BSL checked via the proxy",
                    Duration::from_secs(30),
                    || phase() == "Available",
                )
                .await;
        } else {
            // Direct, the name only the proxy knows does not resolve: the process keeps
            // running and says it cannot reach the Lease.
            sentinel
                .wait_for("a direct attempt", Duration::from_secs(30), || {
                    sentinel
                        .log_text()
                        .contains("cannot read or renew the Lease")
                })
                .await;
        }
        let tunnels: Vec<String> = proxy.seen()[before..]
            .iter()
            .filter(|line| line.starts_with("CONNECT kubernetes.proxied:"))
            .cloned()
            .collect();
        if no_proxy.is_empty() {
            assert!(
                !tunnels.is_empty(),
                "the apiserver was not reached through the proxy"
            );
        } else {
            assert!(tunnels.is_empty(), "NO_PROXY ignored: {tunnels:?}");
        }
        let log = sentinel.log_text();
        assert!(
            !log.contains(PASSWORD),
            "the proxy password is in the log:\n{log}"
        );
        assert_eq!(sentinel.get("/livez").0, 200, "{case}: still running");
    }
}
