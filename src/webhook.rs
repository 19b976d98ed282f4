//! The admission webhook's HTTP edge: actix-web over rustls. It decodes AdmissionReview v1,
//! calls the pure decisions in admission.rs and encodes the answer; nothing here decides.

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;

use actix_web::{App, HttpResponse, HttpServer, dev::Server, web};
use kube::core::admission::AdmissionResponse;

use crate::admission::{self, ClusterView};
use crate::readiness::Readiness;
use crate::review::{Request, decode};
use crate::served_crd::SharedServedCrd;
use crate::tls::ReloadingCert;

/// Largest body accepted. An AdmissionReview carries the object and the old object; a
/// Kubernetes object is at most 1.5 MiB.
pub const MAX_BODY: usize = 4 * 1024 * 1024;

pub struct State {
    pub served: SharedServedCrd,
    pub readiness: Readiness,
    pub cluster: Box<dyn ClusterView + Send + Sync>,
}

impl State {
    pub fn new(cluster: impl ClusterView + Send + Sync + 'static) -> Arc<Self> {
        let served = SharedServedCrd::default();
        Arc::new(State {
            readiness: Readiness::new(served.clone()),
            served,
            cluster: Box::new(cluster),
        })
    }
}

fn respond(body: &[u8], decide: impl FnOnce(&Request) -> AdmissionResponse) -> HttpResponse {
    match decode(body) {
        Ok(request) => {
            // Every log line of the decision names the BSL and the review it answers. Debug,
            // not info: nothing logs inside a review at info, and an enabled span is built
            // (its fields formatted) on every review: 6% of a review's instructions.
            let span = tracing::debug_span!(
                "admission",
                namespace = request.namespace.as_deref().unwrap_or_default(),
                name = %request.name,
                uid = %request.uid,
                operation = ?request.operation,
            );
            let response = span.in_scope(|| {
                let response = decide(&request);
                tracing::debug!(
                    allowed = response.allowed,
                    warnings = response.warnings.as_ref().map_or(0, Vec::len),
                    patched = response.patch.is_some(),
                    "review answered"
                );
                response
            });
            HttpResponse::Ok().json(response.into_review())
        }
        Err(message) => HttpResponse::BadRequest()
            .content_type("text/plain")
            .body(message),
    }
}

async fn validate(state: web::Data<State>, body: web::Bytes) -> HttpResponse {
    respond(&body, |req| {
        admission::validate(req, state.cluster.as_ref())
    })
}

async fn mutate(state: web::Data<State>, body: web::Bytes) -> HttpResponse {
    // Until the CRD was read, assume Velero's stock CRD: the stamp it gets is valid on both.
    let served = state.served.load().unwrap_or_default();
    respond(&body, |req| admission::mutate(req, served))
}

async fn healthz() -> HttpResponse {
    HttpResponse::Ok().body("ok")
}

async fn readyz(state: web::Data<State>) -> HttpResponse {
    match state.readiness.check() {
        Ok(()) => HttpResponse::Ok().body("ok"),
        Err(why) => HttpResponse::ServiceUnavailable().body(why),
    }
}

fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/validate", web::post().to(validate))
        .route("/mutate", web::post().to(mutate))
        .route("/healthz", web::get().to(healthz))
        .route("/readyz", web::get().to(readyz));
}

/// The webhook's HTTP stack: actix-web over TLS on an already bound listener, with the body
/// limit and the worker and shutdown settings, serving what `configure` registers. `serve`
/// registers the webhook; the benches register canned answers, to measure the stack alone.
pub fn server(
    listener: TcpListener,
    tls: rustls::ServerConfig,
    workers: usize,
    configure: impl Fn(&mut web::ServiceConfig) + Clone + Send + 'static,
) -> std::io::Result<Server> {
    let app = move || {
        App::new()
            .app_data(web::PayloadConfig::new(MAX_BODY))
            .configure(configure.clone())
    };
    Ok(HttpServer::new(app)
        .workers(workers)
        .disable_signals()
        // Requests in flight get this long to finish on a graceful stop.
        .shutdown_timeout(5)
        .listen_rustls_0_23(listener, tls)?
        .run())
}

/// Serves the webhook over TLS on an already bound listener (port 0 in tests).
pub fn serve(
    listener: TcpListener,
    cert: &Arc<ReloadingCert>,
    state: Arc<State>,
    workers: usize,
) -> std::io::Result<(Server, SocketAddr)> {
    let addr = listener.local_addr()?;
    let tls = cert.server_config().map_err(std::io::Error::other)?;
    let data = web::Data::from(state);
    let configure = move |cfg: &mut web::ServiceConfig| {
        cfg.app_data(data.clone());
        routes(cfg);
    };
    Ok((server(listener, tls, workers, configure)?, addr))
}
