//! The REST API of SPEC §9 under `/api/`, its OpenAPI 3.1 document at `/openapi.json`
//! (derived from the handlers' annotations and the wire types in [`dto`]), and the access
//! check around all of it.

pub mod auth;
pub mod auto;
pub mod dto;
pub mod error;
pub mod events;
pub mod github;
pub mod runs;
pub mod schema;

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::Shared;

/// The document's frame: title, version, the bearer-token scheme every route needs unless it
/// says otherwise.
#[derive(OpenApi)]
#[openapi(
    info(title = "loopwright daemon", description = "Runs, answers and live events of one workspace (SPEC §9)."),
    modifiers(&BearerToken),
    security(("bearer" = []))
)]
struct ApiDoc;

struct BearerToken;

impl utoipa::Modify for BearerToken {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The API's routes and its OpenAPI document.
pub fn router() -> (Router<Arc<Shared>>, utoipa::openapi::OpenApi) {
    let (router, mut doc) = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(runs::health))
        .routes(routes!(runs::pipelines))
        .routes(routes!(runs::start, runs::list))
        .routes(routes!(runs::get))
        .routes(routes!(events::run_events))
        .routes(routes!(events::all_events))
        .routes(routes!(events::run_output))
        .routes(routes!(runs::attempts))
        .routes(routes!(runs::approve))
        .routes(routes!(runs::reject))
        .routes(routes!(runs::respond))
        .routes(routes!(runs::cancel))
        .routes(routes!(runs::resume))
        .routes(routes!(runs::rerun))
        .routes(routes!(runs::dead_letters))
        .routes(routes!(runs::dead_letter))
        .routes(routes!(runs::stats))
        .routes(routes!(runs::spend))
        .routes(routes!(runs::agents))
        .routes(routes!(runs::workers))
        .routes(routes!(runs::patterns_test))
        .routes(routes!(auto::start, auto::get, auto::stop))
        .routes(routes!(auto::list))
        .routes(routes!(auto::lookup))
        .routes(routes!(auto::screen))
        .routes(routes!(auto::log))
        .routes(routes!(auto::report))
        .routes(routes!(auto::notices))
        .routes(routes!(auto::keys))
        .routes(routes!(auto::approve_checks))
        .routes(routes!(github::webhook))
        .split_for_parts();
    doc.info.version = env!("CARGO_PKG_VERSION").into();
    refusals(&mut doc);
    (router.layer(DefaultBodyLimit::max(error::MAX_BODY)), doc)
}

/// Every route but the health check may be refused for access (401 without the token, 403 for
/// a foreign `Host` or `Origin`): said once here instead of on every handler.
fn refusals(doc: &mut utoipa::openapi::OpenApi) {
    use utoipa::openapi::{ContentBuilder, Ref, ResponseBuilder};
    let answer = |description: &str| {
        ResponseBuilder::new()
            .description(description)
            .content("application/json", ContentBuilder::new().schema(Some(Ref::from_schema_name("ErrorBody"))).build())
            .build()
    };
    for (path, item) in doc.paths.paths.iter_mut() {
        let operations = [&mut item.get, &mut item.post, &mut item.put, &mut item.delete, &mut item.patch];
        for op in operations.into_iter().flatten() {
            if path != "/api/health" {
                op.responses.responses.entry("401".into()).or_insert_with(|| answer("No or a wrong token").into());
            }
            op.responses.responses.entry("403".into()).or_insert_with(|| answer("A foreign Host or Origin").into());
        }
    }
}
