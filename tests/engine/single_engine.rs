//! One engine per data dir (contract §4), in-process: a second `Engine::start` on a data
//! dir in use is refused with a typed error naming the running one, before it touches anything
//! there; the data dir is free again once the first has stopped.

use std::sync::Arc;

use nevermiss_engine::channels::desktop::LogNotifier;
use nevermiss_engine::data_dir::INSTANCE_FILE;
use nevermiss_engine::engine::{Engine, EngineConfig, StartError};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_engine_on_a_data_dir_in_use_is_a_typed_error() {
    let dir = tempfile::TempDir::new().unwrap();
    let first = Engine::start(EngineConfig::local(dir.path()), Arc::new(LogNotifier)).await.expect("the first engine starts");
    let instance_before = std::fs::read(dir.path().join(INSTANCE_FILE)).unwrap();

    match Engine::start(EngineConfig::local(dir.path()), Arc::new(LogNotifier)).await {
        Err(StartError::InUse { data_dir, pid, other }) => {
            assert_eq!(data_dir, dir.path());
            assert_eq!(pid, Some(std::process::id()), "the lock file names its holder");
            let other = other.expect("the running one's instance.json is read");
            assert_eq!(other.api_url, format!("http://{}", first.api_addr));
            assert_eq!(other.receiver_url, format!("http://{}", first.receiver_addr));
        }
        Err(other) => panic!("another error than InUse: {other}"),
        Ok(second) => {
            second.shutdown().await;
            panic!("a second engine started on a data dir in use");
        }
    }
    assert_eq!(std::fs::read(dir.path().join(INSTANCE_FILE)).unwrap(), instance_before, "the refused engine did not rewrite instance.json");

    first.shutdown().await;
    let again = Engine::start(EngineConfig::local(dir.path()), Arc::new(LogNotifier)).await.expect("the data dir is free after a stop");
    again.shutdown().await;
}

/// The admin API is loopback only: a non-loopback address is a typed error, before the data dir
/// is even created.
#[tokio::test]
async fn a_non_loopback_api_address_is_a_typed_error() {
    let dir = tempfile::TempDir::new().unwrap();
    let data = dir.path().join("data");
    let mut config = EngineConfig::local(&data);
    config.api_addr = "0.0.0.0:0".parse().unwrap();
    match Engine::start(config, Arc::new(LogNotifier)).await {
        Err(StartError::NotLoopback { addr, .. }) => assert_eq!(addr, "0.0.0.0:0".parse().unwrap()),
        Err(other) => panic!("another error than NotLoopback: {other}"),
        Ok(engine) => {
            engine.shutdown().await;
            panic!("an engine started with its admin API on 0.0.0.0");
        }
    }
    assert!(!data.exists());
}
