//! Sign-in and sessions: bare and bearer tokens, the invalid ones the official bench tries,
//! sign-out and the routes that need a session.

use std::collections::BTreeSet;

use e2e::*;
use jia_sim::jwt::{InvalidJwt, MALFORMED_TOKEN};
use serde_json::json;
use shared::dataset::generated::{ICONS, VIRTUAL_START};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_takes_bare_and_bearer_tokens_and_refuses_invalid_ones() {
    let cluster = spawn_cluster().await;
    let token = cluster.signer.sign("isucon1");

    let bench_agent = cluster.agent();
    let reply = bench_agent.auth(Some(&token)).await;
    reply.assert_empty(200);
    assert!(
        reply.set_cookies.iter().any(|cookie| !cookie.contains("Max-Age=0")),
        "{:?}",
        reply.set_cookies
    );
    assert_eq!(bench_agent.me().await.json(200), json!({"jia_user_id": "isucon1"}));

    let browser = cluster.agent();
    browser.auth(Some(&format!("Bearer {token}"))).await.assert_empty(200);
    assert_eq!(browser.me().await.json(200), json!({"jia_user_id": "isucon1"}));

    // Signing in is signing up; a second sign-in replaces the identity of the cookie.
    bench_agent
        .auth(Some(&cluster.signer.sign("newcomer")))
        .await
        .assert_empty(200);
    assert_eq!(bench_agent.me().await.json(200), json!({"jia_user_id": "newcomer"}));
    bench_agent.auth(Some(&token)).await.assert_empty(200);
    assert_eq!(bench_agent.me().await.json(200), json!({"jia_user_id": "isucon1"}));

    for case in InvalidJwt::ALL {
        let agent = cluster.agent();
        let token = cluster.signer.invalid_token(case, "isucon1");
        let reply = agent.auth(token.as_deref()).await;
        let (status, body) = if case.expected_status() == 403 {
            (403, "forbidden")
        } else {
            (400, "invalid JWT payload")
        };
        assert_eq!(
            (case.expected_status(), case.expected_body()),
            (status, body),
            "{case:?}"
        );
        reply.assert_error(status, body);
        assert!(reply.set_cookies.is_empty(), "{case:?} set a cookie");
        agent.me().await.assert_error(401, NOT_SIGNED_IN);
        if let Some(token) = token {
            agent
                .auth(Some(&format!("Bearer {token}")))
                .await
                .assert_error(status, body);
        }
    }
    let agent = cluster.agent();
    assert_eq!(MALFORMED_TOKEN, "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.");
    agent
        .auth(Some("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9."))
        .await
        .assert_error(403, "forbidden");
    agent.auth(Some("")).await.assert_error(403, "forbidden");
    agent
        .auth(Some(&format!("Bearer Bearer {token}")))
        .await
        .assert_error(403, "forbidden");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signout_ends_only_its_session_and_session_routes_need_a_cookie() {
    let mut cluster = spawn_cluster().await;
    let first = cluster.sign_in("isucon1").await;
    let second = cluster.sign_in("isucon1").await;
    first.signout().await.assert_empty(200);
    first.me().await.assert_error(401, NOT_SIGNED_IN);
    first.signout().await.assert_error(401, NOT_SIGNED_IN);
    first.isu_list().await.assert_error(401, NOT_SIGNED_IN);
    assert_eq!(second.me().await.json(200), json!({"jia_user_id": "isucon1"}));
    assert_eq!(second.isu_list().await.json(200), expected_isu_list("isucon1"));

    // isucon1's ISUs 1 (odd: worker B) and 2 (even: worker A).
    let owned: Vec<String> = dataset_isus_of("isucon1")
        .iter()
        .filter(|isu| isu.id <= 2)
        .map(|isu| isu.uuid.clone())
        .collect();
    assert_eq!(
        owned.iter().map(|uuid| shard_index(uuid)).collect::<BTreeSet<_>>(),
        BTreeSet::from([0, 1])
    );
    let anonymous = cluster.agent();
    anonymous.me().await.assert_error(401, NOT_SIGNED_IN);
    anonymous.signout().await.assert_error(401, NOT_SIGNED_IN);
    anonymous.isu_list().await.assert_error(401, NOT_SIGNED_IN);
    let unregistered = cluster.known_uuid('5', 1);
    anonymous
        .register(&unregistered, "anonymous", Some(ICONS[0]))
        .await
        .assert_error(401, NOT_SIGNED_IN);
    assert!(
        cluster.jia.activations().is_empty(),
        "JIA was called for an anonymous registration"
    );
    for uuid in &owned {
        for path in [
            format!("/api/isu/{uuid}"),
            format!("/api/isu/{uuid}/icon"),
            format!("/api/isu/{uuid}/graph?datetime={VIRTUAL_START}"),
            // 401 comes before parameter validation.
            format!("/api/isu/{uuid}/graph"),
            format!("/api/isu/{uuid}/graph?datetime=datetime"),
            format!("/api/condition/{uuid}?end_time={FAR_FUTURE}&condition_level={ALL_LEVELS}"),
            format!("/api/condition/{uuid}"),
            format!("/api/condition/{uuid}?end_time=end_time&condition_level=info"),
        ] {
            anonymous.get(&path).await.assert_error(401, NOT_SIGNED_IN);
            first.get(&path).await.assert_error(401, NOT_SIGNED_IN);
        }
        // The coordinator's cookie opens the workers' routes too.
        assert_eq!(second.condition_items(uuid, FAR_FUTURE).await.len(), 20);
    }
    assert_eq!(second.isu_list().await.json(200), expected_isu_list("isucon1"));
    cluster.assert_no_crash();
}
