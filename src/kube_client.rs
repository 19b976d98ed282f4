//! The apiserver client of every command: the kubeconfig, else the in-cluster config, reaching
//! the apiserver through a proxy exactly where the storage checks would ([`crate::proxy`]:
//! HTTPS_PROXY unless NO_PROXY or a loopback address excepts it, as client-go does). A proxy
//! named by the kubeconfig's `proxy-url` is kept.

use kube::Config;

use crate::proxy::Proxies;

/// A client for the configured cluster.
pub async fn connect(proxies: &Proxies) -> anyhow::Result<kube::Client> {
    let mut config = Config::infer().await?;
    let from_env = ["HTTPS_PROXY", "https_proxy"]
        .iter()
        .find_map(|name| std::env::var(name).ok().filter(|v| !v.trim().is_empty()));
    config.proxy_url = choose(
        &config.cluster_url,
        config.proxy_url.take(),
        from_env.as_deref(),
        proxies,
    )?;
    Ok(kube::Client::try_from(config)?)
}

/// The proxy to the apiserver at `cluster`: the kubeconfig's own (`configured`, unless it is
/// only the environment's HTTPS_PROXY as kube-rs read it), else what `proxies` decide.
fn choose(
    cluster: &http::Uri,
    configured: Option<http::Uri>,
    env_https_proxy: Option<&str>,
    proxies: &Proxies,
) -> anyhow::Result<Option<http::Uri>> {
    let from_kubeconfig = configured.filter(|uri| {
        env_https_proxy.is_none_or(|env| {
            uri.to_string().trim_end_matches('/') != env.trim().trim_end_matches('/')
        })
    });
    if from_kubeconfig.is_some() {
        return Ok(from_kubeconfig);
    }
    match proxies.for_uri(cluster) {
        // The URL carries credentials: the error must not.
        Some(proxy) => match proxy.url_with_credentials().parse() {
            Ok(uri) => Ok(Some(uri)),
            Err(_) => {
                anyhow::bail!("the proxy {proxy} is not a valid URL for the apiserver client")
            }
        },
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uri(text: &str) -> http::Uri {
        text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    fn proxies(vars: &[(&str, &str)]) -> Proxies {
        Proxies::from_vars(|name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        })
        .0
    }

    #[test]
    fn the_apiserver_goes_through_https_proxy_unless_excepted() {
        let env = [("HTTPS_PROXY", "http://user:p%40ss@proxy.corp:3128")];
        let via = |cluster: &str, extra: &[(&str, &str)]| {
            let vars: Vec<(&str, &str)> = env.iter().chain(extra).copied().collect();
            choose(&uri(cluster), None, Some(env[0].1), &proxies(&vars))
                .unwrap_or_else(|e| panic!("{e}"))
                .map(|u| u.to_string())
        };
        assert_eq!(
            via("https://10.96.0.1:443", &[]).as_deref(),
            Some("http://user:p%40ss@proxy.corp:3128/")
        );
        assert_eq!(
            via("https://10.96.0.1:443", &[("NO_PROXY", "10.96.0.0/12")]),
            None
        );
        assert_eq!(
            via("https://kubernetes.default.svc", &[("NO_PROXY", ".svc")]),
            None
        );
        assert_eq!(
            via("https://127.0.0.1:6443", &[]),
            None,
            "loopback is direct"
        );
    }

    #[test]
    fn the_kubeconfigs_own_proxy_url_is_kept() {
        let own = uri("http://kubeconfig-proxy:8080");
        assert_eq!(
            choose(
                &uri("https://10.0.0.1"),
                Some(own.clone()),
                Some("http://env-proxy:3128"),
                &proxies(&[("HTTPS_PROXY", "http://env-proxy:3128")])
            )
            .ok()
            .flatten(),
            Some(own)
        );
        // What kube-rs read from the environment is decided here instead.
        assert_eq!(
            choose(
                &uri("https://127.0.0.1:6443"),
                Some(uri("http://env-proxy:3128")),
                Some("http://env-proxy:3128"),
                &proxies(&[("HTTPS_PROXY", "http://env-proxy:3128")])
            )
            .ok()
            .flatten(),
            None
        );
    }
}
