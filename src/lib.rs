//! bsl-sentinel: an admission webhook and a reconciler for Velero BackupStorageLocations.

pub mod bsl;
pub mod crd;
pub mod duration;
pub mod pki;
pub mod rules;
