//! The admin port (plain HTTP): liveness, readiness, metrics and the server status. Liveness never depends on
//! BSL state: no BSLs, or all unavailable, must not restart the pod.

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;

use actix_web::{App, HttpResponse, HttpServer, dev::Server, web};
use tokio::sync::watch;

use crate::metrics::Metrics;
use crate::readiness::Readiness;
use crate::status::{self, ServerStatus};

pub struct Admin {
    pub metrics: Arc<Metrics>,
    pub readiness: Readiness,
    pub client: kube::Client,
    /// Where the status is published.
    pub namespace: String,
    /// The status this replica's reconciler holds while it leads (None inside otherwise);
    /// None when the reconciler does not run here.
    pub status: Option<watch::Receiver<Option<ServerStatus>>>,
}

async fn livez() -> HttpResponse {
    HttpResponse::Ok().body("ok")
}

async fn readyz(admin: web::Data<Admin>) -> HttpResponse {
    match admin.readiness.check() {
        Ok(()) => HttpResponse::Ok().body("ok"),
        Err(why) => HttpResponse::ServiceUnavailable().body(why),
    }
}

async fn metrics(admin: web::Data<Admin>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type(crate::metrics::CONTENT_TYPE)
        .body(admin.metrics.render())
}

/// The server status as JSON: this replica's own while it leads, else what the leader
/// published.
async fn server_status(admin: web::Data<Admin>) -> HttpResponse {
    let own = admin
        .status
        .as_ref()
        .and_then(|status| status.borrow().clone());
    let status = match own {
        Some(status) => Ok(status),
        None => status::fetch(admin.client.clone(), &admin.namespace).await,
    };
    match status {
        Ok(status) => HttpResponse::Ok().json(status),
        Err(e) => HttpResponse::ServiceUnavailable().body(e.to_string()),
    }
}

pub fn serve(listener: TcpListener, admin: Admin) -> std::io::Result<(Server, SocketAddr)> {
    let addr = listener.local_addr()?;
    let data = web::Data::new(admin);
    let server = HttpServer::new(move || {
        App::new()
            .app_data(data.clone())
            .route("/livez", web::get().to(livez))
            .route("/readyz", web::get().to(readyz))
            .route("/metrics", web::get().to(metrics))
            .route("/status", web::get().to(server_status))
    })
    .workers(1)
    .disable_signals()
    // Requests in flight get this long to finish on a graceful stop.
    .shutdown_timeout(5)
    .listen(listener)?
    .run();
    Ok((server, addr))
}
