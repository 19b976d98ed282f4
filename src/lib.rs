//! bsl-sentinel: an admission webhook and a reconciler for Velero BackupStorageLocations.

#![forbid(unsafe_code)]

pub mod admin;
pub mod admission;
pub mod bsl;
pub mod cluster_view;
pub mod crd;
pub mod diagnose;
pub mod duration;
pub mod health;
pub mod kube_client;
pub mod leader;
pub mod lint;
pub mod listing;
pub mod metrics;
pub mod provider;
pub mod proxy;
pub mod readiness;
pub mod reconciler;
pub mod retry;
pub mod review;
pub mod rules;
pub mod serve;
pub mod served_crd;
pub mod status;
pub mod storage;
pub mod tls;
pub mod webhook;
