//! Browser-like HTTP agents: a client with its own cookie jar and one typed method per
//! public route, sending where the public nginx would route (or to one base URL).

use std::time::Duration;

use serde_json::Value;

use crate::expect::{ALL_LEVELS, FAR_FUTURE};
use crate::reply::{read_reply, Reply};
use crate::wait::wait_until;

/// Client timeout of every request a test sends (the bench allows `/initialize` 20 s).
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);

/// Where requests go.
#[derive(Debug, Clone)]
pub enum Routes {
    /// Straight to the nodes, routed like the public nginx server does:
    /// condition and graph routes to the worker owning the UUID, the rest to the coordinator.
    /// With N workers, the default placement map: first hex digit mod N (for two, its parity).
    Direct { coordinator: String, workers: Vec<String> },
    /// Everything to one public base URL (nginx).
    Public(String),
}

impl Routes {
    pub fn url(&self, path: &str) -> String {
        match self {
            Routes::Public(base) => format!("{base}{path}"),
            Routes::Direct { coordinator, workers } => match uuid_of_worker_route(path) {
                Some(uuid) => format!("{}{path}", workers[default_cell(uuid, workers.len())]),
                None => format!("{coordinator}{path}"),
            },
        }
    }
}

/// The UUID of `/api/condition/<uuid>...` or `/api/isu/<uuid>/graph...`, the worker-owned routes.
fn uuid_of_worker_route(path: &str) -> Option<&str> {
    let path = path.split('?').next().unwrap_or(path);
    if let Some(rest) = path.strip_prefix("/api/condition/") {
        return Some(rest);
    }
    let rest = path.strip_prefix("/api/isu/")?;
    let (uuid, tail) = rest.split_once('/')?;
    (tail == "graph").then_some(uuid)
}

/// 0 (worker A) when the UUID's first hex digit is even, 1 (worker B) when odd.
/// Written out here (not `shared::placement`) so the tests check the documented rule.
pub fn shard_index(uuid: &str) -> usize {
    default_cell(uuid, 2)
}

/// The cell of `uuid` in a new map of `cells` cells: its first hex digit mod `cells`.
pub fn default_cell(uuid: &str, cells: usize) -> usize {
    match uuid.chars().next().and_then(|first| first.to_digit(16)) {
        Some(digit) => digit as usize % cells,
        None => 0,
    }
}

/// One browser-like client with its own cookie jar.
#[derive(Clone)]
pub struct Agent {
    client: reqwest::Client,
    routes: Routes,
}

impl Agent {
    pub fn new(routes: Routes) -> Agent {
        let client = reqwest::Client::builder()
            .cookie_store(true)
            .no_proxy()
            .timeout(REQUEST_TIMEOUT)
            .build()
            .expect("building an HTTP client");
        Agent { client, routes }
    }

    pub fn url(&self, path: &str) -> String {
        self.routes.url(path)
    }

    /// The same client (and session) sending to other routes.
    pub fn with_routes(&self, routes: Routes) -> Agent {
        Agent {
            client: self.client.clone(),
            routes,
        }
    }

    /// `GET path` with extra headers.
    pub async fn get_with(&self, path: &str, headers: &[(&str, &str)]) -> Reply {
        let mut request = self.client.get(self.url(path));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        self.send(request).await
    }

    pub async fn send(&self, request: reqwest::RequestBuilder) -> Reply {
        let request = request.build().expect("a well-formed request");
        let described = format!("{} {}", request.method(), request.url());
        let response = self
            .client
            .execute(request)
            .await
            .unwrap_or_else(|error| panic!("{described}: {error}"));
        read_reply(described, response).await
    }

    pub async fn get(&self, path: &str) -> Reply {
        self.send(self.client.get(self.url(path))).await
    }

    /// `GET path`; a transport error is returned, not a panic.
    pub async fn try_get(&self, path: &str) -> Result<Reply, reqwest::Error> {
        let url = self.url(path);
        let response = self.client.get(&url).send().await?;
        Ok(read_reply(format!("GET {url}"), response).await)
    }

    pub async fn post_empty(&self, path: &str) -> Reply {
        self.send(self.client.post(self.url(path))).await
    }

    pub async fn post_json(&self, path: &str, body: &str) -> Reply {
        self.send(
            self.client
                .post(self.url(path))
                .header("content-type", "application/json")
                .body(body.to_owned()),
        )
        .await
    }

    /// `POST /api/auth` with this `Authorization` header (none when `None`).
    pub async fn auth(&self, authorization: Option<&str>) -> Reply {
        let mut request = self.client.post(self.url("/api/auth"));
        if let Some(authorization) = authorization {
            request = request.header("authorization", authorization);
        }
        self.send(request).await
    }

    pub async fn me(&self) -> Reply {
        self.get("/api/user/me").await
    }

    pub async fn signout(&self) -> Reply {
        self.post_empty("/api/signout").await
    }

    pub async fn isu_list(&self) -> Reply {
        self.get("/api/isu").await
    }

    /// `POST /api/isu` as the frontend and the bench send it; no `image` part when `image` is `None`.
    pub async fn register(&self, uuid: &str, name: &str, image: Option<&[u8]>) -> Reply {
        self.register_with(uuid, name, image, &[]).await
    }

    /// [`Agent::register`] with extra headers.
    pub async fn register_with(&self, uuid: &str, name: &str, image: Option<&[u8]>, headers: &[(&str, &str)]) -> Reply {
        let mut request = self.registration(uuid, name, image);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        self.send(request).await
    }

    /// [`Agent::register`] as the bench's client sends it, giving up after `timeout`: the
    /// transport error (a timeout) is returned, not a panic.
    pub async fn try_register(&self, uuid: &str, name: &str, timeout: Duration) -> Result<Reply, reqwest::Error> {
        let response = self.registration(uuid, name, None).timeout(timeout).send().await?;
        Ok(read_reply(format!("POST /api/isu ({uuid})"), response).await)
    }

    /// `POST /api/isu`'s multipart form; no `image` part when `image` is `None`.
    fn registration(&self, uuid: &str, name: &str, image: Option<&[u8]>) -> reqwest::RequestBuilder {
        let mut form = reqwest::multipart::Form::new()
            .text("jia_isu_uuid", uuid.to_owned())
            .text("isu_name", name.to_owned());
        if let Some(image) = image {
            let part = reqwest::multipart::Part::bytes(image.to_vec())
                .file_name("image.jpeg")
                .mime_str("image/jpeg")
                .expect("a valid MIME type");
            form = form.part("image", part);
        }
        self.client.post(self.url("/api/isu")).multipart(form)
    }

    pub async fn isu(&self, uuid: &str) -> Reply {
        self.get(&format!("/api/isu/{uuid}")).await
    }

    pub async fn icon(&self, uuid: &str) -> Reply {
        self.get(&format!("/api/isu/{uuid}/icon")).await
    }

    /// `GET /api/condition/<uuid>?<query>`.
    pub async fn conditions(&self, uuid: &str, query: &str) -> Reply {
        self.get(&format!("/api/condition/{uuid}?{query}")).await
    }

    pub async fn graph(&self, uuid: &str, datetime: i64) -> Reply {
        self.get(&format!("/api/isu/{uuid}/graph?datetime={datetime}")).await
    }

    pub async fn trend(&self) -> Reply {
        self.get("/api/trend").await
    }

    /// The JSON items of an all-levels condition list ending at `end_time` (exclusive); asserts 200.
    pub async fn condition_items(&self, uuid: &str, end_time: i64) -> Vec<Value> {
        let reply = self
            .conditions(uuid, &format!("end_time={end_time}&condition_level={ALL_LEVELS}"))
            .await;
        reply
            .json(200)
            .as_array()
            .expect("a condition list is an array")
            .clone()
    }

    /// Waits until the ISU's condition list (all levels, before `FAR_FUTURE`) is not empty.
    pub async fn first_conditions(&self, uuid: &str, what: &str, timeout: Duration) -> Vec<Value> {
        wait_until(what, timeout, || async {
            let items = self.condition_items(uuid, FAR_FUTURE).await;
            (!items.is_empty()).then_some(items)
        })
        .await
    }
}
