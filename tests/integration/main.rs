//! Integration tests against a real kube-apiserver and etcd (one test binary, so the control
//! planes are shared by all tests; each test works in its own namespace).

mod apiserver_faults;
mod cel_policy;
mod cli;
mod crd_compat;
mod deploy;
mod diagnose;
mod election;
mod endpoint_faults;
mod helm;
mod monitoring;
mod probe;
mod proxy_env;
mod reconciler;
mod support;
mod velero;
mod webhook_e2e;
mod webhook_http;
