//! Helpers for webhook tests: certificate folders laid out like a mounted Secret, and
//! AdmissionReview bodies like the apiserver sends.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use bsl_sentinel::pki::{Ca, Pem};
use serde_json::{Value, json};

/// A folder laid out as the kubelet mounts a Secret: `tls.crt -> ..data/tls.crt`,
/// `..data -> ..<version>`; an update writes a new version folder and swaps `..data` atomically.
pub struct SecretMount {
    pub dir: PathBuf,
    pub ca: Ca,
    version: usize,
}

impl SecretMount {
    pub fn new(dir: &Path) -> SecretMount {
        std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let ca = Ca::new("webhook CA").unwrap_or_else(|e| panic!("CA: {e}"));
        let mut mount = SecretMount {
            dir: dir.to_path_buf(),
            ca,
            version: 0,
        };
        let pem = mount.issue();
        mount.update(&pem);
        for file in ["tls.crt", "tls.key"] {
            std::os::unix::fs::symlink(format!("..data/{file}"), dir.join(file))
                .unwrap_or_else(|e| panic!("symlink {file}: {e}"));
        }
        mount
    }

    /// A serving certificate for 127.0.0.1 from the mount's CA.
    pub fn issue(&self) -> Pem {
        self.ca
            .issue_server(&["localhost"], &[Ipv4Addr::LOCALHOST.into()])
            .unwrap_or_else(|e| panic!("certificate: {e}"))
    }

    /// What the kubelet does on a Secret update.
    pub fn update(&mut self, pem: &Pem) {
        self.version += 1;
        let version = format!("..v{}", self.version);
        let target = self.dir.join(&version);
        std::fs::create_dir_all(&target).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(target.join("tls.crt"), &pem.cert).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(target.join("tls.key"), &pem.key).unwrap_or_else(|e| panic!("{e}"));
        let tmp = self.dir.join("..data_tmp");
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&version, &tmp).unwrap_or_else(|e| panic!("{e}"));
        std::fs::rename(&tmp, self.dir.join("..data")).unwrap_or_else(|e| panic!("{e}"));
    }

    pub fn cert(&self) -> PathBuf {
        self.dir.join("tls.crt")
    }

    pub fn key(&self) -> PathBuf {
        self.dir.join("tls.key")
    }
}

/// A BackupStorageLocation manifest.
pub fn bsl(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "velero.io/v1",
        "kind": "BackupStorageLocation",
        "metadata": {"name": name, "namespace": "velero"},
        "spec": spec
    })
}

/// An AdmissionReview v1 request as the apiserver sends it.
pub fn review(
    uid: &str,
    operation: &str,
    object: &Value,
    old: Option<&Value>,
    dry_run: bool,
) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "velero.io", "version": "v1", "kind": "BackupStorageLocation"},
            "resource": {"group": "velero.io", "version": "v1", "resource": "backupstoragelocations"},
            "requestKind": {"group": "velero.io", "version": "v1", "kind": "BackupStorageLocation"},
            "requestResource": {"group": "velero.io", "version": "v1", "resource": "backupstoragelocations"},
            "name": object["metadata"]["name"],
            "namespace": "velero",
            "operation": operation,
            "userInfo": {"username": "admin", "groups": ["system:masters", "system:authenticated"]},
            "object": object,
            "oldObject": old,
            "dryRun": dry_run,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}
        }
    })
}
