//! Readiness, as both /readyz endpoints (the webhook's and the admin port's) report it: ready
//! once the served CRD was read (until then the webhook's stamp is only a guess), and not
//! ready from the moment the process is asked to stop, so the Service stops sending reviews
//! while they are still served.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::served_crd::SharedServedCrd;

#[derive(Clone, Default)]
pub struct Readiness {
    served: SharedServedCrd,
    stopping: Arc<AtomicBool>,
}

impl Readiness {
    pub fn new(served: SharedServedCrd) -> Readiness {
        Readiness {
            served,
            stopping: Arc::default(),
        }
    }

    /// From now on, not ready.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
    }

    /// Ok when ready, else why not; each server's /readyz answers 503 with the reason.
    pub fn check(&self) -> Result<(), &'static str> {
        if self.stopping.load(Ordering::SeqCst) {
            return Err("stopping");
        }
        match self.served.load().as_ref() {
            Some(_) => Ok(()),
            None => Err("the BSL CRD has not been read yet"),
        }
    }
}
