//! The registry against a real store: what real sockets on loopback cannot show.

use super::*;
use crate::store::Synchronous;
use aiwg_contract::TransportEndpoints;

fn payload(id: &str) -> RegisterPayload {
    RegisterPayload {
        executor_id: id.into(),
        a2a_instance_id: None,
        name: "e".into(),
        version: "1".into(),
        spec_version: "1.0.0".into(),
        transport_endpoints: TransportEndpoints { rest: "http://127.0.0.1:1".into(), ws: "ws://x".into(), grpc: None },
        capabilities: vec![],
    }
}

/// The peer address cannot be faked over real loopback sockets, so the one-time rotation on the first
/// non-loopback registration is tested here, against a real store.
#[tokio::test]
async fn first_non_loopback_registration_rotates_once() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _writer) =
        crate::store::sqlite::open(dir.path(), Synchronous::Normal, 16, Default::default()).await.unwrap();
    let registry = Registry::load(store.clone()).await.unwrap();
    let id = "c3d4e5f6-a7b8-9012-cdef-345678901234";
    let loopback: IpAddr = "127.0.0.1".parse().unwrap();
    let lan: IpAddr = "192.168.1.42".parse().unwrap();

    let first = registry.register(&payload(id), loopback, None, 10).await.unwrap();
    assert!(!first.rotated_for_non_loopback);
    let again = registry.register(&payload(id), loopback, Some(&first.token), 10).await.unwrap();
    assert_eq!(again.token, first.token, "loopback re-register with the token keeps it");

    let lan1 = registry.register(&payload(id), lan, Some(&first.token), 10).await.unwrap();
    assert!(lan1.rotated_for_non_loopback);
    assert_ne!(lan1.token, first.token, "rotated even though the current token was presented");
    assert!(matches!(registry.authenticate(id, Some(&first.token)), Err(Error::TokenInvalid(_))));
    registry.authenticate(id, Some(&lan1.token)).unwrap();

    let lan2 = registry.register(&payload(id), lan, Some(&lan1.token), 10).await.unwrap();
    assert!(!lan2.rotated_for_non_loopback, "only the first non-loopback registration rotates");
    assert_eq!(lan2.token, lan1.token);

    // The rotation is remembered across a restart.
    let reloaded = Registry::load(store).await.unwrap();
    let lan3 = reloaded.register(&payload(id), lan, Some(&lan1.token), 10).await.unwrap();
    assert!(!lan3.rotated_for_non_loopback);
    assert_eq!(lan3.token, lan1.token);

    // A brand-new executor from the LAN has nothing to rotate.
    let fresh = registry.register(&payload("550e8400-e29b-41d4-a716-446655440000"), lan, None, 10).await.unwrap();
    assert!(!fresh.rotated_for_non_loopback);
}
